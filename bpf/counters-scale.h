/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* How much of a perf counter to charge between two readings on one CPU, corrected for
 * multiplexing (docs/counters.md), and a process's scaled flag. Pure and header-only: the
 * counters program runs them at every context switch and the unit tests feed them edge cases.
 * Included after vmlinux.h (BPF) or <linux/types.h> (user space). */
#ifndef PERFRELAY_COUNTERS_SCALE_H
#define PERFRELAY_COUNTERS_SCALE_H

/* One bpf_perf_event_read_value() result: the counter and the times (ns) the event was enabled
 * and really counting on the PMU, all accumulated since the event was opened. */
struct perfrelay_counter_reading {
	__u64 counter;
	__u64 enabled;
	__u64 running;
};

/* count * enabled / running without overflowing 64 bits (running < enabled, running > 0).
 * Exact while enabled fits 32 bits (4.3 s of slice, far above any context switch interval);
 * above, both times lose their low bits first. Saturates at 2^64 - 1 where count / running
 * reaches 2^32 (four billion events per ns of counting: no real counter), so that the product
 * below fits without a 128-bit multiply, which BPF does not have. */
static __inline __u64 perfrelay_counter_scale(__u64 count, __u64 enabled, __u64 running) {
	__u64 q, rem, hi = enabled >> 32;
	unsigned shift = 0;

	/* Without a loop (Linux 6.1's verifier refuses some loops clang makes): shift both
	 * times right by the bit length of enabled's upper half. */
	if (hi >> 16) {
		shift += 16;
		hi >>= 16;
	}
	if (hi >> 8) {
		shift += 8;
		hi >>= 8;
	}
	if (hi >> 4) {
		shift += 4;
		hi >>= 4;
	}
	if (hi >> 2) {
		shift += 2;
		hi >>= 2;
	}
	if (hi >> 1) {
		shift += 1;
		hi >>= 1;
	}
	shift += (unsigned) hi;
	enabled >>= shift;
	running >>= shift;
	if (running == 0)
		running = 1;
	q = count / running;
	rem = count % running; /* < running <= enabled < 2^32: rem * enabled fits */
	if (q > 0xffffffffULL)
		return ~0ULL;
	hi = q * enabled; /* < 2^64: both factors < 2^32 */
	if (hi > ~0ULL - rem * enabled / running)
		return ~0ULL;
	return hi + rem * enabled / running;
}

/* The count to charge for the slice between prev and cur. *ret_scaled is set to 1 when the
 * event was multiplexed in the slice (running < enabled) and the count was scaled up.
 * - A counter whose times went backwards is a new event (the daemon reopened it after a
 *   restart): it counted from 0 since its open, so the whole reading is the delta.
 * - The counter itself may wrap: deltas are taken modulo 2^64.
 * - running did not advance while enabled did: the event never reached the PMU in the slice,
 *   nothing was measured and nothing is charged (estimating would invent counts). */
static __inline __u64 perfrelay_counter_delta(
	const struct perfrelay_counter_reading *prev,
	const struct perfrelay_counter_reading *cur,
	int *ret_scaled) {
	__u64 counter = prev->counter, enabled = prev->enabled, running = prev->running;
	__u64 dc, de, dr;

	*ret_scaled = 0;
	if (cur->enabled < enabled || cur->running < running)
		counter = enabled = running = 0;
	dc = cur->counter - counter;
	de = cur->enabled - enabled;
	dr = cur->running - running;
	if (dr >= de)
		return dc;
	if (dr == 0)
		return 0;
	*ret_scaled = 1;
	return perfrelay_counter_scale(dc, de, dr);
}

/* Marks a counter of a process scaled, from any of its threads on any CPU. The flag is a count
 * (scaled_n, in the process's table entry) so that racing threads can set it with an atomic
 * add, but it is raised only from 0: a count of every scaled charge would wrap its u32 to 0,
 * "never scaled", in a long-lived process. Threads that race past the check add one each, a
 * CPU's worth at most. */
static __inline void perfrelay_counter_mark_scaled(__u32 *scaled_n) {
	if (*(volatile __u32 *) scaled_n == 0)
		__sync_fetch_and_add(scaled_n, 1);
}

#endif
