/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One CPU's perf ring: perf_event_open + mmap, and the consumer side of the ring contract. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/perf_event.h>

#include "macro.h"
#include "kernel/perfring-open.h"
#include "kernel/perfring.h"
#include "kernel/ring.h"

struct Ring {
	int fd;
	unsigned cpu;
	struct perf_event_mmap_page *meta; /* the first mapped page: data_head/data_tail */
	size_t map_size;
	uint8_t *data;
	uint64_t mask;          /* data size - 1 */
	uint8_t *scratch;       /* PERFRING_RECORD_MAX bytes for records that wrap */
	uint32_t watermark;     /* as opened: wakeup after this many bytes, or 0 */
	uint32_t wakeup_events; /* as opened: wakeup after this many records (watermark 0) */
	Ring *lane;             /* the CPU's protected lane, or NULL */
};

int ring_open(unsigned cpu, const RingOptions *o, Ring **ret) {
	PerfRingAttr a = {
		.pages = o->pages,
		.watermark = o->watermark,
		.wakeup_events = o->wakeup_events,
		.bpf_events = o->bpf_events,
	};
	_cleanup_(ring_freep) Ring *r = NULL;
	struct perf_event_attr attr;
	PerfRingMap m;
	int k;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fd = -EBADF;
	r->cpu = cpu;
	/* As opened: what perf_ring_open() asks the kernel for (it also checks the page count). */
	perf_ring_attr(&a, &attr);
	r->watermark = attr.watermark ? attr.wakeup_watermark : 0;
	r->wakeup_events = attr.watermark ? 0 : attr.wakeup_events;

	k = perf_ring_open(cpu, &a, &m);
	if (k < 0)
		return k;
	r->fd = m.fd;
	r->meta = m.meta;
	r->map_size = m.map_size;
	r->data = m.data;
	r->mask = m.data_size - 1;

	r->scratch = aligned_alloc(8, ALIGN_TO(PERFRING_RECORD_MAX, 8u));
	if (!r->scratch)
		return -ENOMEM;

	if (o->lane_pages > 0) {
		/* The lane wakes its reader like the main ring, but at a quarter of its own size at
		 * the latest (a byte watermark must stay below the ring's size). */
		uint64_t quarter = (uint64_t) o->lane_pages * (uint64_t) sysconf(_SC_PAGESIZE) / 4;
		RingOptions lo = {
			.pages = o->lane_pages,
			.watermark = o->watermark ? (uint32_t) MIN((uint64_t) o->watermark, MAX(quarter, 1u)) :
						    0,
			.wakeup_events = o->wakeup_events,
		};

		k = ring_open(cpu, &lo, &r->lane);
		if (k < 0)
			return k;
	}

	*ret = TAKE_PTR(r);
	return 0;
}

Ring *ring_free(Ring *r) {
	if (!r)
		return NULL;
	ring_free(r->lane);
	if (r->meta)
		munmap(r->meta, r->map_size);
	safe_close(r->fd);
	free(r->scratch);
	free(r);
	return NULL;
}

int ring_fd(const Ring *r) {
	return r->fd;
}
Ring *ring_lane(const Ring *r) {
	return r->lane;
}
unsigned ring_cpu(const Ring *r) {
	return r->cpu;
}
uint64_t ring_data_size(const Ring *r) {
	return r->mask + 1;
}
uint32_t ring_watermark(const Ring *r) {
	return r->watermark;
}
uint32_t ring_wakeup_events(const Ring *r) {
	return r->wakeup_events;
}

int ring_pending(const Ring *r) {
	/* A relaxed load is enough for a hint; ring_drain() does the ordered load. */
	return __atomic_load_n(&r->meta->data_head, __ATOMIC_RELAXED) !=
		__atomic_load_n(&r->meta->data_tail, __ATOMIC_RELAXED);
}

void ring_view(const Ring *r, RingView *ret) {
	*ret = (RingView){ .meta = r->meta, .data = r->data, .mask = r->mask, .scratch = r->scratch };
}

int64_t ring_drain(Ring *r, uint64_t budget, RingRecordFn fn, void *userdata, uint64_t *ret_skipped) {
	RingView v;

	ring_view(r, &v);
	return ring_view_drain(&v, budget, fn, userdata, ret_skipped);
}

bool ring_consumed(const Ring *r) {
	uint64_t head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);

	return __atomic_load_n(&r->meta->data_tail, __ATOMIC_ACQUIRE) == head;
}
