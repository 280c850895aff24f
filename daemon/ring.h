/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One CPU's perf ring: the PERF_COUNT_SW_BPF_OUTPUT event, its mmapped buffer, and draining
 * it under the perf ring contract. A Ring is owned by exactly one reader thread once started. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef struct Ring Ring;

typedef struct RingOptions {
	unsigned pages;         /* data pages, a power of two */
	uint32_t watermark;     /* wake up after this many bytes; 0 = use wakeup_events */
	uint32_t wakeup_events; /* wake up after this many records (when watermark is 0); 0 = 1 */
} RingOptions;

/* Opens the perf event for `cpu` (non-blocking, close-on-exec) and maps 1 + pages pages. */
int ring_open(unsigned cpu, const RingOptions *o, Ring **ret);
Ring *ring_free(Ring *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(Ring *, ring_free);

int ring_fd(const Ring *r);
unsigned ring_cpu(const Ring *r);
uint64_t ring_data_size(const Ring *r);
/* When the kernel wakes the reader: after ring_watermark() bytes if that is not 0, else after
 * ring_wakeup_events() records (the options as ring_open() applied them). */
uint32_t ring_watermark(const Ring *r);
uint32_t ring_wakeup_events(const Ring *r);

/* Called for every record; rec is 8-aligned, contiguous and valid until the callback returns. */
typedef void (*RingRecordFn)(void *userdata, const uint8_t *rec, uint32_t size);

/* Drains what the kernel has published, up to about `budget` bytes (0 = no limit), calling fn
 * for each record, and stores data_tail once. Returns the bytes consumed, or -EBADMSG if the
 * ring was corrupt (it is then skipped to head and the caller counts it). */
int64_t ring_drain(Ring *r, uint64_t budget, RingRecordFn fn, void *userdata, uint64_t *ret_skipped);

/* True if the kernel has published records not yet consumed (one shared-memory load). */
int ring_pending(const Ring *r);
