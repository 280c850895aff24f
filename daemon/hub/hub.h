/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The hand-off from reader threads to subscribers: each client has one bounded single-producer
 * single-consumer byte queue per reader thread. A reader encodes an event once per format and
 * copies it into the queues of the clients that want it; the main thread writes the queues to
 * the clients' fds with writev. No lock or allocation per event; a full queue drops (counted)
 * and never blocks a reader.
 *
 * Formats: JSON clients get encode_json() lines, binary clients frames of a little-endian u32
 * length and the record exactly as the producer wrote it (docs/protocol.md). Losses are
 * reported in the client's format: a "lost" JSON line, or a PERFRELAY_TYPE_LOST record.
 *
 * Threads: hub_reader_*() and hub_publish() run on reader thread `reader` only; everything
 * else runs on the main thread. The client list of each reader is guarded by a per-reader
 * mutex that the reader holds for a whole batch, so adding or removing a client waits for at
 * most one batch and a reader never sees a client being freed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "decode/decode.h"
#include "macro.h"
#include "hub/proctable.h"
#include "kernel/containers.h"
#include "shared-ring.h"

typedef struct Hub Hub;
typedef struct HubClient HubClient;
typedef struct SharedRing SharedRing;

typedef enum HubFormat {
	HUB_FORMAT_JSON,
	HUB_FORMAT_BINARY,
	/* JSON lines for a consumer inside the daemon (the D-Bus monitors): each behind a small
	 * tag with its type and timestamp, handed over by hub_client_consume(), never written to
	 * an fd. */
	HUB_FORMAT_JSON_TAGGED,
	_HUB_FORMAT_MAX,
} HubFormat;

typedef enum HubOverflow {
	HUB_OVERFLOW_DROP,       /* lose the client's own events, then tell it how many */
	HUB_OVERFLOW_DISCONNECT, /* close the client on its first loss */
} HubOverflow;

/* Where an event's cgroup is: its systemd unit and its container (containers.h), each NULL if
 * none or unknown. */
typedef struct HubOrigin {
	const char *unit;
	const Container *container;
} HubOrigin;

/* Decides on a reader thread whether a client wants an event. `origin` is never NULL;
 * `lineage` the event's ancestors, walked on first use (NULL: none known). Must not block or
 * allocate. */
typedef bool (*HubMatchFn)(const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage);
/* Whether a client wants records of any of `types`, or (third_party) of any third-party type at
 * all: its subscription's type filter only, for notices about those types (hub_publish_notice()). */
typedef bool (*HubWantsTypesFn)(const void *filter, const uint16_t *types, size_t n_types, bool third_party);

/* A client's consumer (HubClientOptions.flush). */
typedef void (*HubFlushFn)(HubClient *c, void *userdata);

typedef struct HubClientOptions {
	HubFormat format;
	HubOverflow overflow;
	/* HUB_FORMAT_BINARY: a PERFRELAY_TYPE_UNIT frame before each record whose cgroup has a
	 * known unit (binary records carry the cgroup id only). */
	bool unit_frames;
	uint64_t queue_bytes;        /* per client, split between the reader queues */
	HubMatchFn match;            /* NULL: every event */
	HubWantsTypesFn wants_types; /* NULL: every notice */
	const void *filter;          /* owned by the caller; must outlive the client */
	void *userdata;              /* the caller's, for hub_client_userdata() (main thread) */
	/* The client's consumer: the main thread's flush loop calls it (with userdata) when the
	 * client may have output; it writes the queues out (hub_client_flush()) or takes them
	 * (hub_client_consume()). NULL: hub_client_flush() to the fd. */
	HubFlushFn flush;
	/* Not a queue but a shared ring set (shared-ring-writer.h), written in place of the client's queues:
	 * nothing is ever dropped for lack of room (its members are moved on instead), no lost
	 * notice is written, and the flush loop has nothing to write. format JSON or BINARY. */
	SharedRing *shared;
	/* The client sees only events of uid redact_uid (the access class "uid"): the ancestors an
	 * exec event lists are kept only where the process table says they ran as that uid (an
	 * ancestor is another process: root's sshd, sudo, cron), the others left out, in the JSON
	 * and the binary record alike. */
	bool redact;
	uint32_t redact_uid;
	/* The record types it may want (bit t: type t < 64; subscription_demand()): while it is
	 * attached the kernel makes them (hub_demand()). */
	uint64_t demand;
	/* It never wants a record of a type outside `demand` (nor any of a type >= 64): while the
	 * clients of a reader are all such, the reader publishes nothing else (the history's
	 * client, which would otherwise make every reader do per-event work for records it does
	 * not take: hub_reader_wants_all()). */
	bool only_demand;
} HubClientOptions;

