/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the task iterator (tasks.bpf.c) writes for each process alive when the daemon starts:
 * the seed of its process table (daemon/hub/proctable.h). Not a record of the event ABI: it
 * passes between this build's BPF object and this build's daemon only. */
#pragma once

#ifdef __bpf__
#include "vmlinux.h"
#else
#include <linux/types.h>
#endif

struct perfrelay_task_seed {
	__u64 exec_id;
	__u64 parent_exec_id;
	__u64 cgroup_id; /* cgroup v2 id, as bpf_get_current_cgroup_id() gives it */
	__u32 pid;       /* tgid */
	__u32 uid;       /* real uid */
	char comm[16];
};
