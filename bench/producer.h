/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The benchmark's BPF producer (bpf/bench.bpf.c) from user space: loaded against a pin root so
 * that it writes into perfrelayd's pinned array, or into a private one for the libbpf readers,
 * and its per-CPU accounting counters. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct BenchProducer BenchProducer;

typedef struct BenchProducerOptions {
	const char *pin_root;      /* bpffs directory of "events" and "counters" */
	uint32_t target_tgid;      /* the process whose getpgid() calls emit */
	uint32_t records_per_call; /* K, 1..256 */
	uint32_t record_size;      /* bytes per record, header included: 40..1024, multiple of 8 */
} BenchProducerOptions;

/* Opens, configures, loads and attaches the producer. The pins under pin_root are reused when
 * they exist (perfrelayd's) and created otherwise (a private array); *ret_created_pins tells
 * which, so that the caller removes only what it created. */
int bench_producer_new(const BenchProducerOptions *o, BenchProducer **ret, bool *ret_created_pins);
/* Detaches and unloads; the pins stay (see bench_producer_unpin()). Accepts NULL. */
BenchProducer *bench_producer_free(BenchProducer *p);
/* Removes the pins the producer made under its root, and the root if it is empty. */
int bench_producer_unpin(BenchProducer *p);

int bench_producer_events_fd(const BenchProducer *p);
/* Sums attempts and failures of PERFRELAY_PRODUCER_BENCH over all CPUs. */
int bench_producer_counters(const BenchProducer *p, uint64_t *ret_attempts, uint64_t *ret_failures);
