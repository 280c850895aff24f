/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for the counters' arithmetic (bpf/counters-scale.h, run by the BPF program at each
 * context switch) and their names (counter-names.c): multiplexing scaled up, running = 0,
 * counter wrap, a reopened event, no 64-bit overflow, a scaled flag that cannot wrap. */

#include <errno.h>
#include <linux/types.h>
#include <stdint.h>
#include <string.h>

#include "counters-scale.h"
#include "kernel/counter-names.h"

#include "unit-test.h"

static __u64 delta(__u64 pc, __u64 pe, __u64 pr, __u64 cc, __u64 ce, __u64 cr, int *scaled) {
	struct perfrelay_counter_reading prev = { pc, pe, pr }, cur = { cc, ce, cr };

	return perfrelay_counter_delta(&prev, &cur, scaled);
}

static void test_not_multiplexed(void) {
	int scaled = -1;

	/* Software counters: running == enabled, the delta is the count. */
	ASSERT(delta(100, 1000, 1000, 350, 2000, 2000, &scaled) == 250);
	ASSERT(scaled == 0);
	/* Two readings in the same nanosecond: nothing elapsed, the count still counts. */
	ASSERT(delta(100, 1000, 1000, 101, 1000, 1000, &scaled) == 1);
	ASSERT(scaled == 0);
	ASSERT(delta(5, 10, 10, 5, 10, 10, &scaled) == 0);
}

static void test_multiplexed(void) {
	int scaled = -1;

	/* On the PMU a quarter of the slice: 1000 counted stands for 4000. */
	ASSERT(delta(0, 0, 0, 1000, 400, 100, &scaled) == 4000);
	ASSERT(scaled == 1);
	/* Half the slice, from a non-zero start. */
	ASSERT(delta(500, 1000, 800, 1500, 3000, 1800, &scaled) == 2000);
	ASSERT(scaled == 1);
	/* Rounding down, as perf does: 10 * 3 / 2 = 15, 7 * 3 / 2 = 10.5 -> 10. */
	ASSERT(delta(0, 0, 0, 7, 3, 2, &scaled) == 10);
}

static void test_running_zero(void) {
	int scaled = -1;

	/* Enabled but never on the PMU in the slice: nothing measured, nothing charged. */
	ASSERT(delta(100, 1000, 500, 100, 2000, 500, &scaled) == 0);
	ASSERT(scaled == 0);
	/* Even if the counter moved (it cannot, but the bytes come from the kernel). */
	ASSERT(delta(100, 1000, 500, 180, 2000, 500, &scaled) == 0);
}

static void test_wrap(void) {
	int scaled = -1;

	/* The counter wrapped past 2^64 while the times went on: the delta is modulo 2^64. */
	ASSERT(delta(UINT64_MAX - 9, 1000, 1000, 5, 2000, 2000, &scaled) == 15);
	ASSERT(scaled == 0);
	/* Wrapped and multiplexed. */
	ASSERT(delta(UINT64_MAX - 9, 1000, 1000, 5, 3000, 2000, &scaled) == 30);
	ASSERT(scaled == 1);
}

static void test_reopened(void) {
	int scaled = -1;

	/* The daemon restarted and put a new event in the slot: its times start from 0, so its
	 * whole count is the slice's, and the old event's total is not subtracted from it. */
	ASSERT(delta(1000000, 5000000, 5000000, 700, 900, 900, &scaled) == 700);
	ASSERT(scaled == 0);
	ASSERT(delta(1000000, 5000000, 5000000, 700, 900, 300, &scaled) == 2100);
	ASSERT(scaled == 1);
}

static void test_no_overflow(void) {
	int scaled = -1;
	__u64 big = UINT64_C(1) << 40;

	/* count * enabled would overflow 64 bits: 2^40 * 2^40. */
	ASSERT(perfrelay_counter_scale(big, big, big / 2) == 2 * big);
	/* enabled above 2^32 loses low bits only: 3e9 counted over 10 s of 20 s. */
	ASSERT(perfrelay_counter_scale(3000000000ULL, 20000000000ULL, 10000000000ULL) == 6000000000ULL);
	/* A count that cannot be held saturates instead of wrapping. */
	ASSERT(perfrelay_counter_scale(UINT64_MAX, 4, 1) == UINT64_MAX);
	ASSERT(delta(0, 0, 0, UINT64_MAX / 2, 3, 1, &scaled) == UINT64_MAX);
	/* running == 0 cannot reach scale() through delta(), but scale() itself must not divide
	 * by zero either. */
	ASSERT(perfrelay_counter_scale(10, 5, 0) == 50);
}

/* A process's scaled flag, marked at every scaled charge of a long-lived process: it must never
 * wrap to 0 ("never scaled"). Counting every mark would take 2^32 of them to show the wrap; the
 * count is bounded instead, and one left at the top of its range by an older program stays set. */
static void test_mark_scaled(void) {
	__u32 n = 0;

	for (unsigned i = 0; i < 100000; i++)
		perfrelay_counter_mark_scaled(&n);
	ASSERT(n == 1);
	n = UINT32_MAX;
	perfrelay_counter_mark_scaled(&n);
	ASSERT(n != 0);
}

static void test_names(void) {
	ASSERT(counter_from_string("task-clock") == PERFRELAY_COUNTER_TASK_CLOCK);
	ASSERT(counter_from_string("branch-misses") == PERFRELAY_COUNTER_BRANCH_MISSES);
	ASSERT(counter_from_string("task_clock") == -EINVAL);
	ASSERT(counter_from_string(NULL) == -EINVAL);
	ASSERT(strcmp(counter_key_to_string(PERFRELAY_COUNTER_TASK_CLOCK), "task_clock_ns") == 0);
	ASSERT(counter_key_from_string("context_switches") == PERFRELAY_COUNTER_CONTEXT_SWITCHES);
	ASSERT(counter_to_string(PERFRELAY_COUNTERS_MAX) == NULL);
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++) {
		ASSERT(counter_from_string(counter_to_string(i)) == (int) i);
		ASSERT(counter_key_from_string(counter_key_to_string(i)) == (int) i);
		ASSERT(counter_is_hardware(i) == !(COUNTERS_SOFTWARE & (1u << i)));
	}
}

int main(void) {
	test_not_multiplexed();
	test_multiplexed();
	test_running_zero();
	test_wrap();
	test_reopened();
	test_no_overflow();
	test_mark_scaled();
	test_names();
	return failures ? 1 : 0;
}
