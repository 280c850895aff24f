/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fan-out of decoded events from reader threads to clients through per-reader SPSC queues. */
#include <assert.h>
#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/stat.h"
#include "hub/encode.h"
#include "hub/shared-ring-writer.h"
#include "hub/hub-internal.h"
#include "macro.h"
#include "kernel/perfring.h"
#include "decode/producer-scan.h"
#include "hub/proctable.h"
#include "unit-frame.h"

int hub_new(unsigned n_readers, Hub **ret) {
	_cleanup_(hub_freep) Hub *h = NULL;
	int r;

	if (n_readers == 0)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->n_readers = n_readers;
	h->notify_fd = -EBADF;
	/* The main thread starts out waiting for the first notification. */
	atomic_init(&h->sleeping, 1);
	h->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->notify_fd < 0)
		return negative_errno();
	h->slots = aligned_alloc(64, ALIGN_TO(sizeof(HubSlot) * n_readers, 64u));
	if (!h->slots)
		return -ENOMEM;
	memset(h->slots, 0, sizeof(HubSlot) * n_readers);
	r = proc_table_new(PROC_TABLE_DEFAULT, &h->procs);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < n_readers; i++) {
		pthread_mutex_init(&h->slots[i].lock, NULL);
		h->slots[i].json = malloc(ENCODE_JSON_MAX);
		h->slots[i].json_redacted = malloc(ENCODE_JSON_MAX);
		h->slots[i].redacted = malloc(PERFRELAY_RECORD_MAX);
		h->slots[i].json_flagged = malloc(ENCODE_JSON_MAX);
		h->slots[i].flagged = malloc(PERFRELAY_RECORD_MAX);
		if (!h->slots[i].json || !h->slots[i].json_redacted || !h->slots[i].redacted ||
		    !h->slots[i].json_flagged || !h->slots[i].flagged)
			return -ENOMEM;
	}
	*ret = TAKE_PTR(h);
	return 0;
}

int hub_set_process_table(Hub *h, size_t entries) {
	ProcTable *t;
	int r;

	if (h->n_clients > 0)
		return -EBUSY;
	r = proc_table_new(entries, &t);
	if (r < 0)
		return r;
	proc_table_free(h->procs);
	h->procs = t;
	return 0;
}

int hub_set_small_slots(Hub *h, unsigned n) {
	if (n >= h->n_readers || h->n_clients > 0)
		return -EINVAL;
	h->n_small = n;
	return 0;
}

unsigned hub_n_slots(const Hub *h) {
	return h->n_readers;
}

unsigned hub_n_small_slots(const Hub *h) {
	return h->n_small;
}

Hub *hub_free(Hub *h) {
	if (!h)
		return NULL;
	for (unsigned i = 0; h->slots && i < h->n_readers; i++) {
		pthread_mutex_destroy(&h->slots[i].lock);
		free(h->slots[i].clients);
		free(h->slots[i].json);
		free(h->slots[i].json_redacted);
		free(h->slots[i].redacted);
		free(h->slots[i].json_flagged);
		free(h->slots[i].flagged);
	}
	free(h->slots);
	free(h->clients);
	proc_table_free(h->procs);
	safe_close(h->notify_fd);
	free(h);
	return NULL;
}

ProcTable *hub_procs(const Hub *h) {
	return h->procs;
}

int hub_notify_fd(const Hub *h) {
	return h->notify_fd;
}

int hub_client_new(Hub *h, int fd, const HubClientOptions *o, HubClient **ret) {
	_cleanup_(hub_client_freep) HubClient *c = NULL;
	uint64_t per_queue = HUB_QUEUE_MIN;

	if (o->shared &&
	    (shared_ring_n_slots(o->shared) != h->n_readers || o->format == HUB_FORMAT_JSON_TAGGED))
		return -EINVAL;

	/* The largest power of two that keeps the client within its budget, but at least room
	 * for one event of the largest size. */
	while (per_queue * 2 * (h->n_readers - h->n_small) <= o->queue_bytes)
		per_queue *= 2;
	if (per_queue < 2 * ENCODE_JSON_MAX)
		per_queue = 256 * 1024;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->hub = h;
	c->fd = fd;
	c->o = *o;
	c->partial = -1;
	c->q = aligned_alloc(64, ALIGN_TO(sizeof(HubQueue) * h->n_readers, 64u));
	if (!c->q)
		return -ENOMEM;
	memset(c->q, 0, sizeof(HubQueue) * h->n_readers);
	c->iov = calloc(2 * h->n_readers, sizeof(struct iovec));
	c->avail = calloc(h->n_readers, sizeof(uint64_t));
	c->order = calloc(h->n_readers, sizeof(unsigned));
	if (!c->iov || !c->avail || !c->order)
		return -ENOMEM;
	if (o->format == HUB_FORMAT_JSON_TAGGED) {
		c->line = malloc(ENCODE_JSON_MAX + 1);
		if (!c->line)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < h->n_readers; i++) {
		bool small = i >= h->n_readers - h->n_small;
		uint64_t size = small ? HUB_SMALL_QUEUE : per_queue;

		if (o->shared) {
			/* The ring's memory is the ring set's. */
			c->q[i].buf = shared_ring_data(o->shared, i);
			c->q[i].mask = shared_ring_size(o->shared, i) - 1;
		} else {
			/* The main thread's queues get their memory when it first writes into
			 * them: most clients never ask for its events, and client churn should
			 * not churn that memory. */
			c->q[i].buf = small ? NULL : malloc(size);
			if (!small && !c->q[i].buf)
				return -ENOMEM;
			c->q[i].mask = size - 1;
		}
		if (o->format == HUB_FORMAT_BINARY) {
			c->q[i].schema_sent = calloc(SCHEMA_BITMAP_WORDS, sizeof(uint64_t));
			if (!c->q[i].schema_sent)
				return -ENOMEM;
		}
		if (o->format == HUB_FORMAT_JSON && !o->shared) {
			c->q[i].lost_at = malloc(HUB_LOST_MARKS * sizeof(uint64_t));
			if (!c->q[i].lost_at)
				return -ENOMEM;
			memset(c->q[i].lost_at, 0xff, HUB_LOST_MARKS * sizeof(uint64_t));
		}
	}
	*ret = TAKE_PTR(c);
	return 0;
}

