/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* perfrelay's built-in probes (exec, exit, fork, open, connect): tracepoint programs that
 * turn kernel events into event.h records on the pinned perf event array. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "event.h"
#include "producer.bpf.h"

/* Address families, as in <linux/socket.h>, which cannot be included beside vmlinux.h. */
#define AF_INET  2
#define AF_INET6 10

/* Pending syscalls waiting for their exit tracepoint. LRU, so entries of threads that never
 * reach the exit tracepoint (killed mid-syscall, probe attached mid-call) age out instead of
 * filling the map and blocking new entries. */
#define PENDING_MAX 10240

/* Scratch slots, one per record kind. The kernel keeps one instance of each program from
 * nesting on a CPU, but not different programs: where a tracepoint program can be preempted,
 * another probe may run on the same CPU before it emits, and must not overwrite its record. */
enum {
	SCRATCH_EXEC,
	SCRATCH_EXIT,
	SCRATCH_FORK,
	SCRATCH_OPEN,
	SCRATCH_CONNECT,
	SCRATCH_SLOTS,
};

union probe_record {
	struct perfrelay_exec exec;
	struct perfrelay_exit exit;
	struct perfrelay_fork fork;
	struct perfrelay_open open;
	struct perfrelay_connect connect;
};

/* Records do not fit the 512-byte BPF stack (exec is 848 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, union probe_record);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} probes_scratch SEC(".maps");

/* The record is completed at enter (everything but the result) so exit only adds the
 * result and emits straight from the map value without another copy. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PENDING_MAX);
	__type(key, __u64); /* pid_tgid: one syscall in flight per thread */
	__type(value, struct perfrelay_open);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} open_args SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PENDING_MAX);
	__type(key, __u64);
	__type(value, struct perfrelay_connect);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} connect_args SEC(".maps");

/* perfrelayd's persistent per (producer, CPU) totals (struct perfrelay_received): no program
 * uses it; it lives in this object so that libbpf creates, pins and checks it like the other
 * maps. The daemon sets max_entries to PERFRELAY_MAX_PRODUCERS * possible CPUs and mmaps it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perfrelay_received);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} received SEC(".maps");

/* Zeroed before use: records reach clients as raw bytes (format "binary"), and stale bytes
 * behind a NUL or in padding would leak another process's paths and arguments. */
static __always_inline void *scratch_get(__u32 slot)
{
	void *p = bpf_map_lookup_elem(&probes_scratch, &slot);

	if (p)
		__builtin_memset(p, 0, sizeof(union probe_record));
	return p;
}

SEC("tp/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct perfrelay_exec *e;
	unsigned long arg_start, arg_end, len;
	__u64 uid_gid = bpf_get_current_uid_gid();
	__u32 fname_off, i, argc = 0;

	/* No daemon: count the attempt and its failure, build nothing. */
	if (perfrelay_idle(PERFRELAY_PRODUCER_EXEC))
		return 0;
	e = scratch_get(SCRATCH_EXEC);
	if (!e)
		return 0;

	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->uid = (__u32)uid_gid;
	e->gid = uid_gid >> 32;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	/* __data_loc: low 16 bits are the offset of the string inside the trace record. */
	fname_off = ctx->__data_loc_filename & 0xFFFF;
	bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), (void *)ctx + fname_off);

	/* The new image's argument strings lie back to back, NUL-terminated, between arg_start
	 * and arg_end on the user stack, written by execve just before this tracepoint. */
	arg_start = BPF_CORE_READ(task, mm, arg_start);
	arg_end = BPF_CORE_READ(task, mm, arg_end);
	len = arg_end > arg_start ? arg_end - arg_start : 0;
	if (len > PERFRELAY_ARGV_LEN - 1) {
		len = PERFRELAY_ARGV_LEN - 1;
		e->argv_truncated = 1;
	}
	/* Repeats the clamp in a form any verifier tracks. Clang 14 with kernel 6.18 loads
	 * without it, but a compiler that spills len, or an older verifier that loses a
	 * scalar's range across a spill, would reject the variable-size read. */
	len &= PERFRELAY_ARGV_LEN - 1;
	if (len > 0 && bpf_probe_read_user(e->argv, len, (const void *)arg_start) < 0) {
		/* Arguments exist but could not be read: say so rather than report none. */
		len = 0;
		e->argv_truncated = 1;
	}
	/* A cut-off final argument ends at argv[len], which stays NUL from the memset (len <
	 * PERFRELAY_ARGV_LEN): count that byte so argv[argv_len - 1] is always a terminator, as
	 * the decoder requires. */
	if (len > 0 && e->argv[(len - 1) & (PERFRELAY_ARGV_LEN - 1)] != '\0')
		len++;
	e->argv_len = len;

	for (i = 0; i < PERFRELAY_ARGV_LEN; i++) {
		if (i >= len)
			break;
		if (e->argv[i] == '\0')
			argc++;
	}
	e->argc = argc;

	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_EXEC, PERFRELAY_PRODUCER_EXEC);
	return 0;
}

