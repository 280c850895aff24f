/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The exec_id of a task's process image (docs/events.md, "Process identity"), shared by the
 * probes (every process event) and the task iterator that seeds the daemon's process table at
 * start (tasks.bpf.c): both must compute the very same id. Included after vmlinux.h and
 * bpf_core_read.h. */
#pragma once

#include "event.h"

/* Process identity (event.h, perfrelay_exec_id()): the exec_id of `task`'s process image, made
 * from its tgid and its group leader's start time and exec count, which an exec keeps and
 * counts up; 0 for no task or the idle task (the parent of init and kthreadd). */
static __always_inline __u64 task_exec_id(struct task_struct *task) {
	struct task_struct *leader;
	__u32 tgid;

	if (!task)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	if (tgid == 0)
		return 0;
	leader = BPF_CORE_READ(task, group_leader);
	return perfrelay_exec_id(
		tgid, BPF_CORE_READ(leader, start_boottime), BPF_CORE_READ(leader, self_exec_id));
}
