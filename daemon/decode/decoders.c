/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Hands the main thread's producer scans to reader threads (decoders.h). The protocol is that of
 * hazard pointers: a reader announces the scan it is about to use in its own slot and checks
 * that it is still current; the main thread replaces the current scan first and frees an old
 * one only when no slot names it. Sequentially consistent operations on both sides make the
 * store-then-load on each side ordered, which the argument needs. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "decode/decoders.h"
#include "event.h"

/* Third-party types are PERFRELAY_TYPE_THIRD_PARTY_MIN..UINT16_MAX: a bit each per reader. */
#define N_THIRD_PARTY_TYPES (UINT16_MAX + 1u - PERFRELAY_TYPE_THIRD_PARTY_MIN)

/* Without a watch of program loads, how long (by the records' clock) a type stays "unknown"
 * without a hold: a producer that declares it later is found within this. */
#define SETTLE_MAX_NS (1000u * 1000u * 1000u)

typedef struct ReaderSlot {
	_Atomic(const ProducerScan *) hazard;
	/* Reader thread only: the types decoders_missing() answers DECODER_UNKNOWN for without
	 * looking further, valid for the scan of generation `settled_gen` and `settled_loads`
	 * loads noted, and without a watch for SETTLE_MAX_NS after `settled_ns`. */
	uint64_t settled_gen, settled_loads, settled_ns;
	uint64_t settled[N_THIRD_PARTY_TYPES / 64];
} ReaderSlot;

struct Decoders {
	_Atomic(ProducerScan *) current;
	/* CLOCK_BOOTTIME ns at which the last completed scan started; 0 before the first. Stored
	 * (release) after `current` is its result. */
	_Atomic uint64_t scanned_ns;
	_Atomic uint64_t loads; /* program loads that matter, noted by the load watch thread */
	atomic_bool want;       /* a scan was asked for; the main thread clears it */
	int want_fd;            /* eventfd, written when `want` is set */
	ProducerScan **retired; /* main thread only */
	size_t n_retired;
	uint64_t generation; /* of the last scan published */
	unsigned n_readers;
	ReaderSlot *slots;
	/* One watch ring per CPU, or NULL (set once by the main thread, read by readers). */
	unsigned n_cpus;
	_Atomic(const Ring *) *watch;
	atomic_bool watching; /* any ring set: loads are noted */
};

int decoders_new(unsigned n_readers, unsigned n_cpus, Decoders **ret) {
	_cleanup_(decoders_freep) Decoders *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->want_fd = -EBADF;
	d->n_readers = n_readers;
	d->slots = calloc(n_readers ?: 1, sizeof(ReaderSlot));
	d->n_cpus = n_cpus;
	d->watch = calloc(n_cpus ?: 1, sizeof(*d->watch));
	if (!d->slots || !d->watch)
		return -ENOMEM;
	for (unsigned i = 0; i < n_readers; i++)
		atomic_init(&d->slots[i].hazard, NULL);
	for (unsigned i = 0; i < n_cpus; i++)
		atomic_init(&d->watch[i], NULL);
	atomic_init(&d->current, NULL);
	atomic_init(&d->scanned_ns, 0);
	atomic_init(&d->loads, 0);
	atomic_init(&d->want, false);
	atomic_init(&d->watching, false);
	d->want_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->want_fd < 0)
		return -errno;
	*ret = TAKE_PTR(d);
	return 0;
}

Decoders *decoders_free(Decoders *d) {
	if (!d)
		return NULL;
	safe_close(d->want_fd);
	free(d->watch);
	producers_scan_free(atomic_load(&d->current));
	for (size_t i = 0; i < d->n_retired; i++)
		producers_scan_free(d->retired[i]);
	free(d->retired);
	free(d->slots);
	free(d);
	return NULL;
}

static bool held(const Decoders *d, const ProducerScan *scan) {
	for (unsigned i = 0; i < d->n_readers; i++)
		if (atomic_load(&d->slots[i].hazard) == scan)
			return true;
	return false;
}

size_t decoders_collect(Decoders *d) {
	size_t kept = 0;

	for (size_t i = 0; i < d->n_retired; i++)
		if (held(d, d->retired[i]))
			d->retired[kept++] = d->retired[i];
		else
			producers_scan_free(d->retired[i]);
	d->n_retired = kept;
	return kept;
}

int decoders_publish(Decoders *d, ProducerScan *scan) {
	ProducerScan *old, **grown;

	/* Room to retire the old one first, so that nothing can fail after the exchange. */
	grown = realloc(d->retired, (d->n_retired + 1) * sizeof(*grown));
	if (!grown) {
		producers_scan_free(scan);
		return -ENOMEM;
	}
	d->retired = grown;
	scan->generation = ++d->generation;
	for (size_t i = 0; i < scan->n_types; i++)
		scan->types[i].generation = scan->generation;
	old = atomic_exchange(&d->current, scan);
	if (old)
		d->retired[d->n_retired++] = old;
	(void) decoders_collect(d);
	return 0;
}

