/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the files of the bus share: bus.c (the connection, the name, the parts), bus-access.c
 * and bus-monitor.c (Subscribe() and the org.perfrelay1.Monitor objects). Main thread only. */
#pragma once

#include <systemd/sd-bus.h>

#include "api/bus.h"
#include "json-util.h"
#include "list.h"
#include "api/ratelimit.h"
#include "hub/request.h"
#include "api/server.h"
#include "time-util.h"

/* The window of BusEventsPerSecond=: at most that many Event signals per subscriber in it. */
#define RATE_WINDOW_USEC  USEC_PER_SEC
/* A Subscribe() filter becomes a request of depth 3 ({"subscribe":{"pid":[1]}}). */
#define FILTER_JSON_DEPTH 4u
/* Parts on the bus: the monitors', the manager's and one per feature. */
#define BUS_PARTS_MAX     32u

/* Who a unique name is: its uid and groups as the bus recorded them at connect, asked once per
 * name (one GetConnectionCredentials call, synchronous, on the main loop) and kept for the next
 * calls. A unique name is never reused on a bus, so an entry is never wrong, only old: the
 * oldest is replaced. */
#define BUS_SENDERS_KEPT 64u
typedef struct BusSender {
	char name[32]; /* ":1.123"; "" for a free entry */
	uid_t uid;
	gid_t *groups; /* NULL when the bus said none (no group applies) */
	size_t n_groups;
} BusSender;

/* The reading methods (GetStats(), ListClients(), ListProducers(), ListProcesses(),
 * GetUnitCounters()): at most BUS_READS_PER_SECOND per uid but root, so that a user's loop
 * costs the main loop a bounded share. BUS_READERS_KEPT uids at once, twice the system bus's
 * default connection limit (2048); past it a new uid is served unlimited rather than refused:
 * the limit shares the main loop, and many uids (a user's subordinate ones) must not lock out
 * another user's reader (perfrelay-metrics) by filling the table. */
#define BUS_READS_PER_SECOND 100u
#define BUS_READERS_KEPT     4096u
typedef struct BusReader {
	uid_t uid;
	RateLimit rate; /* CLOCK_MONOTONIC usec */
} BusReader;

typedef struct BusSubscriber BusSubscriber;

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
	bool pooled;      /* and the users' pool (not root, AllowGroups=, ControlGroups=) */
	uint64_t charged_bytes; /* its queues */
};

struct Bus {
	ApiOptions o; /* a copy of the manager's; replaced by bus_set_options() on reload */
	sd_event *event;
	sd_bus *bus;
	Hub *hub;
	Users *users;
	sd_event_source *gone_source; /* deferred cleanup after the connection was lost */
	bool gone;
	BusPart parts[BUS_PARTS_MAX];
	size_t n_parts;

	BusSubscriber *subscribers;
	size_t n_subscribers;
	uint64_t next_id;
	uint64_t gone_delivered, gone_dropped; /* subscribers that left */

	BusSender senders[BUS_SENDERS_KEPT];
	size_t next_sender; /* the entry replaced next (the oldest) */
	BusReader readers[BUS_READERS_KEPT];
	size_t n_readers;
	uint64_t reads_limited;
};

/* bus-access.c */
void bus_senders_free(Bus *b);

/* bus-monitor.c: Subscribe() and Unsubscribe(), the monitors' part */
extern const sd_bus_vtable bus_monitor_manager_vtable[];
/* Removes every monitor (its hub client first: its queued events count as dropped). */
void bus_monitors_free_all(Bus *b);
/* Removes the monitors whose every-event access came from a group b->o no longer lists. */
void bus_monitors_revoke(Bus *b);
/* Adds the monitors' figures (those now) to *st. */
void bus_monitors_add_stats(const Bus *b, BusStats *st);
