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

#include "decoders.h"
#include "event.h"

/* Third-party types are PERFRELAY_TYPE_THIRD_PARTY_MIN..UINT16_MAX: a bit each per reader. */
#define N_THIRD_PARTY_TYPES (UINT16_MAX + 1u - PERFRELAY_TYPE_THIRD_PARTY_MIN)

typedef struct ReaderSlot {
	_Atomic(const ProducerScan *) hazard;
	/* Reader thread only: types reported for the scan of generation `reported_for`. */
	uint64_t reported_for;
	uint64_t reported[N_THIRD_PARTY_TYPES / 64];
} ReaderSlot;

struct Decoders {
	_Atomic(ProducerScan *) current;
	atomic_bool unknown;
	ProducerScan **retired; /* main thread only */
	size_t n_retired;
	uint64_t generation; /* of the last scan published */
	unsigned n_readers;
	ReaderSlot *slots;
};

int decoders_new(unsigned n_readers, Decoders **ret) {
	_cleanup_(decoders_freep) Decoders *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->n_readers = n_readers;
	d->slots = calloc(n_readers ?: 1, sizeof(ReaderSlot));
	if (!d->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < n_readers; i++)
		atomic_init(&d->slots[i].hazard, NULL);
	atomic_init(&d->current, NULL);
	atomic_init(&d->unknown, false);
	*ret = TAKE_PTR(d);
	return 0;
}

Decoders *decoders_free(Decoders *d) {
	if (!d)
		return NULL;
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

bool decoders_take_unknown(Decoders *d) {
	/* Called on every wakeup of the main thread: read before writing, so that the line stays
	 * shared with the readers (which read `current` beside it every batch). */
	if (!atomic_load_explicit(&d->unknown, memory_order_relaxed))
		return false;
	return atomic_exchange(&d->unknown, false);
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

void decoders_report_unknown(Decoders *d, unsigned reader, uint16_t type) {
	ReaderSlot *s = &d->slots[reader];
	const ProducerScan *scan = atomic_load_explicit(&s->hazard, memory_order_relaxed);
	uint64_t generation = scan ? scan->generation : 0;
	unsigned bit;

	if (type < PERFRELAY_TYPE_THIRD_PARTY_MIN)
		return;
	if (s->reported_for != generation) {
		memset(s->reported, 0, sizeof(s->reported));
		s->reported_for = generation;
	}
	bit = type - PERFRELAY_TYPE_THIRD_PARTY_MIN;
	if (s->reported[bit / 64] & (UINT64_C(1) << (bit % 64)))
		return;
	s->reported[bit / 64] |= UINT64_C(1) << (bit % 64);
	atomic_store_explicit(&d->unknown, true, memory_order_relaxed);
}
