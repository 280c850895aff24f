/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The processes alive at the daemon's start, one struct perfrelay_task_seed each, read from a
 * BPF task iterator (Linux 5.8): the seed of the process table, with the very exec ids the
 * probes put in events (process-ids.bpf.h). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "event.h"
#include "process-ids.bpf.h"
#include "tasks.h"

/* One process: `task` is any of its threads, described by its group leader. */
static __always_inline int write_process(struct seq_file *seq, struct task_struct *task) {
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);
	struct perfrelay_task_seed s = {};

	s.exec_id = task_exec_id(task);
	if (s.exec_id == 0 || !leader)
		return 0;
	s.parent_exec_id = task_exec_id(BPF_CORE_READ(leader, real_parent));
	s.cgroup_id = BPF_CORE_READ(leader, cgroups, dfl_cgrp, kn, id);
	s.pid = BPF_CORE_READ(leader, tgid);
	s.uid = BPF_CORE_READ(leader, cred, uid.val);
	BPF_CORE_READ_STR_INTO(&s.comm, leader, comm);
	return bpf_seq_write(seq, &s, sizeof(s));
}

SEC("iter/task")
int seed_tasks(struct bpf_iter__task *ctx) {
	struct task_struct *task = ctx->task;

	/* Each thread is visited: its process once, by its leader. */
	if (!task || BPF_CORE_READ(task, pid) != BPF_CORE_READ(task, tgid))
		return 0;
	write_process(ctx->meta->seq, task);
	/* And its parent, which the walk may not show: a PID namespace's init is not visited
	 * when the iterator starts at it on some kernels, yet every process it reaped names it.
	 * The daemon keeps the first record of each process. */
	write_process(ctx->meta->seq, BPF_CORE_READ(task, real_parent));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