HubClient *hub_client_free(HubClient *c) {
	if (!c)
		return NULL;
	for (unsigned i = 0; c->q && i < c->hub->n_readers; i++) {
		if (!c->o.shared)
			free(c->q[i].buf);
		free(c->q[i].schema_sent);
		free(c->q[i].lost_at);
	}
	free(c->q);
	free(c->iov);
	free(c->avail);
	free(c->order);
	free(c->line);
	free(c);
	return NULL;
}

static int clients_append(HubClient ***array, size_t *n, HubClient *c) {
	HubClient **a = realloc(*array, sizeof(HubClient *) * (*n + 1));

	if (!a)
		return -ENOMEM;
	a[(*n)++] = c;
	*array = a;
	return 0;
}

static void clients_remove(HubClient **array, size_t *n, HubClient *c) {
	for (size_t i = 0; i < *n; i++)
		if (array[i] == c) {
			memmove(array + i, array + i + 1, sizeof(HubClient *) * (*n - i - 1));
			(*n)--;
			return;
		}
}

/* Counts a client in (+1) or out (-1) of the types it may want; tells demand_fn once the set
 * of types with a client changed, before the caller goes on (attach: before the hello). */
static void demand_add(Hub *h, uint64_t types, int delta) {
	uint64_t before = h->demand;

	for (unsigned t = 0; t < 64; t++) {
		if (!(types & (UINT64_C(1) << t)))
			continue;
		h->demand_clients[t] += delta;
		if (h->demand_clients[t] == 0)
			h->demand &= ~(UINT64_C(1) << t);
		else
			h->demand |= UINT64_C(1) << t;
	}
	if (h->demand != before && h->demand_fn)
		h->demand_fn(h->demand_userdata);
}

/* What the slot's clients may want (HubSlot.want_types, want_all), after its list changed.
 * Under the slot's lock. */
static void slot_wants(HubSlot *s) {
	s->want_types = 0;
	s->want_all = false;
	for (size_t i = 0; i < s->n_clients; i++) {
		s->want_types |= s->clients[i]->o.demand;
		s->want_all |= !s->clients[i]->o.only_demand;
	}
}

int hub_client_attach(Hub *h, HubClient *c) {
	/* On allocation failure the client ends up attached nowhere (never half-attached) and
	 * the caller learns it from the return value. */
	if (clients_append(&h->clients, &h->n_clients, c) < 0)
		return -ENOMEM;
	for (unsigned i = 0; i < h->n_readers; i++) {
		HubSlot *s = &h->slots[i];
		int r;

		pthread_mutex_lock(&s->lock);
		r = clients_append(&s->clients, &s->n_clients, c);
		slot_wants(s);
		pthread_mutex_unlock(&s->lock);
		if (r < 0) {
			hub_client_detach(h, c);
			return r;
		}
	}
	c->attached = true;
	demand_add(h, c->o.demand, +1);
	return 0;
}

void hub_client_detach(Hub *h, HubClient *c) {
	bool attached = c->attached;

	for (unsigned i = 0; i < h->n_readers; i++) {
		HubSlot *s = &h->slots[i];

		pthread_mutex_lock(&s->lock);
		clients_remove(s->clients, &s->n_clients, c);
		slot_wants(s);
		pthread_mutex_unlock(&s->lock);
	}
	clients_remove(h->clients, &h->n_clients, c);
	c->attached = false;
	if (attached)
		demand_add(h, c->o.demand, -1);
}

void hub_set_demand_fn(Hub *h, HubDemandFn fn, void *userdata) {
	h->demand_fn = fn;
	h->demand_userdata = userdata;
}

uint64_t hub_demand(const Hub *h) {
	return h->demand;
}

