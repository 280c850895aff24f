/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Opening one CPU's BPF output perf ring, the one way the daemon's readers (ring.c), the flight
 * recorder (recorder.c) and the benchmark's libbpf perf_buffer (bench/perfbuf.c) ask for it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/perf_event.h>

typedef struct PerfRingAttr {
	unsigned pages;         /* data pages: a power of two */
	uint32_t watermark;     /* wake a reader after this many bytes; 0: by records */
	uint32_t wakeup_events; /* with watermark 0, after this many records (0 means 1) */
	bool backward;          /* write_backward, mapped read-only: an overwrite ring */
	bool bpf_events;        /* a dummy event carrying PERF_RECORD_BPF_EVENT, not samples */
} PerfRingAttr;

/* The perf_event_attr of such a ring (a PERF_COUNT_SW_BPF_OUTPUT event with raw samples). */
void perf_ring_attr(const PerfRingAttr *a, struct perf_event_attr *ret);

typedef struct PerfRingMap {
	int fd;
	void *meta;      /* the header page: struct perf_event_mmap_page */
	uint8_t *data;   /* the data area, pages * page size bytes */
	size_t map_size; /* header page + data */
	uint64_t data_size;
} PerfRingMap;

/* perf_event_open() on cpu (close-on-exec, non-blocking), mmap (writable, so the kernel never
 * passes the consumer's data_tail, unless backward), enable. On failure nothing is left open
 * and *ret is untouched. */
int perf_ring_open(unsigned cpu, const PerfRingAttr *a, PerfRingMap *ret);
void perf_ring_close(PerfRingMap *m); /* accepts a zeroed map with fd -EBADF */
