/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Totals of a per-CPU BPF array entry whose value is a struct of __u64 counters (the recorder's,
 * the counters program's and the captures' statistics): one lookup, summed over CPUs. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Reads entry `key` of the per-CPU map (n_cpus values of n_u64 counters each) and writes their
 * sums, counter by counter, to ret[0..n_u64). ret is untouched on failure. */
int percpu_sum_u64(int map_fd, uint32_t key, unsigned n_cpus, size_t n_u64, uint64_t *ret);

/* For a struct of __u64 counters: percpu_sum_u64() into *ret. */
#define PERCPU_SUM(map_fd, key, n_cpus, ret)                                                               \
	({                                                                                                 \
		_Static_assert(sizeof(*(ret)) % sizeof(uint64_t) == 0, "a struct of u64 counters");        \
		percpu_sum_u64(                                                                            \
			(map_fd), (key), (n_cpus), sizeof(*(ret)) / sizeof(uint64_t), (uint64_t *) (ret)); \
	})