int hub_client_fd(const HubClient *c) {
	return c->fd;
}

void *hub_client_userdata(const HubClient *c) {
	return c->o.userdata;
}

void hub_client_run_flush(HubClient *c) {
	if (c->o.flush)
		c->o.flush(c, c->o.userdata);
	else
		(void) hub_client_flush(c);
}

HubFormat hub_client_format(const HubClient *c) {
	return c->o.format;
}

bool hub_client_blocked(const HubClient *c) {
	return c->blocked;
}

bool hub_client_overflowed(const HubClient *c) {
	return atomic_load_explicit(&c->overflowed, memory_order_relaxed);
}

uint64_t hub_client_capacity(const HubClient *c) {
	uint64_t bytes = 0;

	if (c->o.shared)
		return 0; /* the ring set's memory, shared by its members */
	for (unsigned i = 0; i < c->hub->n_readers; i++)
		bytes += c->q[i].mask + 1;
	return bytes;
}

void hub_client_get_stats(const HubClient *c, HubClientStats *ret) {
	HubClientStats s = { .bytes_sent = c->bytes_sent };

	for (unsigned i = 0; i < c->hub->n_readers; i++) {
		const HubQueue *q = &c->q[i];

		s.offered += STAT_LOAD(q->offered);
		s.queued += STAT_LOAD(q->queued);
		s.dropped += STAT_LOAD(q->dropped) + q->unsent;
		s.sent += q->sent;
		s.queued_bytes += __atomic_load_n(&q->head, __ATOMIC_ACQUIRE) - q->tail;
	}
	*ret = s;
}

/* Reader side ------------------------------------------------------------------------------ */

static inline bool queue_reserve(HubQueue *q, uint64_t need) {
	uint64_t size = q->mask + 1;

	/* Only a main-thread queue starts without memory (hub_client_new()): allocated by its one
	 * producer, the main thread; a failure drops like a full queue. */
	if (_unlikely_(!q->buf)) {
		q->buf = malloc(size);
		if (!q->buf)
			return false;
	}

	if (size - (q->head_local - q->tail_cache) >= need)
		return true;
	q->tail_cache = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
	return size - (q->head_local - q->tail_cache) >= need;
}

static inline void queue_write(HubQueue *q, const void *src, size_t n) {
	uint64_t off = q->head_local & q->mask, first = q->mask + 1 - off;

	if (n <= first)
		memcpy(q->buf + off, src, n);
	else {
		memcpy(q->buf + off, src, first);
		memcpy(q->buf, (const uint8_t *) src + first, n - first);
	}
	q->head_local += n;
}

/* Wakes the main thread if it sleeps (or is about to). The exchange is a full barrier,
 * pairing with hub_prepare_sleep(): either we see sleeping=1 and signal, or it sees our head. */
static void hub_wake(Hub *h) {
	if (atomic_exchange(&h->sleeping, 0)) {
		uint64_t one = 1;
		(void) !write(h->notify_fd, &one, sizeof(one));
	}
}

void hub_reader_begin(Hub *h, unsigned reader) {
	HubSlot *s = &h->slots[reader];

	pthread_mutex_lock(&s->lock);
	s->wrote = false;
}

bool hub_reader_has_clients(const Hub *h, unsigned reader) {
	return h->slots[reader].n_clients > 0;
}

bool hub_reader_wants_all(const Hub *h, unsigned reader, uint64_t *ret_types) {
	*ret_types = h->slots[reader].want_types;
	return h->slots[reader].want_all;
}

/* The notice of `count` lost events in the client's format; returns its length. */
static size_t encode_lost(HubFormat format, uint64_t count, char buf[static HUB_LOST_MAX]) {
	if (format == HUB_FORMAT_BINARY) {
		/* A record in the ABI's layout, so that clients decode it like any other. Only
		 * the daemon makes it: built-in producers never use this type id. */
		struct perfrelay_hdr hdr = {
			.magic = PERFRELAY_MAGIC,
			.version = PERFRELAY_VERSION,
			.type = PERFRELAY_TYPE_LOST,
			.size = HUB_BINARY_LOST_SIZE,
		};
		uint32_t len = htole32(HUB_BINARY_LOST_SIZE);

		memcpy(buf, &len, sizeof(len));
		memcpy(buf + sizeof(len), &hdr, sizeof(hdr));
		memcpy(buf + sizeof(len) + sizeof(hdr), &count, sizeof(count));
		return sizeof(len) + HUB_BINARY_LOST_SIZE;
	}
	if (format == HUB_FORMAT_JSON_TAGGED) {
		/* Cannot fail: 45 bytes at most. */
		HubTag tag = {
			.type = PERFRELAY_TYPE_LOST,
			.flags = HUB_TAG_LOST,
			.value = count,
		};

		tag.len = (uint32_t) encode_lost_json(count, buf + sizeof(tag), HUB_LOST_MAX - sizeof(tag));
		memcpy(buf, &tag, sizeof(tag));
		return sizeof(tag) + tag.len;
	}
	return (size_t) encode_lost_json(count, buf, HUB_LOST_MAX); /* cannot fail: < 64 bytes */
}