/* One whole frame of a HUB_FORMAT_JSON_TAGGED client, as hub_client_consume() hands it over. */
typedef struct HubFrame {
	uint16_t type;    /* the record's type id, or PERFRELAY_TYPE_LOST for a "lost" notice */
	bool known;       /* a built-in type: its name is event_type_to_string(type) */
	uint64_t value;   /* the event's ts (hdr.ts_ns), or the notice's count */
	bool notice;      /* a notice of records lost upstream (HubNotice): `line` describes it */
	const char *line; /* the JSON line without its newline, NUL-terminated */
	size_t len;
} HubFrame;

/* offered = sent + dropped + the events in the queues; after hub_client_discard() the queues
 * are empty and offered = sent + dropped exactly. */
typedef struct HubClientStats {
	uint64_t offered; /* events that matched the client */
	uint64_t queued;  /* events put in its queues */
	uint64_t sent;    /* events whose frame was wholly written to its fd */
	uint64_t dropped; /* events lost: a full queue, or left queued by hub_client_discard() */
	uint64_t bytes_sent;
	uint64_t queued_bytes; /* bytes waiting in the queues now */
} HubClientStats;

int hub_new(unsigned n_readers, Hub **ret);

/* Kernel-side demand (docs/pipeline.md, "Demand"): the union of the attached clients'
 * HubClientOptions.demand. fn (main thread) is called when it changes: from hub_client_attach()
 * before it returns, so a subscription is acknowledged after the kernel was told, and from
 * hub_client_detach(). */
typedef void (*HubDemandFn)(void *userdata);
void hub_set_demand_fn(Hub *h, HubDemandFn fn, void *userdata);
uint64_t hub_demand(const Hub *h);
/* The process table the readers feed and the "ancestor" filters read (proctable.h): the hub's,
 * as the clients it serves are. */
ProcTable *hub_procs(const Hub *h);
/* The last n slots are the main thread's (its own events, e.g. the units' counters: few and
 * small): each client's queue there is HUB_SMALL_QUEUE bytes, outside its queue_bytes budget,
 * which the reader slots share, and allocated when the main thread first writes into it (most
 * clients never get its events). Before any client. */
#define HUB_SMALL_QUEUE (256u * 1024u)
int hub_set_small_slots(Hub *h, unsigned n);
/* A process table of `entries` (ProcessTableEntries=) in place of the default one: before the
 * readers start and before any client. */
int hub_set_process_table(Hub *h, size_t entries);
unsigned hub_n_slots(const Hub *h);       /* readers' slots and the main thread's */
unsigned hub_n_small_slots(const Hub *h); /* the main thread's, the last ones */
Hub *hub_free(Hub *h);                    /* clients must have been removed */
DEFINE_TRIVIAL_CLEANUP_FUNC(Hub *, hub_free);

/* An eventfd the readers signal when they queued output (at the end of a batch, and within a
 * batch each time a client's queue received a quarter of its size), only when the main thread
 * said it was going to sleep. The main thread then flushes the clients. */
int hub_notify_fd(const Hub *h);

int hub_client_new(Hub *h, int fd, const HubClientOptions *o, HubClient **ret);
/* Publishes the client to every reader. */
int hub_client_attach(Hub *h, HubClient *c);
/* Removes the client from every reader; after it returns no reader touches it. */
void hub_client_detach(Hub *h, HubClient *c);
/* Detached clients only, main thread: the client will never be written to again (it left, was
 * closed, or the daemon stops). The events still in its queues, and one partly written, count
 * as dropped; the queues are emptied. */
void hub_client_discard(HubClient *c);
HubClient *hub_client_free(HubClient *c); /* detached clients only; does not close fd */
DEFINE_TRIVIAL_CLEANUP_FUNC(HubClient *, hub_client_free);

