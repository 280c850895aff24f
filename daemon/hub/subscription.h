/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A subscription: what one client asked for (its filters, format and overflow policy) and what
 * the daemon decided it may see. Made by request_parse() (request.h) or by the bus's Subscribe();
 * read by the filter on reader threads. Pure: no I/O, no logging. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each filter list holds at most this many entries, so matching stays a short scan. */
#define SUBSCRIPTION_MAX_ENTRIES      64u
/* TASK_COMM_LEN - 1: a longer name can never equal a task's comm. */
#define SUBSCRIPTION_COMM_MAX         15u
/* systemd's UNIT_NAME_MAX - 1. */
#define SUBSCRIPTION_UNIT_MAX         255u
#define SUBSCRIPTION_CONTAINER_MAX    511u /* an image's name: CONTAINER_IMAGE_MAX */
/* Type ids below this are kept in a bitmask (every built-in type is); others in a list. */
#define SUBSCRIPTION_TYPE_MASK_BITS   64u
/* Third-party type names and "where" field names: C identifiers (BTFREC_MAX_NAME). */
#define SUBSCRIPTION_NAME_MAX         63u
#define SUBSCRIPTION_MAX_WHERE        8u   /* conditions of one "where" */
#define SUBSCRIPTION_WHERE_STRING_MAX 255u /* bytes of a string a condition compares with */
/* A history cursor's text, its NUL included (features/history/history-store.h checks it). */
#define SUBSCRIPTION_CURSOR_MAX       96u
/* Whether the subscription filters by ancestor (it then needs the event's lineage). */
#define subscription_has_ancestor(s)  ((s)->ancestor != NULL)

typedef enum SubscriptionFormat {
	SUBSCRIPTION_FORMAT_JSON,
	SUBSCRIPTION_FORMAT_BINARY,
} SubscriptionFormat;

typedef enum SubscriptionOverflow {
	SUBSCRIPTION_OVERFLOW_DROP,
	SUBSCRIPTION_OVERFLOW_DISCONNECT,
} SubscriptionOverflow;

/* What the client may see at all, decided by the daemon from the peer's credentials, never by
 * the request. NONE is the default so that a subscription nobody vetted matches nothing. */
typedef enum SubscriptionAccess {
	SUBSCRIPTION_ACCESS_NONE,
	SUBSCRIPTION_ACCESS_UID, /* events whose uid is access_uid */
	SUBSCRIPTION_ACCESS_ALL, /* root and members of AllowGroups= */
} SubscriptionAccess;

/* A parsed request. Lists are sorted and without duplicates; an empty list means the field
 * does not filter. Read-only once the client is attached: reader threads match against it. */
/* One condition of "where": the field called `field` equals the value. */
typedef struct SubscriptionWhere {
	char field[SUBSCRIPTION_NAME_MAX + 1];
	bool is_string;
	bool is_negative; /* an integer below 0: value.i; else value.u */
	union {
		uint64_t u;
		int64_t i;
	} value;
	char string[SUBSCRIPTION_WHERE_STRING_MAX + 1];
	size_t string_len;
} SubscriptionWhere;

/* The processes an "ancestor" filter names: one of these comms, exec ids or units, any one of
 * them, at any depth. */
typedef struct SubscriptionAncestor {
	char comms[SUBSCRIPTION_MAX_ENTRIES][SUBSCRIPTION_COMM_MAX + 1];
	size_t n_comms;
	uint64_t exec_ids[SUBSCRIPTION_MAX_ENTRIES];
	size_t n_exec_ids;
	char *units[SUBSCRIPTION_MAX_ENTRIES]; /* owned */
	size_t n_units;
	/* "incomplete": true: an event whose lineage the daemon cannot walk to its end (a process
	 * the table does not hold, or a tree deeper than it walks) matches too. Fail closed: what a
	 * security consumer (an exporter's Ancestors=) must not miss when a user has pushed an
	 * ancestor out of the table. */
	bool incomplete;
} SubscriptionAncestor;