/* Whether a "lost" notice may be written now: a JSON client's needs a free mark (HubQueue). */
static bool lost_mark_free(HubQueue *q) {
	return !q->lost_at ||
		q->lost_marks - __atomic_load_n(&q->lost_seen, __ATOMIC_ACQUIRE) < HUB_LOST_MARKS;
}

/* Writes a "lost" notice at head_local, marked as one for a JSON client. */
static void lost_write(HubQueue *q, const char *lost, size_t n) {
	if (q->lost_at) {
		__atomic_store_n(&q->lost_at[q->lost_marks % HUB_LOST_MARKS], q->head_local, __ATOMIC_RELAXED);
		q->lost_marks++;
	}
	queue_write(q, lost, n);
	q->pending_lost = 0;
}

/* A binary client's first record of a third-party type decoded from BTF goes behind a schema
 * frame describing it (once per queue and scan): *ret_hdr and the schema, or false. */
static bool schema_needed(HubQueue *q, const DecodedEvent *ev, struct perfrelay_hdr *ret_hdr) {
	const ProducerType *t = ev->producer_type;
	unsigned bit;

	if (!t || !t->schema)
		return false;
	if (q->schema_generation != t->generation) {
		memset(q->schema_sent, 0, SCHEMA_BITMAP_WORDS * sizeof(uint64_t));
		q->schema_generation = t->generation;
	}
	bit = t->type - PERFRELAY_TYPE_THIRD_PARTY_MIN;
	if (q->schema_sent[bit / 64] & (UINT64_C(1) << (bit % 64)))
		return false;
	*ret_hdr = (struct perfrelay_hdr){
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = PERFRELAY_TYPE_SCHEMA,
		.size = (uint16_t) (sizeof(*ret_hdr) + t->schema_len),
		.producer = ev->hdr.producer,
		.cpu = ev->hdr.cpu,
		.ts_ns = ev->hdr.ts_ns,
	};
	return true;
}

static void schema_write(HubQueue *q, const ProducerType *t, const struct perfrelay_hdr *hdr) {
	uint32_t len = htole32(hdr->size);
	unsigned bit = t->type - PERFRELAY_TYPE_THIRD_PARTY_MIN;

	queue_write(q, &len, sizeof(len));
	queue_write(q, hdr, sizeof(*hdr));
	queue_write(q, t->schema, t->schema_len);
	q->schema_sent[bit / 64] |= UINT64_C(1) << (bit % 64);
}

/* One event's bytes in a client's format: its schema frame and unit frame when it needs them,
 * the frame prefix (binary length, or tag), the record or line. Room was reserved. */
static inline void event_write(
	HubQueue *q,
	const DecodedEvent *ev,
	const struct perfrelay_hdr *schema,
	size_t schema_len,
	const void *unit_frame,
	size_t unit_frame_len,
	const void *prefix,
	size_t prefix_len,
	const void *data,
	size_t len) {
	if (schema_len > 0)
		schema_write(q, ev->producer_type, schema);
	if (unit_frame_len > 0)
		queue_write(q, unit_frame, unit_frame_len);
	if (prefix_len > 0)
		queue_write(q, prefix, prefix_len);
	queue_write(q, data, len);
}

_Static_assert(ENCODE_JSON_MAX <= PERFRELAY_SHARED_FRAME_MAX, "a JSON line fits a shared frame");
_Static_assert(
	sizeof(uint32_t) + PERFRELAY_RECORD_MAX + UNIT_FRAME_MAX <= PERFRELAY_SHARED_FRAME_MAX,
	"a record behind its unit frame fits a shared frame");
_Static_assert(
	sizeof(uint32_t) + PERFRELAY_RECORD_MAX <= PERFRELAY_SHARED_FRAME_MAX, "a schema fits a shared frame");
_Static_assert(PERFRELAY_SHARED_FRAME_MAX + 16u <= SHARED_RING_MIN / 4, "a shared frame fits the smallest ring");

/* An exec event (the caller checks the type) as a client of uid `uid` may see it
 * (HubClientOptions.redact): the ancestors the process table knows ran as that uid, the others
 * left out (an ancestor the table does not hold, or holds without a uid, is left out: fail
 * closed). r->removed false: nothing to leave out, the event as it is. */
/* *view: ev, over a copy of its record in buf (PERFRELAY_RECORD_MAX bytes) that the caller
 * then changes. */
static void view_on_copy(const DecodedEvent *ev, uint8_t *buf, DecodedEvent *view) {
	memcpy(buf, ev->record, ev->record_size);
	*view = *ev;
	view->record = buf;
	view->payload = buf + sizeof(struct perfrelay_hdr);
	view->comm = ev->comm ? (const char *) buf + ((const uint8_t *) ev->comm - ev->record) : NULL;
}

