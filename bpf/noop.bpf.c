/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The benchmark's floor (bench/host_bench.py): programs that do nothing on the tracepoints the
 * open probe uses, which is what any syscall-tracepoint tracer costs a traced process before it
 * does any work. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("tp/syscalls/sys_enter_openat")
int noop_enter(void *ctx) {
	return 0;
}

SEC("tp/syscalls/sys_exit_openat")
int noop_exit(void *ctx) {
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