int hub_client_fd(const HubClient *c);
void *hub_client_userdata(const HubClient *c);
/* Runs the client's consumer (HubClientOptions.flush). Main thread. */
void hub_client_run_flush(HubClient *c);
HubFormat hub_client_format(const HubClient *c);
void hub_client_get_stats(const HubClient *c, HubClientStats *ret);
/* The bytes its queues may hold, all of them (what a user is charged for it, users.h); 0 for a
 * member of a shared ring set. */
uint64_t hub_client_capacity(const HubClient *c);
/* True after hub_client_flush() found the fd full; the next flush clears it. */
bool hub_client_blocked(const HubClient *c);
/* True if the client asked for HUB_OVERFLOW_DISCONNECT and lost an event. From then on it is
 * offered no more events (each counts as dropped) and gets no "lost" notice. */
bool hub_client_overflowed(const HubClient *c);

/* Writes what the client's queues hold. Returns 1 if everything was written, 0 if the fd
 * would block (the caller waits for EPOLLOUT and calls again), negative errno on write errors
 * (EPIPE etc.: the caller drops the client). */
int hub_client_flush(HubClient *c);
/* HUB_FORMAT_JSON_TAGGED clients: hands every whole frame queued now to fn, reader queue by
 * reader queue in order, and frees their room; the events among them count as sent. fn must
 * not free or detach the client. Main thread. */
void hub_client_consume(HubClient *c, void (*fn)(const HubFrame *f, void *userdata), void *userdata);

/* Reader side. Between begin and end the reader holds its slot's client list. */
void hub_reader_begin(Hub *h, unsigned reader);
/* True if any client is attached to this reader (between begin and end): without clients the
 * reader skips per-event work such as resolving the unit. */
bool hub_reader_has_clients(const Hub *h, unsigned reader);
/* Between begin and end: false when every client of the reader wants only the types of
 * *ret_types (HubClientOptions.only_demand), so that a record of another type need not be
 * published at all. */
bool hub_reader_wants_all(const Hub *h, unsigned reader, uint64_t *ret_types);
/* Offers ev to every client of the reader; `origin` (NULL: neither unit nor container) is
 * matched by filters and written into JSON lines. The event is encoded at most once per format. */
void hub_publish(Hub *h, unsigned reader, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage);
/* A notice about records the kernel lost or the throttle refused (docs/protocol.md, "Lost"):
 * a "lost" notice of count 0 carrying a JSON description, offered to the clients of the slot
 * whose subscription takes one of its types. Not an event: not counted as offered or sent, and
 * never written in place of one. A shared ring set's client is passed over (its members that
 * asked get the notice on their socket: server_publish_notice()); a JSON_TAGGED consumer gets a
 * frame of type PERFRELAY_TYPE_LOST with HubFrame.notice set. Main thread, on its own slot,
 * between hub_reader_begin() and hub_reader_end(). */
#define HUB_NOTICE_MAX PERFRELAY_NOTICE_MAX /* the JSON's bytes at most; a longer one is refused */
typedef struct HubNotice {
	const uint16_t *types; /* the record types it is about */
	size_t n_types;
	bool third_party; /* about a third party's records: for clients of any third-party type */
	/* The JSON object, without newline, beginning {"type":"lost","count":0; and the same for
	 * clients that see their own uid's events only (HubClientOptions.redact). */
	const char *json, *json_redacted;
	size_t json_len, json_redacted_len;
} HubNotice;
typedef struct HubNoticeStats {
	uint64_t delivered; /* notices written into clients' queues */
	uint64_t dropped;   /* notices a client's full queue had no room for */
} HubNoticeStats;
void hub_publish_notice(Hub *h, unsigned slot, const HubNotice *n, HubNoticeStats *st);
/* Publishes the batch to the main thread; also queues the "lost" notices that were waiting
 * for room, so that a client learns of its last losses without waiting for a new event. */
void hub_reader_end(Hub *h, unsigned reader);

/* Main thread: holds every slot's lock (each reader finishes its batch first), for changes the
 * readers must see all at once, such as a shared ring's members. */
void hub_lock_all(Hub *h);
void hub_unlock_all(Hub *h);

/* Main thread, before waiting for the notify fd: returns true if a queue still holds data
 * (then flush again instead of sleeping). Arms the readers' notification. */
bool hub_prepare_sleep(Hub *h);
/* Clients with queued data, for the flush loop: calls fn for each attached client. */
void hub_foreach_client(Hub *h, void (*fn)(HubClient *c, void *userdata), void *userdata);
