/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Per-CPU statistics entries summed over CPUs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "macro.h"
#include "kernel/percpu.h"

int percpu_sum_u64(int map_fd, uint32_t key, unsigned n_cpus, size_t n_u64, uint64_t *ret) {
	_cleanup_free_ uint64_t *v = NULL;

	/* Each CPU's value is n_u64 counters: 8-byte aligned already, as the kernel lays them. */
	v = calloc((size_t) n_cpus * n_u64, sizeof(uint64_t));
	if (!v)
		return -ENOMEM;
	if (bpf_map_lookup_elem(map_fd, &key, v) < 0)
		return -errno;
	memset(ret, 0, n_u64 * sizeof(uint64_t));
	for (unsigned c = 0; c < n_cpus; c++)
		for (size_t f = 0; f < n_u64; f++)
			ret[f] += v[(size_t) c * n_u64 + f];
	return 0;
}