typedef struct Redaction {
	bool done;
	uint32_t uid;
	bool removed;
	DecodedEvent ev;
	ssize_t json_len;
} Redaction;

static void redact_ancestors(Hub *h, HubSlot *s, const DecodedEvent *ev, uint32_t uid, Redaction *r) {
	struct perfrelay_ancestor a[PERFRELAY_ANCESTORS_MAX];
	uint32_t n, kept = 0;

	*r = (Redaction){ .done = true, .uid = uid, .json_len = -1 };
	/* Schema 3 (exec ids) and later: the record holds the ancestors. */
	if (!ev->has_exec_id || ev->record_size < sizeof(struct perfrelay_exec) ||
	    ev->record_size > PERFRELAY_RECORD_MAX)
		return;
	memcpy(&n, ev->record + offsetof(struct perfrelay_exec, n_ancestors), sizeof(n));
	n = MIN(n, (uint32_t) PERFRELAY_ANCESTORS_MAX);
	memcpy(a, ev->record + offsetof(struct perfrelay_exec, ancestors), sizeof(a));
	for (uint32_t i = 0; i < n; i++) {
		ProcEntry e;

		if (proc_table_get(h->procs, a[i].exec_id, &e) && e.uid == uid)
			a[kept++] = a[i];
	}
	if (kept == n)
		return;
	memset(a + kept, 0, (PERFRELAY_ANCESTORS_MAX - kept) * sizeof(*a));
	view_on_copy(ev, s->redacted, &r->ev);
	memcpy(s->redacted + offsetof(struct perfrelay_exec, ancestors), a, sizeof(a));
	memcpy(s->redacted + offsetof(struct perfrelay_exec, n_ancestors), &kept, sizeof(kept));
	r->removed = true;
}

/* The event as a client whose "ancestor" filter took it for its incomplete lineage gets it:
 * flagged PERFRELAY_HDR_LINEAGE_INCOMPLETE, in binary and in JSON ("lineage_incomplete"). Made
 * once per event and base (the event, or one uid's redacted copy of it), in the slot's one
 * buffer: made again when the next such client has another base. */
typedef struct Flagged {
	const DecodedEvent *base; /* NULL: none made yet */
	uint32_t base_uid;        /* of a redacted base */
	bool ok;
	DecodedEvent ev;
	ssize_t json_len;
} Flagged;

static void flag_incomplete(HubSlot *s, const DecodedEvent *ev, uint32_t uid, Flagged *f) {
	*f = (Flagged){ .base = ev, .base_uid = uid, .json_len = -1 };
	if (ev->record_size > PERFRELAY_RECORD_MAX)
		return; /* a packet: no process, no lineage */
	f->ok = true;
	view_on_copy(ev, s->flagged, &f->ev);
	s->flagged[offsetof(struct perfrelay_hdr, flags)] |= PERFRELAY_HDR_LINEAGE_INCOMPLETE;
	f->ev.hdr.flags |= PERFRELAY_HDR_LINEAGE_INCOMPLETE;
}

/* One event's forms, made at most once per batch of clients however many take them (the
 * reader's own, on its stack): the event as each client may see it (redacted, flagged) and its
 * encodings. */
typedef struct Published {
	const DecodedEvent *ev; /* as it came */
	const char *unit;
	const Container *container;
	uint32_t frame_len; /* binary frames: the record behind its little-endian length */
	ssize_t json_len;   /* of s->json; -1: not encoded yet */
	ssize_t unit_len;   /* of unit_buf; -1: not made yet */
	uint8_t *unit_buf;  /* UNIT_FRAME_MAX bytes on the caller's stack, not zeroed: unit_len are read */
	Redaction red;
	Flagged flagged;
	HubTag tag;
} Published;

/* What one client is given: the event (or its redacted or flagged copy), the bytes of its
 * format, and what goes in front of them. */
typedef struct Delivery {
	const DecodedEvent *ev;
	const void *prefix, *data;
	size_t prefix_len, len, schema_len, unit_frame_len;
	struct perfrelay_hdr schema;
} Delivery;

/* The event as client c may see it: without the ancestors its redaction hides, flagged when
 * its lineage was incomplete where c's filter looked; json points at the buffer of that form. */
static const DecodedEvent *client_view(
	Hub *h, HubSlot *s, HubClient *c, Published *p, const Lineage *lineage, char **json, ssize_t **json_lenp) {
	const DecodedEvent *ev = p->ev;

	*json = s->json;
	*json_lenp = &p->json_len;
	if (_unlikely_(c->o.redact) && _unlikely_(ev->hdr.type == PERFRELAY_TYPE_EXEC)) {
		if (!p->red.done || p->red.uid != c->o.redact_uid)
			redact_ancestors(h, s, ev, c->o.redact_uid, &p->red);
		if (p->red.removed) {
			ev = &p->red.ev;
			*json = s->json_redacted;
			*json_lenp = &p->red.json_len;
		}
	}
	if (_unlikely_(lineage && lineage->incomplete_matched)) {
		uint32_t base_uid = ev == p->ev ? 0 : p->red.uid;

		if (p->flagged.base != ev || p->flagged.base_uid != base_uid)
			flag_incomplete(s, ev, base_uid, &p->flagged);
		if (p->flagged.ok) {
			ev = &p->flagged.ev;
			*json = s->json_flagged;
			*json_lenp = &p->flagged.json_len;
		}
	}
	return ev;
}

