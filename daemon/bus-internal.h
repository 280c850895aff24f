/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the files of the D-Bus glue share: bus.c (the connection, the name, the counters' timer
 * and signals), bus-manager.c (the org.perfrelay1.Manager object), bus-monitor.c (Subscribe()
 * and the org.perfrelay1.Monitor objects) and bus-stats.c (GetStats()). Main thread only. */
#pragma once

#include <systemd/sd-bus.h>

#include "bus.h"
#include "json-util.h"
#include "list.h"
#include "ratelimit.h"
#include "request.h"
#include "time-util.h"

/* Counters are compared, and PropertiesChanged and EventsLost emitted, at most this often. */
#define STATS_INTERVAL_USEC USEC_PER_SEC
/* The window of BusEventsPerSecond=: at most that many Event signals per subscriber in it. */
#define RATE_WINDOW_USEC    USEC_PER_SEC
/* A Subscribe() filter becomes a request of depth 3 ({"subscribe":{"pid":[1]}}). */
#define FILTER_JSON_DEPTH   4u

typedef struct BusSubscriber BusSubscriber;
typedef struct BusCapture BusCapture; /* bus-capture.c */

/* One Subscribe() call: a hub client whose JSON lines the main thread takes from the hub
 * (hub_client_consume(), with each event's type and timestamp) and sends to `sender` as
 * signals. */
struct BusSubscriber {
	Bus *bus;
	LIST_FIELDS(BusSubscriber, subscribers);
	uint64_t id;
	char *path;        /* /org/perfrelay1/monitor/<id> */
	char *sender;      /* the subscriber's unique bus name */
	uid_t uid;         /* its effective uid when it subscribed */
	Subscription *sub; /* read by reader threads through the hub while attached */
	char *filter_text; /* subscription_to_json(sub): the Filter property */
	HubClient *client;
	sd_event_source *window_timer; /* on while drops wait to be told in a Dropped signal */
	sd_bus_slot *slot;             /* the monitor object */
	sd_bus_track *track;           /* the subscriber's name: when it goes, so does the monitor */
	RateLimit rate;                /* BusEventsPerSecond= per RATE_WINDOW_USEC, CLOCK_MONOTONIC usec */
	uint64_t pending_drops;        /* dropped since the last Dropped signal */
	uint64_t dropped_at;           /* CLOCK_MONOTONIC usec of the last Dropped signal; 0: none */
	uint64_t delivered;            /* Event signals sent */
	uint64_t dropped; /* events taken from the hub but not sent: over the rate, or sd-bus refused */
	bool charged;     /* counted against its uid with the socket's clients (users.h) */
	uint64_t charged_bytes; /* its queues */
};

struct Bus {
	BusHost host;
	const Config *config; /* the manager's; replaced by bus_set_config() on reload */
	sd_event *event;
	sd_bus *bus;
	sd_event_source *stats_timer;
	sd_event_source *gone_source; /* deferred cleanup after the connection was lost */
	bool gone;
	StatsTotals last;         /* the counters as of the last PropertiesChanged (or start) */
	uint64_t *lost_signalled; /* per ring, in reader order: lost count as of the last EventsLost */
	size_t n_rings;

	BusSubscriber *subscribers;
	size_t n_subscribers;
	BusCapture *captures; /* the capture objects (bus-capture.c) */
	uint64_t next_id;
	uint64_t gone_delivered, gone_dropped; /* subscribers that left */
};

static inline const char *strna(const char *s) {
	return s ?: "n/a";
}

/* The daemon's counters now (BusHost.stats_sources). */
static inline StatsSources bus_stats_sources(Bus *b) {
	StatsSources src = {};

	b->host.stats_sources(b->host.userdata, &src);
	return src;
}

/* The event loop's CLOCK_MONOTONIC time of this iteration, in usec. */
uint64_t bus_now(Bus *b);
/* Methods that change state need root: 0, or an AccessDenied error set on `error`. */
int bus_check_root(sd_bus_message *message, const char *what, sd_bus_error *error);
/* The sender's effective uid, as the bus recorded it (or from /proc where it has none). */
int bus_sender_euid(sd_bus_message *message, uid_t *ret);
/* Who reads other peers' metadata (their uids, pids, filters): root sees every peer's, anyone
 * else only their own uid's (docs/security.md). A caller whose uid is unknown sees none. */
#define BUS_VIEWER_NOBODY ((uid_t) -1)
uid_t bus_viewer(sd_bus_message *message);
static inline bool bus_viewer_sees(uid_t viewer, uid_t owner) {
	return viewer == 0 || (viewer != BUS_VIEWER_NOBODY && viewer == owner);
}

/* bus-manager.c */
extern const sd_bus_vtable bus_manager_vtable[];

/* bus-stats.c */
int bus_method_get_stats(sd_bus_message *message, void *userdata, sd_bus_error *error);
int bus_method_get_cpu_stats(sd_bus_message *message, void *userdata, sd_bus_error *error);
int bus_method_get_reader_stats(sd_bus_message *message, void *userdata, sd_bus_error *error);

/* bus-producers.c */
int bus_method_list_producers(sd_bus_message *message, void *userdata, sd_bus_error *error);

/* bus-monitor.c */
int bus_method_subscribe(sd_bus_message *message, void *userdata, sd_bus_error *error);
int bus_method_unsubscribe(sd_bus_message *message, void *userdata, sd_bus_error *error);
/* Reads an a{sv} filter (types as, pid au, uid au, comm as, unit as) in the socket protocol's
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
 * AllowGroups= lets a group see every event, not act (docs/security.md). */
int bus_require_control(Bus *b, sd_bus_message *message, const char *method, uid_t *ret_uid, sd_bus_error *error);
/* Root and AllowGroups= members see everything, others their own uid, as on the socket. */
int bus_sender_access(
	Bus *b, sd_bus_message *message, uid_t *ret_uid, SubscriptionAccess *ret_access, sd_bus_error *error);

/* bus-recorder.c */
int bus_method_snapshot(sd_bus_message *message, void *userdata, sd_bus_error *error);

/* bus-capture.c */
int bus_method_start_capture(sd_bus_message *message, void *userdata, sd_bus_error *error);
int bus_method_stop_capture(sd_bus_message *message, void *userdata, sd_bus_error *error);
/* Removes every capture object (the captures themselves go with the manager). */
void bus_captures_free_all(Bus *b);
/* Stops every capture and removes its object. */
void bus_captures_end_all(Bus *b);

/* bus-counters.c */
int bus_method_get_unit_counters(sd_bus_message *message, void *userdata, sd_bus_error *error);

/* Removes every monitor (its hub client first: its queued events count as dropped). */
void bus_monitors_free_all(Bus *b);
/* Removes the monitors whose every-event access came from a group `config` no longer lists. */
void bus_monitors_revoke(Bus *b, const Config *config);
/* Adds the monitors' figures (those now) to *st. */
void bus_monitors_add_stats(const Bus *b, BusStats *st);
