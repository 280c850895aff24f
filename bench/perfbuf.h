/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The libbpf baselines: a consumer thread on perf_buffer__new_raw() with perfrelayd's perf
 * attributes (wakeup by watermark), or on perf_buffer__new() (libbpf's default: a wakeup per
 * record). The callbacks only count, and sample the latency. */
#pragma once

#include <stdint.h>

#include "consumer.h"

typedef struct Perfbuf Perfbuf;

typedef enum PerfbufKind {
	PERFBUF_RAW,     /* perf_buffer__new_raw(), watermark wakeups like perfrelayd */
	PERFBUF_DEFAULT, /* perf_buffer__new(): wakeup_events = 1 */
} PerfbufKind;

/* Opens a ring per online CPU into the perf event array map_fd (pages data pages each) and
 * starts the consumer thread, pinned to `cpu`. watermark 0: a quarter of the ring. */
int perfbuf_start(int map_fd, PerfbufKind kind, unsigned pages, uint32_t watermark, int cpu, Perfbuf **ret);
/* Tells the thread to drain what is left and stop, joins it, and returns its figures. */
void perfbuf_stop(Perfbuf *p, ConsumerResult *ret);
Perfbuf *perfbuf_free(Perfbuf *p);