/* The bytes client c takes in its format: the record behind its length (binary, with the
 * schema and unit frames it needs), or the JSON line, encoded once per form. */
static void client_payload(
	HubClient *c, HubQueue *q, unsigned reader, Published *p, char *json, ssize_t *json_lenp, Delivery *d) {
	const DecodedEvent *ev = d->ev;

	if (c->o.format == HUB_FORMAT_BINARY) {
		d->prefix = &p->frame_len;
		d->prefix_len = sizeof(p->frame_len);
		d->data = ev->record;
		d->len = ev->record_size;
		if (_unlikely_(c->o.shared) && shared_ring_take_schema_reset(c->o.shared, reader))
			memset(q->schema_sent, 0, SCHEMA_BITMAP_WORDS * sizeof(uint64_t));
		if (_unlikely_(ev->producer_type) && schema_needed(q, ev, &d->schema))
			d->schema_len = sizeof(uint32_t) + d->schema.size;
		if (c->o.unit_frames) {
			if (p->unit_len < 0) /* made once, however many clients take it */
				p->unit_len = (ssize_t) unit_frame_write(
					&ev->hdr, ev->cgroup_id, p->unit, p->unit_buf);
			d->unit_frame_len = (size_t) p->unit_len;
		}
		return;
	}
	if (*json_lenp < 0) {
		/* Encoded once, however many clients take it. */
		*json_lenp = ev->btf ?
			encode_json_btf(
				ev, ev->btf, ev->producer_name, p->unit, p->container, json, ENCODE_JSON_MAX) :
			encode_json_in(ev, p->unit, p->container, json, ENCODE_JSON_MAX);
		/* Cannot happen (ENCODE_JSON_MAX bounds every record), but if it did, the loss
		 * would be counted and told like any other. */
		if (_unlikely_(*json_lenp < 0))
			*json_lenp = 0;
	}
	d->data = json;
	d->len = (size_t) *json_lenp;
	if (c->o.format == HUB_FORMAT_JSON_TAGGED) {
		p->tag = (HubTag){
			.len = (uint32_t) d->len,
			.type = ev->hdr.type,
			.flags = ev->known ? HUB_TAG_KNOWN : 0,
			.value = ev->hdr.ts_ns,
		};
		d->prefix = &p->tag;
		d->prefix_len = sizeof(p->tag);
	}
}

/* The delivery's frames at the queue's (or ring's) head_local: room was reserved. */
static inline void delivery_write(HubQueue *q, const Published *p, const Delivery *d) {
	event_write(
		q,
		d->ev,
		&d->schema,
		d->schema_len,
		p->unit_buf,
		d->unit_frame_len,
		d->prefix,
		d->prefix_len,
		d->data,
		d->len);
}

/* Into a shared ring set: it never drops for room (the writer reclaims), and publishes its
 * head every quarter ring. */
static void deliver_shared(HubSlot *s, HubClient *c, HubQueue *q, unsigned reader, Published *p, Delivery *d) {
	/* One frame holds the event and what describes it, but for a schema that would take it
	 * past what a reader copies at once: that goes in a frame of its own just before, with
	 * the same seq (a frame's seq counts events). */
	if (_unlikely_(d->schema_len > 0) &&
	    d->prefix_len + d->len + d->schema_len + d->unit_frame_len > PERFRELAY_SHARED_FRAME_MAX &&
	    shared_ring_reserve(c->o.shared, reader, &q->head_local, STAT_LOAD(q->queued), d->schema_len)) {
		schema_write(q, d->ev->producer_type, &d->schema);
		q->head_local = ALIGN_TO(q->head_local, (uint64_t) PERFRELAY_SHARED_ALIGN);
		d->schema_len = 0;
	}
	if (_unlikely_(d->len == 0) ||
	    !shared_ring_reserve(
		    c->o.shared,
		    reader,
		    &q->head_local,
		    STAT_LOAD(q->queued),
		    (uint64_t) (d->prefix_len + d->len + d->schema_len + d->unit_frame_len))) {
		STAT_ADD(q->dropped, 1); /* cannot happen: SHARED_RING_MIN */
		return;
	}
	delivery_write(q, p, d);
	q->head_local = ALIGN_TO(q->head_local, (uint64_t) PERFRELAY_SHARED_ALIGN);
	STAT_ADD(q->queued, 1);
	if (_unlikely_(q->head_local - q->head > (q->mask + 1) / 4)) {
		q->head = q->head_local;
		s->wrote |= shared_ring_publish(c->o.shared, reader, q->head, STAT_LOAD(q->queued));
	}
}