SEC("tp/sched/sched_process_exit")
int handle_exit(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct perfrelay_exit *e;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	int code;

	/* A process, not each of its threads, exits once: report only the group leader. */
	if ((__u32)pid_tgid != pid_tgid >> 32)
		return 0;

	if (perfrelay_idle(PERFRELAY_PRODUCER_EXIT))
		return 0;
	e = scratch_get(SCRATCH_EXIT);
	if (!e)
		return 0;

	code = BPF_CORE_READ(task, exit_code);
	e->pid = pid_tgid >> 32;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->uid = (__u32)bpf_get_current_uid_gid();
	e->exit_code = (code >> 8) & 0xff;
	e->signal = code & 0x7f;
	/* start_time is CLOCK_MONOTONIC, like bpf_ktime_get_ns(). */
	e->runtime_ns = bpf_ktime_get_ns() - BPF_CORE_READ(task, start_time);
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_EXIT, PERFRELAY_PRODUCER_EXIT);
	return 0;
}

/* tp_btf: the raw tracepoint hands us both task_structs, where the classic tracepoint only
 * has the child's pid and would lose its tgid (thread vs process). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	struct perfrelay_fork *e;

	if (perfrelay_idle(PERFRELAY_PRODUCER_FORK))
		return 0;
	e = scratch_get(SCRATCH_FORK);
	if (!e)
		return 0;

	e->parent_pid = BPF_CORE_READ(parent, tgid);
	e->child_pid = BPF_CORE_READ(child, pid);
	e->child_tgid = BPF_CORE_READ(child, tgid);
	e->uid = (__u32)bpf_get_current_uid_gid();
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), parent->comm);

	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_FORK, PERFRELAY_PRODUCER_FORK);
	return 0;
}

SEC("tp/syscalls/sys_enter_openat")
int handle_open_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct perfrelay_open *e;

	/* No daemon: the exit handler counts the attempt; nothing to prepare. */
	if (perfrelay_is_idle())
		return 0;
	e = scratch_get(SCRATCH_OPEN);
	if (!e)
		return 0;

	e->pid = pid_tgid >> 32;
	e->uid = (__u32)bpf_get_current_uid_gid();
	e->flags = (int)ctx->args[2];
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	/* Read now: the user buffer may be reused or freed by the time the syscall returns. */
	bpf_probe_read_user_str(e->path, sizeof(e->path), (const char *)ctx->args[1]);

	bpf_map_update_elem(&open_args, &pid_tgid, e, BPF_ANY);
	return 0;
}

SEC("tp/syscalls/sys_exit_openat")
int handle_open_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct perfrelay_open *e;

	if (perfrelay_idle(PERFRELAY_PRODUCER_OPEN))
		return 0;
	e = bpf_map_lookup_elem(&open_args, &pid_tgid);
	if (!e)
		return 0;

	e->result = (int)ctx->ret;
	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_OPEN, PERFRELAY_PRODUCER_OPEN);
	bpf_map_delete_elem(&open_args, &pid_tgid);
	return 0;
}

SEC("tp/syscalls/sys_enter_connect")
int handle_connect_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	const void *uaddr = (const void *)ctx->args[1];
	__u32 addrlen = (__u32)ctx->args[2];
	struct perfrelay_connect *e;
	__u16 family = 0;
	__be16 port;

	if (perfrelay_is_idle())
		return 0;
	e = scratch_get(SCRATCH_CONNECT);
	if (!e)
		return 0;

	e->pid = pid_tgid >> 32;
	e->uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	/* A short or unreadable sockaddr still yields a record (family 0 or family only): the
	 * result at exit (-EINVAL, -EFAULT) tells the rest. The length checks keep us from
	 * reading past what the caller handed to the kernel. */
	if (addrlen >= sizeof(family) && bpf_probe_read_user(&family, sizeof(family), uaddr) == 0) {
		e->family = family;
		if (family == AF_INET && addrlen >= sizeof(struct sockaddr_in)) {
			if (bpf_probe_read_user(&port, sizeof(port),
						uaddr + offsetof(struct sockaddr_in, sin_port)) == 0)
				e->port = bpf_ntohs(port);
			bpf_probe_read_user(e->addr, 4,
					    uaddr + offsetof(struct sockaddr_in, sin_addr));
		} else if (family == AF_INET6 &&
			   addrlen >= offsetof(struct sockaddr_in6, sin6_scope_id)) {
			/* The kernel accepts the 24-byte RFC 2133 sockaddr_in6 without
			 * sin6_scope_id, so that is the minimum length to read. */
			if (bpf_probe_read_user(&port, sizeof(port),
						uaddr + offsetof(struct sockaddr_in6, sin6_port)) == 0)
				e->port = bpf_ntohs(port);
			bpf_probe_read_user(e->addr, 16,
					    uaddr + offsetof(struct sockaddr_in6, sin6_addr));
		}
	}

	bpf_map_update_elem(&connect_args, &pid_tgid, e, BPF_ANY);
	return 0;
}

SEC("tp/syscalls/sys_exit_connect")
int handle_connect_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct perfrelay_connect *e;

	if (perfrelay_idle(PERFRELAY_PRODUCER_CONNECT))
		return 0;
	e = bpf_map_lookup_elem(&connect_args, &pid_tgid);
	if (!e)
		return 0;

	e->result = (int)ctx->ret;
	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_CONNECT, PERFRELAY_PRODUCER_CONNECT);
	bpf_map_delete_elem(&connect_args, &pid_tgid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
