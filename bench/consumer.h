/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What every benchmark consumer (libbpf perf_buffer or socket subscriber) reports, and the
 * helpers their threads share. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "histogram.h"

/* One record in this many gets its kernel-to-consumer latency measured: a clock read per
 * record would be a cost the consumers under test do not have. */
#define LATENCY_SAMPLE_EVERY 64u

typedef struct ConsumerResult {
	uint64_t events;   /* benchmark records received */
	uint64_t lost;     /* libbpf: sum of PERF_RECORD_LOST; socket: sum of lost notices */
	uint64_t cpu_ns;   /* CPU time of the consumer's thread */
	bool complete;     /* socket: events + lost reached what the producer delivered */
	int error;         /* negative errno if the consumer failed, else 0 */
	Histogram latency; /* ns from bpf_ktime_get_boot_ns() at emit to CLOCK_BOOTTIME on receipt */
} ConsumerResult;

/* Pins the calling thread to one CPU (cpu < 0: leaves it alone). */
int consumer_pin_self(int cpu);
/* CPU time of the calling thread in nanoseconds. */
uint64_t thread_cpu_ns(void);
