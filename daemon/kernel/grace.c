/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An RCU grace period from user space: membarrier(MEMBARRIER_CMD_GLOBAL), or a map-in-map
 * update where membarrier is unavailable.
 *
 * Why a grace period is enough: the probes are tracepoint programs, and the kernel runs them
 * inside an RCU read-side section (trace_call_bpf() and the raw tracepoint path
 * bpf_trace_run*() take rcu_read_lock() around the program, with preemption or migration
 * disabled; faultable syscall tracepoints disable preemption around the BPF call). An emit
 * that found a ring in the perf event array before we cleared the slot has finished writing
 * into it when synchronize_rcu() returns.
 *
 * - MEMBARRIER_CMD_GLOBAL calls synchronize_rcu() (kernel/sched/membarrier.c), except on a
 *   machine with one online CPU, where it returns at once: there a program running with
 *   preemption disabled cannot be in flight while this thread runs on that CPU. It fails
 *   with EINVAL on nohz_full kernels and with ENOSYS where membarrier is compiled out.
 * - The fallback: updating a BPF_MAP_TYPE_ARRAY_OF_MAPS (or HASH_OF_MAPS) from user space
 *   makes the kernel wait for running non-sleepable BPF programs before the syscall returns
 *   (maybe_wait_bpf_programs() in kernel/bpf/syscall.c calls synchronize_rcu() for these map
 *   types, so that user space knows no program still uses the old inner map). A private
 *   one-slot map-in-map is made, updated once and closed. */
#include <errno.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "kernel/grace.h"
#include "macro.h"

static int grace_map_in_map(void) {
	LIBBPF_OPTS(bpf_map_create_opts, opts);
	_cleanup_close_ int inner = -EBADF, outer = -EBADF;
	uint32_t key = 0;
	int value;

	inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, NULL, sizeof(uint32_t), sizeof(uint32_t), 1, NULL);
	if (inner < 0)
		return negative_errno();
	opts.inner_map_fd = inner;
	outer = bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, NULL, sizeof(uint32_t), sizeof(uint32_t), 1, &opts);
	if (outer < 0)
		return negative_errno();
	value = inner;
	if (bpf_map_update_elem(outer, &key, &value, BPF_ANY) < 0)
		return negative_errno();
	return 0;
}

int grace_period(const char **ret_method) {
	int r;

	if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0) {
		if (ret_method)
			*ret_method = "membarrier";
		return 0;
	}
	r = grace_map_in_map();
	if (r < 0)
		return r;
	if (ret_method)
		*ret_method = "map-in-map update";
	return 0;
}
