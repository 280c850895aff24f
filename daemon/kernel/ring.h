/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One CPU's perf ring: the PERF_COUNT_SW_BPF_OUTPUT event, its mmapped buffer, and draining
 * it under the perf ring contract. A Ring is owned by exactly one reader thread once started. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/perf_event.h>

#include "macro.h"
#include "kernel/perfring.h"

typedef struct Ring Ring;

/* The default wakeup watermark's ceiling (manager_ring_options()). */
#define RING_WATERMARK_MAX (64u * 1024u)

typedef struct RingOptions {
	unsigned pages; /* data pages, a power of two */
	/* The CPU's protected lane (docs/pipeline.md, "The protected lane"): a second
	 * PERF_COUNT_SW_BPF_OUTPUT event of the same CPU with its own ring of this many data pages
	 * (a power of two), which the built-in exec, fork and exit probes write into instead of the
	 * main ring, so that a flood that fills the main ring costs none of them. 0: none. */
	unsigned lane_pages;
	/* Instead of PERF_COUNT_SW_BPF_OUTPUT samples, a dummy software event's side-band records
	 * of BPF programs loaded and unloaded on the CPU (PERF_RECORD_BPF_EVENT, perf_event_attr's
	 * bpf_event: Linux 5.1). */
	bool bpf_events;
	uint32_t watermark;     /* wake up after this many bytes; 0 = use wakeup_events */
	uint32_t wakeup_events; /* wake up after this many records (when watermark is 0); 0 = 1 */
} RingOptions;

/* Opens the perf event for `cpu` (non-blocking, close-on-exec) and maps 1 + pages pages; with
 * lane_pages, the lane's event too (ring_lane()), with the same wakeup options scaled to it. */
int ring_open(unsigned cpu, const RingOptions *o, Ring **ret);
Ring *ring_free(Ring *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(Ring *, ring_free);

int ring_fd(const Ring *r);
/* The CPU's protected lane, a Ring of its own owned by r (freed with it), or NULL. */
Ring *ring_lane(const Ring *r);
unsigned ring_cpu(const Ring *r);
uint64_t ring_data_size(const Ring *r);
/* When the kernel wakes the reader: after ring_watermark() bytes if that is not 0, else after
 * ring_wakeup_events() records (the options as ring_open() applied them). */
uint32_t ring_watermark(const Ring *r);
uint32_t ring_wakeup_events(const Ring *r);

/* Called for every record; rec is 8-aligned, contiguous and valid until the callback returns.
 * Returns true to consume it, false to stop the drain before it: it stays in the ring and is
 * the first record the next drain sees. */
typedef bool (*RingRecordFn)(void *userdata, const uint8_t *rec, uint32_t size);

/* Drains what the kernel has published, up to about `budget` bytes (0 = no limit), calling fn
 * for each record, and stores data_tail once. Returns the bytes consumed, or -EBADMSG if the
 * ring was corrupt (it is then skipped to head and the caller counts it). */
int64_t ring_drain(Ring *r, uint64_t budget, RingRecordFn fn, void *userdata, uint64_t *ret_skipped);

/* What draining a ring touches, for ring_view_drain(): a reader that drains with it gets its
 * record callback inlined into the loop (one indirect call per record less on the hot path). */
typedef struct RingView {
	struct perf_event_mmap_page *meta;
	uint8_t *data;
	uint64_t mask;
	uint8_t *scratch;
} RingView;
void ring_view(const Ring *r, RingView *ret);

/* ring_drain() itself, for a caller whose fn is known at compile time. */
static inline __attribute__((always_inline)) int64_t ring_view_drain(
	const RingView *r, uint64_t budget, RingRecordFn fn, void *userdata, uint64_t *ret_skipped) {
	/* Only this thread writes data_tail, so a plain load of our own last store is exact. */
	uint64_t tail = __atomic_load_n(&r->meta->data_tail, __ATOMIC_RELAXED), start = tail;
	/* (C) in the kernel's ring buffer document: data_head load, then smp_rmb() before any
	 * record is read. The acquire load provides exactly that ordering. */
	uint64_t head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t skipped = 0;

	for (;;) {
		const uint8_t *rec;
		uint32_t size;
		PerfringStatus s = perfring_next(r->data, r->mask, tail, head, r->scratch, &rec, &size);

		if (s == PERFRING_EMPTY)
			break;
		if (s == PERFRING_CORRUPT) {
			/* Only the kernel writes this ring; if its framing is broken we cannot resync
			 * inside the batch, so skip what is published and let the caller count it. */
			skipped = head - tail;
			tail = head;
			break;
		}
		if (_unlikely_(!fn(userdata, rec, size)))
			break;
		tail += size;
		if (tail == head && (budget == 0 || tail - start < budget)) {
			/* More may have arrived while we worked: take it in the same batch, still
			 * with one tail store at the end. */
			head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);
		}
		if (budget && tail - start >= budget)
			break;
	}

	if (tail != start) {
		/* (D): every read of the records above must be complete before the kernel may
		 * overwrite them, i.e. a full barrier (smp_mb) separates them from the tail store. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		__atomic_store_n(&r->meta->data_tail, tail, __ATOMIC_RELAXED);
	}
	*ret_skipped = skipped;
	return (int64_t) (tail - start - skipped);
}

/* True if the kernel has published records not yet consumed (one shared-memory load). */
int ring_pending(const Ring *r);
/* Any thread: whether the ring's owner has consumed every record the kernel published so far,
 * and everything the owner did before its tail store is visible to the caller (acquire loads
 * of both positions: the owner stores data_tail after a full fence). */
bool ring_consumed(const Ring *r);