/* Into the client's own queue for this reader, behind a "lost" notice if it lost events and
 * there is room to tell it now; a full queue drops the event for this client only. */
static void deliver_queue(Hub *h, HubSlot *s, HubClient *c, HubQueue *q, Published *p, Delivery *d) {
	char lost[HUB_LOST_MAX];
	size_t lost_len = 0;

	if (q->pending_lost > 0 && lost_mark_free(q))
		lost_len = encode_lost(c->o.format, q->pending_lost, lost);
	if (_unlikely_(d->len == 0) ||
	    !queue_reserve(
		    q, (uint64_t) (d->prefix_len + d->len + lost_len + d->schema_len + d->unit_frame_len))) {
		STAT_ADD(q->dropped, 1);
		if (c->o.overflow == HUB_OVERFLOW_DISCONNECT) {
			/* Never told: the close is the notice. */
			if (!atomic_exchange_explicit(&c->overflowed, true, memory_order_relaxed))
				s->wrote = true; /* wake the main thread to close it */
		} else
			q->pending_lost++;
		return;
	}
	if (lost_len > 0)
		lost_write(q, lost, lost_len);
	delivery_write(q, p, d);
	STAT_ADD(q->queued, 1);
	s->wrote = true;

	/* A batch can hold more than a queue (half a ring per CPU of the group): hand over every
	 * quarter queue, so that a client that keeps reading never loses events to the batch size.
	 * At most one wakeup per quarter queue. */
	if (_unlikely_(q->head_local - q->head > (q->mask + 1) / 4)) {
		__atomic_store_n(&q->head, q->head_local, __ATOMIC_RELEASE);
		hub_wake(h);
	}
}

void hub_publish(Hub *h, unsigned reader, const DecodedEvent *ev_in, const HubOrigin *origin, Lineage *lineage) {
	static const HubOrigin nowhere;
	HubSlot *s = &h->slots[reader];
	uint8_t unit_buf[UNIT_FRAME_MAX];
	Published p = {
		.ev = ev_in,
		.unit_buf = unit_buf,
		.unit = origin ? origin->unit : NULL,
		.container = origin ? origin->container : NULL,
		.frame_len = htole32(ev_in->record_size),
		.json_len = -1,
		.unit_len = -1,
	};

	for (size_t i = 0; i < s->n_clients; i++) {
		HubClient *c = s->clients[i];
		HubQueue *q = &c->q[reader];
		Delivery d; /* set field by field: this runs per event and client */
		ssize_t *json_lenp;
		char *json;

		if (lineage)
			lineage->incomplete_matched = false;
		if (c->o.match && !c->o.match(c->o.filter, ev_in, origin ?: &nowhere, lineage))
			continue;
		d.ev = client_view(h, s, c, &p, lineage, &json, &json_lenp);
		STAT_ADD(q->offered, 1);
		if (_unlikely_(c->o.overflow == HUB_OVERFLOW_DISCONNECT) &&
		    atomic_load_explicit(&c->overflowed, memory_order_relaxed)) {
			/* It lost an event and is being closed: nothing after its first loss, from
			 * any reader, and no "lost" notice (docs/protocol.md). */
			STAT_ADD(q->dropped, 1);
			continue;
		}
		d.prefix = NULL;
		d.prefix_len = d.schema_len = d.unit_frame_len = 0;
		client_payload(c, q, reader, &p, json, json_lenp, &d);
		if (c->o.shared)
			deliver_shared(s, c, q, reader, &p, &d);
		else
			deliver_queue(h, s, c, q, &p, &d);
	}
}

/* A notice's frame in the client's format: the JSON line, or a PERFRELAY_TYPE_LOST record of
 * count 0 with the JSON behind the count. Room was reserved. */
static void notice_write(HubClient *c, HubQueue *q, const char *json, size_t len) {
	if (c->o.format == HUB_FORMAT_BINARY) {
		struct perfrelay_hdr hdr = {
			.magic = PERFRELAY_MAGIC,
			.version = PERFRELAY_VERSION,
			.type = PERFRELAY_TYPE_LOST,
			.size = (uint16_t) (HUB_BINARY_LOST_SIZE + len),
		};
		uint32_t frame = htole32(hdr.size);
		uint64_t zero = 0;

		queue_write(q, &frame, sizeof(frame));
		queue_write(q, &hdr, sizeof(hdr));
		queue_write(q, &zero, sizeof(zero));
		queue_write(q, json, len);
		return;
	}
	if (c->o.format == HUB_FORMAT_JSON_TAGGED) {
		HubTag tag = {
			.len = (uint32_t) len + 1,
			.type = PERFRELAY_TYPE_LOST,
			.flags = HUB_TAG_LOST | HUB_TAG_NOTICE,
		};

		queue_write(q, &tag, sizeof(tag));
		queue_write(q, json, len);
		queue_write(q, "\n", 1);
		return;
	}
	/* Marked like a lost notice, so that the main thread tells it from an event (and
	 * pending_lost, the client's own drops, stays to be told). */
	__atomic_store_n(&q->lost_at[q->lost_marks % HUB_LOST_MARKS], q->head_local, __ATOMIC_RELAXED);
	q->lost_marks++;
	queue_write(q, json, len);
	queue_write(q, "\n", 1);
}