const ProducerScan *decoders_current(const Decoders *d) {
	return atomic_load(&d->current);
}

bool decoders_take_want(Decoders *d) {
	uint64_t n;

	/* Called on every wakeup of the main thread: read before writing, so that the line stays
	 * shared with the readers (which read `current` beside it every batch). */
	if (!atomic_load_explicit(&d->want, memory_order_relaxed))
		return false;
	(void) !read(d->want_fd, &n, sizeof(n));
	return atomic_exchange(&d->want, false);
}

int decoders_want_fd(const Decoders *d) {
	return d->want_fd;
}

void decoders_scan_done(Decoders *d, uint64_t started_ns) {
	atomic_store_explicit(&d->scanned_ns, started_ns, memory_order_release);
}

void decoders_set_watch(Decoders *d, unsigned cpu, const Ring *ring) {
	if (cpu >= d->n_cpus)
		return;
	atomic_store_explicit(&d->watch[cpu], ring, memory_order_release);
	atomic_store(&d->watching, true);
}

void decoders_note_load(Decoders *d) {
	atomic_fetch_add(&d->loads, 1);
}

const ProducerScan *decoders_enter(Decoders *d, unsigned reader) {
	ReaderSlot *s = &d->slots[reader];
	const ProducerScan *p;

	/* Announce, then check that it is still current: if it is, the main thread either has not
	 * replaced it yet (and will then see the announcement before freeing it) or never will. */
	do {
		p = atomic_load(&d->current);
		atomic_store(&s->hazard, p);
	} while (atomic_load(&d->current) != p);
	return p;
}

void decoders_leave(Decoders *d, unsigned reader) {
	atomic_store_explicit(&d->slots[reader].hazard, NULL, memory_order_release);
}

/* Whether a program load record waits in a watch ring: the program may be the one that declares
 * the type. A load is recorded before the program can run, so before any record it emits. */
static bool load_pending(Decoders *d) {
	for (unsigned i = 0; i < d->n_cpus; i++) {
		const Ring *w = atomic_load_explicit(&d->watch[i], memory_order_acquire);

		if (w && !ring_consumed(w))
			return true;
	}
	return false;
}

void decoders_want_scan(Decoders *d) {
	uint64_t one = 1;

	if (atomic_load_explicit(&d->want, memory_order_relaxed) || atomic_exchange(&d->want, true))
		return;
	(void) !write(d->want_fd, &one, sizeof(one));
}

/* The reader's settled set, emptied when what it was valid for changed. */
static uint64_t *settled_set(Decoders *d, ReaderSlot *s, uint64_t ts_ns) {
	const ProducerScan *scan = atomic_load_explicit(&s->hazard, memory_order_relaxed);
	uint64_t generation = scan ? scan->generation : 0;
	uint64_t loads = atomic_load_explicit(&d->loads, memory_order_acquire);
	bool watching = atomic_load_explicit(&d->watching, memory_order_relaxed);

	if (s->settled_gen != generation || s->settled_loads != loads ||
	    (!watching && ts_ns - s->settled_ns > SETTLE_MAX_NS)) {
		memset(s->settled, 0, sizeof(s->settled));
		s->settled_gen = generation;
		s->settled_loads = loads;
		s->settled_ns = ts_ns;
	}
	return s->settled;
}

void decoders_settle(Decoders *d, unsigned reader, uint16_t type) {
	ReaderSlot *s = &d->slots[reader];
	unsigned bit = type - PERFRELAY_TYPE_THIRD_PARTY_MIN;

	if (type < PERFRELAY_TYPE_THIRD_PARTY_MIN)
		return;
	/* The set was brought up to date by the decoders_missing() that preceded. */
	s->settled[bit / 64] |= UINT64_C(1) << (bit % 64);
}

DecoderVerdict decoders_missing(Decoders *d, unsigned reader, uint16_t type, uint64_t ts_ns) {
	ReaderSlot *s = &d->slots[reader];
	unsigned bit = type - PERFRELAY_TYPE_THIRD_PARTY_MIN;
	uint64_t *settled;

	if (type < PERFRELAY_TYPE_THIRD_PARTY_MIN)
		return DECODER_UNKNOWN;
	/* Checked before the settled set: a load noted after this returns changes `loads`. */
	if (load_pending(d))
		return DECODER_HOLD; /* the ring woke the load watch thread */
	settled = settled_set(d, s, ts_ns);
	if (settled[bit / 64] & (UINT64_C(1) << (bit % 64)))
		return DECODER_UNKNOWN;
	if (atomic_load_explicit(&d->scanned_ns, memory_order_acquire) > ts_ns) {
		/* A scan that started after the record was emitted found no decoder for it, or its
		 * result is newer than the scan we hold: then look again with that one. */
		if (atomic_load(&d->current) != atomic_load_explicit(&s->hazard, memory_order_relaxed))
			return DECODER_HOLD;
		settled[bit / 64] |= UINT64_C(1) << (bit % 64);
		return DECODER_UNKNOWN;
	}
	decoders_want_scan(d);
	return DECODER_HOLD;
}
