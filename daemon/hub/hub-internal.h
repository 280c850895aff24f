/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The hub's state, shared by its two sides: hub.c (the hub, its clients, and the readers'
 * side: publishing into the queues) and hub-consume.c (the main thread's side: taking frames
 * out of them). Nobody else includes this but the hub's unit test. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "event.h"
#include "hub/hub.h"

#define HUB_QUEUE_MIN        (64u * 1024u)
/* The binary lost notice: u32 length, header, u64 count. The JSON one is far shorter. */
#define HUB_LOST_MAX         64u
#define HUB_BINARY_LOST_SIZE (sizeof(struct perfrelay_hdr) + sizeof(uint64_t))
_Static_assert(sizeof(uint32_t) + HUB_BINARY_LOST_SIZE <= HUB_LOST_MAX, "binary lost notice fits");

/* What precedes each JSON line of a HUB_FORMAT_JSON_TAGGED client in its queues: what the
 * consumer needs to know about the event without parsing the line. */
typedef struct HubTag {
	uint32_t len;   /* of the JSON line that follows, newline included */
	uint16_t type;  /* the record's type id; PERFRELAY_TYPE_LOST for a lost notice */
	uint8_t flags;  /* HUB_TAG_* */
	uint8_t pad;    /* 0 */
	uint64_t value; /* the event's hdr.ts_ns, or the notice's count */
} HubTag;
_Static_assert(sizeof(HubTag) == 16, "no implicit padding");
#define HUB_TAG_KNOWN       0x1u /* a built-in type */
/* Third-party types 0x8000..0xffff, a bit each. */
#define SCHEMA_BITMAP_WORDS ((UINT16_MAX + 1u - PERFRELAY_TYPE_THIRD_PARTY_MIN) / 64u)
#define HUB_TAG_LOST        0x2u /* a "lost" notice, not an event */
#define HUB_TAG_NOTICE      0x4u /* with HUB_TAG_LOST: a notice of records lost upstream (HubNotice) */
/* The JSON lost notice, 45 bytes at most ({"type":"lost","count":<20 digits>}\n), behind a tag. */
_Static_assert(sizeof(HubTag) + 48 <= HUB_LOST_MAX, "tagged lost notice fits");

/* One client's queue for one reader: a byte ring of whole encoded events. */
typedef struct HubQueue {
	/* Written by the main thread (release) as it consumes; read by the reader (acquire). */
	_Alignas(64) uint64_t tail;
	/* Written by the reader (release) once per batch; read by the main thread (acquire). */
	_Alignas(64) uint64_t head;
	/* Reader-private. */
	uint64_t head_local;   /* bytes written, published as head at the end of the batch */
	uint64_t tail_cache;   /* last tail seen: reloaded only when the queue looks full */
	uint64_t pending_lost; /* drops not yet reported to the client by a "lost" line */
	/* Written by the reader (STAT_*), read by the main thread. */
	uint64_t offered, queued, dropped;
	/* Main thread: start of the first frame not yet wholly written (a frame boundary, <= tail
	 * and <= head), and the events among the frames before it. A frame written in part has
	 * been handed back to the reader up to tail, which may overwrite it: its end and kind are
	 * kept here (frame_end 0: not known yet, and then frame == tail). */
	uint64_t frame;
	uint64_t frame_end;
	bool frame_event;
	uint64_t sent;
	uint64_t unsent; /* main thread: events left in the queue by hub_client_discard() */
	uint8_t *buf;
	uint64_t mask;
	/* Reader-private, binary clients: the third-party types whose schema frame this queue
	 * carried, for the scan of generation schema_generation (a bit per type from 0x8000). */
	uint64_t schema_generation;
	uint64_t *schema_sent;
	/* HUB_FORMAT_JSON: where the "lost" notices are, so that the main thread tells them from
	 * events by position, not by their text (a third-party type could be named like one).
	 * A ring of HUB_LOST_MARKS queue positions, UINT64_MAX where none was written yet: the
	 * reader writes mark lost_marks (relaxed atomic) before it publishes head past it, the
	 * main thread takes mark lost_seen when it counts the frame there and moves lost_seen
	 * (release), which the reader reads (acquire) before it reuses a slot. With every slot
	 * taken, the notice waits (pending_lost), as it would for room. */
	uint64_t *lost_at;
	uint64_t lost_marks; /* reader-private */
	uint64_t lost_seen;  /* main thread writes, reader reads */
} HubQueue;

#define HUB_LOST_MARKS 64u

struct HubClient {
	Hub *hub;
	int fd; /* not owned */
	HubClientOptions o;
	HubQueue *q;            /* one per reader */
	struct iovec *iov;      /* main thread: flush scratch, 2 per reader */
	uint64_t *avail;        /* main thread: flush scratch, 1 per reader */
	unsigned *order;        /* main thread: flush scratch, 1 per reader */
	int partial;            /* main thread: queue whose data was partly written, or -1 */
	uint64_t bytes_sent;    /* main thread */
	char *line;             /* main thread, HUB_FORMAT_JSON_TAGGED: the frame handed to the consumer */
	atomic_bool overflowed; /* set by a reader, read by the main thread */
	bool blocked;           /* main thread: the fd would block; waiting for EPOLLOUT */
	bool attached;
};

typedef struct HubSlot {
	_Alignas(64) pthread_mutex_t lock; /* held by the reader for a batch, by the main thread to edit */
	HubClient **clients;               /* guarded by lock */
	size_t n_clients;
	char *json; /* reader-private scratch: the current event, encoded once */
	/* Reader-private scratch: the current exec event with the ancestors of other uids left
	 * out (HubClientOptions.redact), its record and its JSON. */
	uint8_t *redacted;
	char *json_redacted;
	/* A client's copy flagged PERFRELAY_HDR_LINEAGE_INCOMPLETE, and its JSON line. */
	uint8_t *flagged;
	char *json_flagged;
	bool wrote; /* reader-private: this batch queued output */
	/* Guarded by lock, set with the client list: the union of its clients' demand, and
	 * whether any of them may want more than that (HubClientOptions.only_demand). */
	uint64_t want_types;
	bool want_all;
} HubSlot;

struct Hub {
	unsigned n_readers; /* slots, those of the main thread included */
	unsigned n_small;   /* the last n_small slots get HUB_SMALL_QUEUE, outside the budget */
	HubSlot *slots;
	int notify_fd;
	atomic_int sleeping; /* main thread sets it before sleeping; readers clear it and signal */
	HubClient **clients; /* main thread's list of attached clients */
	size_t n_clients;
	ProcTable *procs;
	/* Kernel-side demand: attached clients per type (bit t of HubClientOptions.demand), the
	 * types with any, and who hears when that set changes. Main thread. */
	unsigned demand_clients[64];
	uint64_t demand;
	HubDemandFn demand_fn;
	void *demand_userdata;
};