_Static_assert(HUB_BINARY_LOST_SIZE + HUB_NOTICE_MAX <= PERFRELAY_RECORD_MAX, "a notice is a record");

void hub_publish_notice(Hub *h, unsigned slot, const HubNotice *n, HubNoticeStats *st) {
	HubSlot *s = &h->slots[slot];

	if (n->json_len > HUB_NOTICE_MAX || n->json_redacted_len > HUB_NOTICE_MAX) {
		st->dropped++; /* cannot happen: the notices' lists are bounded */
		return;
	}
	for (size_t i = 0; i < s->n_clients; i++) {
		HubClient *c = s->clients[i];
		HubQueue *q = &c->q[slot];
		const char *json = c->o.redact ? n->json_redacted : n->json;
		size_t len = c->o.redact ? n->json_redacted_len : n->json_len;
		size_t need = c->o.format == HUB_FORMAT_BINARY ?
			sizeof(uint32_t) + HUB_BINARY_LOST_SIZE + len :
			c->o.format == HUB_FORMAT_JSON_TAGGED ? sizeof(HubTag) + len + 1 :
								len + 1;

		if (c->o.shared)
			continue;
		if (c->o.wants_types && !c->o.wants_types(c->o.filter, n->types, n->n_types, n->third_party))
			continue;
		if (atomic_load_explicit(&c->overflowed, memory_order_relaxed))
			continue; /* being closed: nothing after its first loss */
		if (!lost_mark_free(q) || !queue_reserve(q, need)) {
			st->dropped++;
			continue;
		}
		notice_write(c, q, json, len);
		st->delivered++;
		s->wrote = true;
	}
}

void hub_reader_end(Hub *h, unsigned reader) {
	HubSlot *s = &h->slots[reader];
	bool wrote;

	for (size_t i = 0; i < s->n_clients; i++) {
		HubClient *c = s->clients[i];
		HubQueue *q = &c->q[reader];

		if (c->o.shared) {
			/* Every batch, moved or not: members that went to sleep meanwhile are
			 * woken, and their positions noted for the figures. */
			q->head = q->head_local;
			s->wrote |= shared_ring_publish(c->o.shared, reader, q->head, STAT_LOAD(q->queued));
			continue;
		}
		/* Losses wait for room; the batch end is when the main thread may have made
		 * some, even if no event for this client comes again. A client that asked to be
		 * disconnected gets closed instead. */
		if (_unlikely_(q->pending_lost > 0) && c->o.overflow == HUB_OVERFLOW_DROP &&
		    lost_mark_free(q)) {
			char lost[HUB_LOST_MAX];
			size_t n = encode_lost(c->o.format, q->pending_lost, lost);

			if (queue_reserve(q, n)) {
				lost_write(q, lost, n);
				s->wrote = true;
			}
		}
		if (q->head_local != q->head)
			__atomic_store_n(&q->head, q->head_local, __ATOMIC_RELEASE);
	}
	wrote = s->wrote;
	pthread_mutex_unlock(&s->lock);

	/* One eventfd write per batch at most, and only if the main thread is asleep. */
	if (wrote)
		hub_wake(h);
}

/* Main thread side ------------------------------------------------------------------------ */

void hub_lock_all(Hub *h) {
	/* In slot order; a reader only ever takes its own. */
	for (unsigned i = 0; i < h->n_readers; i++)
		pthread_mutex_lock(&h->slots[i].lock);
}

void hub_unlock_all(Hub *h) {
	for (unsigned i = h->n_readers; i > 0; i--)
		pthread_mutex_unlock(&h->slots[i - 1].lock);
}

bool hub_prepare_sleep(Hub *h) {
	uint64_t drain;

	(void) !read(h->notify_fd, &drain, sizeof(drain));
	atomic_store(&h->sleeping, 1);
	/* Dekker with hub_reader_end(): either a reader sees sleeping=1 and signals, or we see
	 * its head here. */
	for (size_t i = 0; i < h->n_clients; i++) {
		HubClient *c = h->clients[i];

		if (c->o.shared)
			continue; /* its members read it themselves */
		if (atomic_load_explicit(&c->overflowed, memory_order_relaxed))
			return true;
		if (c->blocked)
			continue; /* its EPOLLOUT wakes us */
		for (unsigned k = 0; k < h->n_readers; k++)
			if (__atomic_load_n(&c->q[k].head, __ATOMIC_SEQ_CST) != c->q[k].tail)
				return true;
	}
	return false;
}

void hub_foreach_client(Hub *h, void (*fn)(HubClient *c, void *userdata), void *userdata) {
	/* fn may detach the client it is given: walk from the end. */
	for (size_t i = h->n_clients; i > 0; i--)
		fn(h->clients[i - 1], userdata);
}