typedef struct Subscription {
	SubscriptionAccess access;
	uint32_t access_uid;
	/* "ancestor": only events of processes that descend from a process it names
	 * (docs/protocol.md). Owned; NULL, as for most subscriptions, when the request has none:
	 * its lists are allocated only for the subscriptions that use them. */
	struct SubscriptionAncestor *ancestor;

	uint64_t type_mask;                       /* bit t: type id t < SUBSCRIPTION_TYPE_MASK_BITS */
	uint16_t types[SUBSCRIPTION_MAX_ENTRIES]; /* type ids >= SUBSCRIPTION_TYPE_MASK_BITS */
	size_t n_types;
	/* Names of third-party types (from their producers' BTF), matched against decoded events. */
	char type_names[SUBSCRIPTION_MAX_ENTRIES][SUBSCRIPTION_NAME_MAX + 1];
	size_t n_type_names;
	/* "where": only third-party events decoded from BTF whose fields all match. */
	SubscriptionWhere where[SUBSCRIPTION_MAX_WHERE];
	size_t n_where;
	uint32_t pids[SUBSCRIPTION_MAX_ENTRIES];
	size_t n_pids;
	/* "capture": packets of these captures only (docs/capture.md); other types pass. */
	uint32_t captures[SUBSCRIPTION_MAX_ENTRIES];
	size_t n_captures;
	uint32_t uids[SUBSCRIPTION_MAX_ENTRIES];
	size_t n_uids;
	char comms[SUBSCRIPTION_MAX_ENTRIES][SUBSCRIPTION_COMM_MAX + 1];
	size_t n_comms;
	char *units[SUBSCRIPTION_MAX_ENTRIES]; /* owned */
	size_t n_units;
	/* "container": a container's name, image, or id (its first 12 hex digits or more), any one
	 * of them (docs/containers.md). */
	char *containers[SUBSCRIPTION_MAX_ENTRIES]; /* owned */
	size_t n_containers;

	SubscriptionFormat format;
	SubscriptionOverflow overflow;
	bool unit_frames; /* "units": true: binary clients get a unit frame before each record with one */
	bool shared;      /* "shared": true: the client reads a shared ring if the daemon offers one */
	/* "notices": true: as a member of a shared ring set, the client takes the notices of records
	 * lost upstream on its socket (hub.h, HubNotice; libperfrelay asks for them). */
	bool notices;
	/* The history (docs/history.md): a subscription with any of "after_cursor", "since",
	 * "until", "cursors" or "follow" is served from it (history is then true). Times are
	 * CLOCK_REALTIME nanoseconds. */
	bool history;
	bool cursors; /* each event line carries its "cursor" */
	bool follow;  /* false: the stream ends where the history ends (perfrelayctl query) */
	bool has_after_cursor, has_since, has_until;
	char after_cursor[SUBSCRIPTION_CURSOR_MAX];
	uint64_t since_ns, until_ns;
} Subscription;

Subscription *subscription_free(Subscription *s); /* accepts NULL; returns NULL */
static inline void subscription_freep(Subscription **s) {
	if (*s)
		subscription_free(*s);
}

/* The record types below SUBSCRIPTION_TYPE_MASK_BITS it may match (bit t: type t): those it
 * names, or without a type filter every type not sent only on request. What the kernel must
 * make for it (docs/pipeline.md, "Demand"). */
uint64_t subscription_demand(const Subscription *s);
uint64_t subscription_demand_all(void); /* that of a subscription without a type filter */

/* True if the subscription filters on the unit (the reader then needs the event's unit). */
static inline bool subscription_wants_unit(const Subscription *s) {
	return s->n_units > 0;
}

const char *subscription_format_to_string(SubscriptionFormat f);
/* A deep copy of s. Returns 0 and the copy in *ret, or -ENOMEM. */
int subscription_dup(const Subscription *s, Subscription **ret);

/* The filters of s as one compact JSON object in the request's own terms, e.g.
 * {"types":["exec"],"pid":[1]} ("{}" when nothing filters), for D-Bus ListClients and the
 * monitors' Filter property. Returns 0 and a malloc'd string in *ret, or -ENOMEM. */
int subscription_to_json(const Subscription *s, char **ret);
