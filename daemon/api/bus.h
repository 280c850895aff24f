/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon on the system bus (docs/dbus.md): the connection and the name org.perfrelay1, the
 * parts that publish on it, and one org.perfrelay1.Monitor object per event subscriber. Main
 * thread only: reader threads never see sd-bus; bus subscribers get their events through
 * ordinary hub clients whose frames the main thread takes from the hub (hub_client_consume())
 * and sends as signals. The files: bus.c (connection, parts), bus-access.c (who calls and what
 * they may do: bus-access.c), bus-monitor.c (Subscribe()). The Manager object's own part is the
 * manager's (manager-bus.c); each feature adds its own (feature.h). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "api/options.h"
#include "hub/hub.h"
#include "hub/request.h"
#include "api/users.h"

typedef struct Bus Bus;

#define BUS_NAME                  "org.perfrelay1"
#define BUS_PATH                  "/org/perfrelay1"
#define BUS_MONITOR_PATH_PREFIX   "/org/perfrelay1/monitor"
#define BUS_INTERFACE_MANAGER     "org.perfrelay1.Manager"
#define BUS_INTERFACE_MONITOR     "org.perfrelay1.Monitor"
#define BUS_INTERFACE_CAPTURE     "org.perfrelay1.Capture"
#define BUS_CAPTURE_PATH_PREFIX   "/org/perfrelay1/capture"
#define BUS_ERROR_NO_SUCH_CAPTURE "org.perfrelay1.Error.NoSuchCapture"
#define BUS_ERROR_INVALID_CONFIG  "org.perfrelay1.Error.InvalidConfig"
#define BUS_ERROR_NO_SUCH_CLIENT  "org.perfrelay1.Error.NoSuchClient"

typedef struct BusStats {
	uint64_t subscribers;   /* monitor objects now */
	uint64_t delivered;     /* Event signals sent, subscribers gone included */
	uint64_t dropped;       /* events not sent: over BusEventsPerSecond=, lost in the hub queue, or
				 * refused by sd-bus; subscribers gone included */
	uint64_t reads_limited; /* reading calls refused: over BUS_READS_PER_SECOND for their uid */
} BusStats;

/* A part of the daemon that publishes on the bus: its members of org.perfrelay1.Manager on
 * /org/perfrelay1 (sd-bus joins the vtables of one interface; each gets its own userdata), and
 * gone(), called when the connection is lost or closes, to drop objects of its own. */
typedef struct BusPart {
	const sd_bus_vtable *vtable; /* NULL: no members */
	void *userdata;
	void (*gone)(void *userdata); /* may be NULL */
} BusPart;

/* Connects to the system bus ($DBUS_SYSTEM_BUS_ADDRESS or the default socket) and attaches to
 * `event`; monitors take their queues from `hub` and are charged to `users` with the socket's
 * clients. Without a bus it logs one warning and returns 0 with *ret = NULL: the daemon runs on
 * without D-Bus. */
int bus_new(sd_event *event, const ApiOptions *options, Hub *hub, Users *users, Bus **ret);
/* Publishes a part (see BusPart). */
int bus_add_part(Bus *b, const BusPart *part);
/* Takes the name, once every part is published. Failing to take it is a warning (the objects
 * stay reachable by the unique name). */
void bus_take_name(Bus *b);
/* Tells every part the bus is gone, removes every monitor (their hub clients first), releases
 * the name and closes. Accepts NULL. */
Bus *bus_free(Bus *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(Bus *, bus_free);

/* The connection, for parts that make objects of their own (NULL once it is gone). */
sd_bus *bus_connection(Bus *b);

/* [Bus] and the subscriber limits of [Socket] apply from now on (the options are copied; their
 * group lists must stay valid until the next call or bus_free()). Accepts NULL. */
void bus_set_options(Bus *b, const ApiOptions *options);

/* PropertiesChanged for properties of org.perfrelay1.Manager (a NULL-terminated list), and
 * signals of it. Accept NULL. */
void bus_emit_manager_changed(Bus *b, char **names);
/* Writes queued messages out, for the last ones before the daemon exits. Accepts NULL. */
void bus_flush(Bus *b);

void bus_get_stats(const Bus *b, BusStats *ret); /* zeros for NULL */

/* Who calls a method, and what they may see and do (bus-access.c, docs/security.md), for every
 * part on the bus. */
/* The event loop's CLOCK_MONOTONIC time of this iteration, in usec. */
uint64_t bus_now(Bus *b);
/* Methods that change state need root: 0, or an AccessDenied error set on `error`. */
int bus_check_root(sd_bus_message *message, const char *what, sd_bus_error *error);
/* The sender's effective uid, as the bus recorded it (or from /proc where it has none). */
int bus_sender_euid(sd_bus_message *message, uid_t *ret);
/* The sender's groups (*ret malloc'd); returns how many. */
int bus_sender_groups(Bus *b, const char *sender, gid_t **ret);
/* Who reads other peers' metadata (their uids, pids, filters): root sees every peer's, anyone
 * else only their own uid's. A caller whose uid is unknown sees none. */
#define BUS_VIEWER_NOBODY ((uid_t) -1)
uid_t bus_viewer(sd_bus_message *message);
/* For the methods that read (GetStats(), ListClients(), ListProducers(), ListProcesses(),
 * GetUnitCounters()): the caller's uid and access class, as bus_sender_access(), and
 * LimitsExceeded beyond BUS_READS_PER_SECOND calls a second of one uid but root. */
int bus_require_read(
	Bus *b,
	sd_bus_message *message,
	const char *method,
	uid_t *ret_uid,
	SubscriptionAccess *ret_access,
	sd_bus_error *error);
static inline bool bus_viewer_sees(uid_t viewer, uid_t owner) {
	return viewer == 0 || (viewer != BUS_VIEWER_NOBODY && viewer == owner);
}
/* Reads an a{sv} filter (types as, pid au, uid au, comm as, unit as, ancestor_comm as,
 * ancestor_exec_id as, ancestor_unit as: the request's "ancestor") in the socket protocol's
 * terms, checked by the socket's own parser. `extra` (may be NULL) is offered each key first:
 * it returns 1 when it read the value, 0 to leave the key to the filter, or an error. */
typedef int (*BusFilterExtraFn)(sd_bus_message *message, const char *key, void *userdata, sd_bus_error *error);
int bus_read_filter(
	Bus *b,
	sd_bus_message *message,
	BusFilterExtraFn extra,
	void *userdata,
	Subscription **ret,
	sd_bus_error *error);
/* For methods that act (Snapshot, StartCapture, StopCapture): root and ControlGroups= members
 * only, AccessDenied naming the method for others; *ret_uid (may be NULL) the caller's uid.
 * AllowGroups= lets a group see every event, not act. */
int bus_require_control(Bus *b, sd_bus_message *message, const char *method, uid_t *ret_uid, sd_bus_error *error);
/* Root and AllowGroups= members see everything, others their own uid, as on the socket. */
int bus_sender_access(
	Bus *b, sd_bus_message *message, uid_t *ret_uid, SubscriptionAccess *ret_access, sd_bus_error *error);

static inline const char *strna(const char *s) {
	return s ?: "n/a";
}
