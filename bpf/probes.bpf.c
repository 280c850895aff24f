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
#include "demand.bpf.h"
#include "lane.bpf.h"
#include "counters.bpf.h"
#include "process-ids.bpf.h"

/* Address families, as in <linux/socket.h>, which cannot be included beside vmlinux.h. */
#define AF_INET  2
#define AF_INET6 10

/* Pending syscalls waiting for their exit tracepoint: a plain hash, not LRU, so that an entry is
 * never evicted behind its thread's back (the syscall's record would vanish uncounted). Full, the
 * insert fails and is counted; entries of threads that never reach the exit tracepoint (a probe
 * detached mid-call) are removed, and counted, when the thread exits. The loader sizes the maps
 * from PendingSyscalls=; this is only the default. */
#define PENDING_MAX 10240

/* A signal_struct flag (<linux/sched/signal.h>): a #define, which vmlinux.h cannot carry. */
#define PERFRELAY_SIGNAL_GROUP_EXIT 0x00000004
#define PERFRELAY_EEXIST            17

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

/* Records do not fit the 512-byte BPF stack (exec is 1656 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, union probe_record);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} probes_scratch SEC(".maps");

/* The record is completed at enter (everything but the result) so exit only adds the result. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PENDING_MAX);
	__type(key, __u64); /* pid_tgid: one syscall in flight per thread */
	__type(value, struct perfrelay_open);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} open_args SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
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

/* Zeroed before use, as large as the record it holds: records reach clients as raw bytes
 * (format "binary"), and stale bytes behind a NUL or in padding would leak another process's
 * paths and arguments. A loop of 8-byte stores (every record is a multiple of 8 bytes, the
 * map's value 8-byte aligned): the compiler turns a memset, or a plain loop it recognizes as
 * one, into stores only up to a limit the exec record is above; volatile keeps it a loop. */
static __always_inline void *scratch_get_sized(__u32 slot, const __u32 size) {
	volatile __u64 *p = bpf_map_lookup_elem(&probes_scratch, &slot);

	if (!p)
		return NULL;
	for (__u32 i = 0; i < size / 8 && i < sizeof(union probe_record) / 8; i++)
		p[i] = 0;
	return (void *) p;
}
#define scratch_get(slot, type) ((type *) scratch_get_sized(slot, sizeof(type)))
_Static_assert(sizeof(union probe_record) % 8 == 0, "records are zeroed 8 bytes at a time");

/* Counts a record that will never be emitted as an attempt that failed, so that
 * attempts = received + failures holds and the seq gap it leaves is explained. */
static __always_inline void count_lost_attempt(__u32 producer) {
	struct perfrelay_counters *c = bpf_map_lookup_elem(&counters, &producer);

	if (!c)
		return;
	perfrelay_count_failed_for(c, producer); /* failure first: producer.bpf.h says why */
}

/* Stores a syscall's half-built record until its exit tracepoint; a full map is a lost record.
 * An entry the thread left before is a syscall whose exit was not traced (its program was not
 * attached yet, or no longer): its record is lost too, and counted, as it is overwritten. */
static __always_inline void pending_put(void *map, __u64 *pid_tgid, void *rec, __u32 producer) {
	long r = bpf_map_update_elem(map, pid_tgid, rec, BPF_NOEXIST);

	if (r == -PERFRELAY_EEXIST) {
		count_lost_attempt(producer);
		r = bpf_map_update_elem(map, pid_tgid, rec, BPF_EXIST);
	}
	if (r < 0)
		count_lost_attempt(producer);
}

/* A syscall filtered at its entry leaves no pending entry; one still there is an earlier
 * syscall's whose exit was not traced (a probe detached or attached in between): remove it, and
 * count its record as lost, or this syscall's exit would emit it with its own result. */
static __always_inline void pending_clear_stale(void *map, __u64 *pid_tgid, __u32 producer) {
	if (bpf_map_delete_elem(map, pid_tgid) == 0)
		count_lost_attempt(producer);
}

/* An exclusion or the throttle matched at the syscall's entry: filtered, once. */
static __always_inline void pending_filtered(void *map, __u64 *pid_tgid, __u32 producer) {
	count_filtered(producer);
	pending_clear_stale(map, pid_tgid, producer);
}

/* The thread's pending record, completed at the syscall's exit and emitted from the map value
 * itself, then removed (pending_done()). Safe without a copy: the element is this thread's
 * alone (keyed by pid_tgid; its enter and its reaper run on this thread, and a plain hash never
 * evicts), and it is only freed by the delete that follows the output. Deleted first, it would
 * go back to the map's free list, and another CPU could fill it while perf copies it. */
static __always_inline void pending_done(void *map, __u64 *pid_tgid) {
	bpf_map_delete_elem(map, pid_tgid);
}

static __always_inline void task_ids(struct task_struct *task, struct perfrelay_process_ids *ids) {
	ids->exec_id = task_exec_id(task);
	ids->parent_exec_id = task_exec_id(BPF_CORE_READ(task, real_parent));
}

static __always_inline void current_ids(struct perfrelay_process_ids *ids) {
	task_ids((struct task_struct *) bpf_get_current_task(), ids);
}

/* Paths as the kernel resolves them (d_path(), which tracepoints may not call): the names from
 * the dentry up to the task's root (its chroot or container root), crossing mount points, written backwards
 * into a per-CPU buffer, then copied into the record (cut at PERFRELAY_PATH_LEN - 1 bytes, its end lost).
 * Deeper than PATH_DEPTH_MAX components, or a name that cannot be read: "" (unknown).
 *
 * The walk's state (dentry, mount, offset) lives in the per-CPU map value, read and written
 * through volatile accesses, not in registers: every iteration then starts from the same
 * verifier state whichever branch the one before took (a mount crossing or a name), so the
 * verifier prunes instead of exploring 2^PATH_DEPTH_MAX paths. bpf_loop() would do the same but
 * needs Linux 5.17, and docs/kernels.md promises 5.14. */
#define PATH_BUF_HALF  4096 /* the path is built in the buffer's first half, names read into it */
#define PATH_NAME_MAX  255  /* NAME_MAX */
#define PATH_DEPTH_MAX 24

struct path_walk {
	__u64 dentry;      /* struct dentry *: the next component */
	__u64 mnt;         /* struct mount *: the mount it is in */
	__u64 root_dentry; /* the task's root (fs->root), where the walk ends as d_path()'s does */
	__u64 root_mnt;    /* struct vfsmount * of it */
	__u32 off;         /* where the path built so far starts in buf */
	__u32 _pad;
	char buf[2 * PATH_BUF_HALF];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct path_walk);
	/* Pinned as every map of the probes: a restarted daemon's programs then use the very same
	 * maps as the pinned links' and reuse them (probes.c, link_runs_same_program()). */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} path_scratch SEC(".maps");

#define WALK_GET(w, field)    (*(volatile typeof((w)->field) *) &(w)->field)
#define WALK_SET(w, field, v) (*(volatile typeof((w)->field) *) &(w)->field = (v))

static __always_inline void
	read_path(struct dentry *dentry, struct vfsmount *vfsmnt, struct fs_struct *fs, char *out) {
	__u32 zero = 0;
	struct path_walk *w;

	w = bpf_map_lookup_elem(&path_scratch, &zero);
	if (!w || !dentry || !vfsmnt)
		return;
	WALK_SET(w, root_dentry, (__u64) BPF_CORE_READ(fs, root.dentry));
	WALK_SET(w, root_mnt, (__u64) BPF_CORE_READ(fs, root.mnt));
	WALK_SET(w, dentry, (__u64) dentry);
	WALK_SET(w, mnt, (__u64) container_of(vfsmnt, struct mount, mnt));
	WALK_SET(w, off, PATH_BUF_HALF - 1);
	w->buf[PATH_BUF_HALF - 1] = 0;
	for (int i = 0; i < PATH_DEPTH_MAX; i++) {
		struct dentry *d = (struct dentry *) WALK_GET(w, dentry);
		struct mount *m = (struct mount *) WALK_GET(w, mnt);
		__u32 off = WALK_GET(w, off) & (PATH_BUF_HALF - 1);
		struct dentry *parent = BPF_CORE_READ(d, d_parent);
		struct dentry *mnt_root = BPF_CORE_READ(m, mnt.mnt_root);
		struct qstr name;
		__u32 len;
		long n;

		bool at_root = (__u64) d == WALK_GET(w, root_dentry) &&
			(__u64) __builtin_preserve_access_index(&m->mnt) == WALK_GET(w, root_mnt);

		if (at_root || d == mnt_root || d == parent) {
			struct mount *up = BPF_CORE_READ(m, mnt_parent);

			/* The task's root (a chroot's or a container's: the path as the task sees
			 * it, as d_path() and /proc/PID/exe give it), or the root of a file system:
			 * its mount point in the parent mount, unless it is the root of them all. */
			if (at_root || d != mnt_root || up == m) {
				if (off == PATH_BUF_HALF - 1)
					off--; /* "/" itself */
				w->buf[off & (PATH_BUF_HALF - 1)] = '/';
				bpf_probe_read_kernel_str(
					out, PERFRELAY_PATH_LEN, w->buf + (off & (PATH_BUF_HALF - 1)));
				return;
			}
			WALK_SET(w, dentry, (__u64) BPF_CORE_READ(m, mnt_mountpoint));
			WALK_SET(w, mnt, (__u64) up);
			continue;
		}
		name = BPF_CORE_READ(d, d_name);
		len = name.len;
		if (len == 0 || len > PATH_NAME_MAX || off < len + 2)
			return;
		off -= len + 1;
		/* "name\0" at off + 1 (the NUL falls on the '/' or the end written before it) */
		n = bpf_probe_read_kernel_str(
			w->buf + ((off + 1) & (PATH_BUF_HALF - 1)),
			(len + 1) & (2 * PATH_NAME_MAX + 1),
			name.name);
		if (n != len + 1)
			return;
		w->buf[off & (PATH_BUF_HALF - 1)] = '/';
		if (off + 1 + len < PATH_BUF_HALF - 1)
			w->buf[(off + 1 + len) & (PATH_BUF_HALF - 1)] = '/';
		WALK_SET(w, off, off);
		WALK_SET(w, dentry, (__u64) parent);
	}
}

/* The current task's effective uid; bpf_get_current_uid_gid() gives the real one. A set-uid
 * program has its caller's uid and its owner's euid (docs/security.md). A set-gid program, or
 * one with file capabilities, keeps its caller's uids: flagged PERFRELAY_CREDS_PRIVILEGED. The
 * permitted set is 64 bits whether the kernel spells it u32[2] (before 6.3) or u64. */
static __always_inline void current_creds(struct perfrelay_creds *c) {
	struct task_struct *task = (struct task_struct *) bpf_get_current_task();
	const struct cred *cred = BPF_CORE_READ(task, cred);
	__u64 caps = 0;

	BPF_CORE_READ_INTO(&caps, cred, cap_permitted);
	c->euid = BPF_CORE_READ(cred, euid.val);
	c->flags = BPF_CORE_READ(cred, egid.val) != BPF_CORE_READ(cred, gid.val) ||
			(BPF_CORE_READ(cred, uid.val) != 0 && caps != 0) ?
		PERFRELAY_CREDS_PRIVILEGED :
		0;
}

/* What an exec adds to the process ids (docs/events.md, "Process identity"): its nearest
 * ancestors, the executable as the kernel resolved it (path, device, inode) and the working
 * directory. */
static __always_inline void exec_context(struct task_struct *task, struct perfrelay_exec *e) {
	struct task_struct *p = BPF_CORE_READ(task, real_parent);
	struct file *exe = BPF_CORE_READ(task, mm, exe_file);
	struct fs_struct *fs = BPF_CORE_READ(task, fs);
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);

	task_ids(task, &e->ids);
	/* The image this exec replaced: the exec counted self_exec_id up (begin_new_exec(), before
	 * this tracepoint), the rest is as it was. */
	e->prev_exec_id = perfrelay_exec_id(
		BPF_CORE_READ(task, tgid),
		BPF_CORE_READ(leader, start_boottime),
		BPF_CORE_READ(leader, self_exec_id) - 1);
	for (int i = 0; i < PERFRELAY_ANCESTORS_MAX; i++) {
		__u32 tgid;

		if (!p)
			break;
		tgid = BPF_CORE_READ(p, tgid);
		if (tgid == 0)
			break;
		e->ancestors[i].exec_id = task_exec_id(p);
		e->ancestors[i].pid = tgid;
		BPF_CORE_READ_STR_INTO(&e->ancestors[i].comm, p, group_leader, comm);
		e->n_ancestors = i + 1;
		p = BPF_CORE_READ(p, real_parent);
	}
	if (exe) {
		e->exe_ino = BPF_CORE_READ(exe, f_inode, i_ino);
		e->exe_dev = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
		read_path(BPF_CORE_READ(exe, f_path.dentry), BPF_CORE_READ(exe, f_path.mnt), fs, e->exe);
	}
	if (fs)
		read_path(BPF_CORE_READ(fs, pwd.dentry), BPF_CORE_READ(fs, pwd.mnt), fs, e->cwd);
}

SEC("tp/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx) {
	struct task_struct *task = (struct task_struct *) bpf_get_current_task();
	struct perfrelay_exec *e;
	unsigned long arg_start, arg_end, len;
	__u64 uid_gid = bpf_get_current_uid_gid();
	__u32 fname_off, i, argc = 0;

	/* No daemon (the attempt and its failure counted) or nobody wants it (counted as
	 * filtered): build nothing. */
	if (probe_skip(PERFRELAY_TYPE_EXEC, PERFRELAY_PRODUCER_EXEC))
		return 0;
	e = scratch_get(SCRATCH_EXEC, struct perfrelay_exec);
	if (!e)
		return 0;

	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->uid = (__u32) uid_gid;
	e->gid = uid_gid >> 32;
	current_creds(&e->creds);
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	/* __data_loc: low 16 bits are the offset of the string inside the trace record. */
	fname_off = ctx->__data_loc_filename & 0xFFFF;
	bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), (void *) ctx + fname_off);

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
	if (len > 0 && bpf_probe_read_user(e->argv, len, (const void *) arg_start) < 0) {
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
	exec_context(task, e);

	emit_critical(ctx, e, sizeof(*e), PERFRELAY_TYPE_EXEC, PERFRELAY_PRODUCER_EXEC);
	return 0;
}

/* Once per process, when its last thread dies: sched_process_exit fires for every thread, and
 * neither "the leader exits" (a leader may pthread_exit() while other threads run; a non-leader
 * execve() kills the old leader in de_thread()) nor the tracepoint's newer group_dead argument
 * (6.16+) serves every kernel. signal->live is decremented before the tracepoint in do_exit() on
 * every kernel, so the thread that sees 0 is the last one. */
SEC("tp/sched/sched_process_exit")
int handle_exit(void *ctx) {
	struct task_struct *task = (struct task_struct *) bpf_get_current_task();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct perfrelay_counters_config *cfg;
	struct task_struct *leader;
	struct perfrelay_exit *e;
	unsigned int sig_flags;
	__u32 zero = 0, tid = (__u32) pid_tgid;
	int code;

	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;

	e = scratch_get(SCRATCH_EXIT, struct perfrelay_exit);
	if (!e)
		return 0;
	/* What wait() reports for the process: the group's code after exit_group() or a fatal
	 * signal, else the code of the thread that ended the group, this one (set in do_exit()
	 * before the tracepoint). Older kernels report the leader's own code to wait() in that
	 * last case (a leader that left with pthread_exit() while another thread ended with
	 * a plain thread exit); this one is the status the process really ended with. */
	leader = BPF_CORE_READ(task, group_leader);
	sig_flags = BPF_CORE_READ(task, signal, flags);
	if (sig_flags & PERFRELAY_SIGNAL_GROUP_EXIT)
		code = BPF_CORE_READ(task, signal, group_exit_code);
	else
		code = BPF_CORE_READ(task, exit_code);
	e->pid = BPF_CORE_READ(task, tgid);
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->uid = (__u32) bpf_get_current_uid_gid();
	current_creds(&e->creds);
	task_ids(task, &e->ids);
	e->exit_code = (code >> 8) & 0xff;
	e->signal = code & 0x7f;
	/* start_time is CLOCK_MONOTONIC, like bpf_ktime_get_ns(); the process started with its
	 * leader. */
	e->runtime_ns = bpf_ktime_get_ns() - BPF_CORE_READ(leader, start_time);
	BPF_CORE_READ_STR_INTO(&e->comm, leader, comm);

	/* With the counters' switch program attached, it takes the totals and emits the record
	 * once the teardown is done (counters_exit_flush()); without it, or with its table full:
	 * now, with the totals of now. */
	cfg = bpf_map_lookup_elem(&counters_config, &zero);
	if (cfg && (cfg->exit_probe & PERFRELAY_EXIT_PROBE_DEFER) &&
	    bpf_map_update_elem(&exit_pending, &tid, e, BPF_NOEXIST) == 0)
		return 0;
	/* Taken even while idle: the process's entry must leave the table with it. */
	counters_take(pid_tgid >> 32, tid, &e->counters);
	if (probe_skip(PERFRELAY_TYPE_EXIT, PERFRELAY_PRODUCER_EXIT))
		return 0;
	emit_critical(ctx, e, sizeof(*e), PERFRELAY_TYPE_EXIT, PERFRELAY_PRODUCER_EXIT);
	return 0;
}

/* tp_btf: the raw tracepoint hands us both task_structs, where the classic tracepoint only
 * has the child's pid and would lose its tgid (thread vs process). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child) {
	struct perfrelay_fork *e;

	if (probe_skip(PERFRELAY_TYPE_FORK, PERFRELAY_PRODUCER_FORK))
		return 0;
	e = scratch_get(SCRATCH_FORK, struct perfrelay_fork);
	if (!e)
		return 0;

	e->parent_pid = BPF_CORE_READ(parent, tgid);
	e->child_pid = BPF_CORE_READ(child, pid);
	e->child_tgid = BPF_CORE_READ(child, tgid);
	e->uid = (__u32) bpf_get_current_uid_gid();
	current_creds(&e->creds);
	task_ids(child, &e->ids);
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), parent->comm);

	emit_critical(ctx, e, sizeof(*e), PERFRELAY_TYPE_FORK, PERFRELAY_PRODUCER_FORK);
	return 0;
}

SEC("tp/syscalls/sys_enter_openat")
int handle_open_enter(struct trace_event_raw_sys_enter *ctx) {
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	const struct perfrelay_demand *d;
	struct perfrelay_open *e;

	/* No daemon: the exit handler counts the attempt; nothing to prepare. */
	if (perfrelay_is_idle())
		return 0;
	/* Filtered here, once per syscall: without a pending entry the exit makes no attempt. */
	d = demand_get();
	if (demand_unwanted(d, PERFRELAY_TYPE_OPEN, PERFRELAY_PRODUCER_OPEN)) {
		pending_clear_stale(&open_args, &pid_tgid, PERFRELAY_PRODUCER_OPEN);
		return 0;
	}
	e = scratch_get(SCRATCH_OPEN, struct perfrelay_open);
	if (!e)
		return 0;

	/* What the exclusions match first, the rest only for a record someone wants. */
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	if (demand_task_excluded(d, e->comm)) {
		pending_filtered(&open_args, &pid_tgid, PERFRELAY_PRODUCER_OPEN);
		return 0;
	}
	/* Read now: the user buffer may be reused or freed by the time the syscall returns. */
	bpf_probe_read_user_str(e->path, sizeof(e->path), (const char *) ctx->args[1]);
	if (d && d->n_paths && demand_path_excluded(d, e->path)) {
		pending_filtered(&open_args, &pid_tgid, PERFRELAY_PRODUCER_OPEN);
		return 0;
	}
	/* Last: what the exclusions drop costs the cgroup no token. */
	if (demand_throttled(d)) {
		pending_filtered(&open_args, &pid_tgid, PERFRELAY_PRODUCER_OPEN);
		return 0;
	}
	e->pid = pid_tgid >> 32;
	e->uid = (__u32) bpf_get_current_uid_gid();
	current_creds(&e->creds);
	current_ids(&e->ids);
	e->flags = (int) ctx->args[2];

	pending_put(&open_args, &pid_tgid, e, PERFRELAY_PRODUCER_OPEN);
	return 0;
}

SEC("tp/syscalls/sys_exit_openat")
int handle_open_exit(struct trace_event_raw_sys_exit *ctx) {
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct perfrelay_open *e;

	e = bpf_map_lookup_elem(&open_args, &pid_tgid);
	/* No daemon: counted once per syscall, the entry (if any) removed. */
	if (perfrelay_idle(PERFRELAY_PRODUCER_OPEN)) {
		if (e)
			pending_done(&open_args, &pid_tgid);
		return 0;
	}
	if (!e)
		return 0;

	e->result = (int) ctx->ret;
	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_OPEN, PERFRELAY_PRODUCER_OPEN);
	pending_done(&open_args, &pid_tgid);
	return 0;
}

SEC("tp/syscalls/sys_enter_connect")
int handle_connect_enter(struct trace_event_raw_sys_enter *ctx) {
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	const void *uaddr = (const void *) ctx->args[1];
	__u32 addrlen = (__u32) ctx->args[2];
	const struct perfrelay_demand *d;
	struct perfrelay_connect *e;
	__u16 family = 0;
	__be16 port;

	if (perfrelay_is_idle())
		return 0;
	d = demand_get();
	if (demand_unwanted(d, PERFRELAY_TYPE_CONNECT, PERFRELAY_PRODUCER_CONNECT)) {
		pending_clear_stale(&connect_args, &pid_tgid, PERFRELAY_PRODUCER_CONNECT);
		return 0;
	}
	e = scratch_get(SCRATCH_CONNECT, struct perfrelay_connect);
	if (!e)
		return 0;

	bpf_get_current_comm(e->comm, sizeof(e->comm));
	if (demand_task_excluded(d, e->comm)) {
		pending_filtered(&connect_args, &pid_tgid, PERFRELAY_PRODUCER_CONNECT);
		return 0;
	}
	if (demand_throttled(d)) {
		pending_filtered(&connect_args, &pid_tgid, PERFRELAY_PRODUCER_CONNECT);
		return 0;
	}
	e->pid = pid_tgid >> 32;
	e->uid = (__u32) bpf_get_current_uid_gid();
	current_creds(&e->creds);
	current_ids(&e->ids);

	/* A short or unreadable sockaddr still yields a record (family 0 or family only): the
	 * result at exit (-EINVAL, -EFAULT) tells the rest. The length checks keep us from
	 * reading past what the caller handed to the kernel. */
	if (addrlen >= sizeof(family) && bpf_probe_read_user(&family, sizeof(family), uaddr) == 0) {
		e->family = family;
		if (family == AF_INET && addrlen >= sizeof(struct sockaddr_in)) {
			if (bpf_probe_read_user(
				    &port, sizeof(port), uaddr + offsetof(struct sockaddr_in, sin_port)) == 0)
				e->port = bpf_ntohs(port);
			bpf_probe_read_user(e->addr, 4, uaddr + offsetof(struct sockaddr_in, sin_addr));
		} else if (family == AF_INET6 && addrlen >= offsetof(struct sockaddr_in6, sin6_scope_id)) {
			/* The kernel accepts the 24-byte RFC 2133 sockaddr_in6 without
			 * sin6_scope_id, so that is the minimum length to read. */
			if (bpf_probe_read_user(
				    &port, sizeof(port), uaddr + offsetof(struct sockaddr_in6, sin6_port)) == 0)
				e->port = bpf_ntohs(port);
			bpf_probe_read_user(e->addr, 16, uaddr + offsetof(struct sockaddr_in6, sin6_addr));
		}
	}

	pending_put(&connect_args, &pid_tgid, e, PERFRELAY_PRODUCER_CONNECT);
	return 0;
}

SEC("tp/syscalls/sys_exit_connect")
int handle_connect_exit(struct trace_event_raw_sys_exit *ctx) {
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct perfrelay_connect *e;

	e = bpf_map_lookup_elem(&connect_args, &pid_tgid);
	/* No daemon: counted once per syscall, the entry (if any) removed. */
	if (perfrelay_idle(PERFRELAY_PRODUCER_CONNECT)) {
		if (e)
			pending_done(&connect_args, &pid_tgid);
		return 0;
	}
	if (!e)
		return 0;

	e->result = (int) ctx->ret;
	perfrelay_emit(ctx, e, sizeof(*e), PERFRELAY_TYPE_CONNECT, PERFRELAY_PRODUCER_CONNECT);
	pending_done(&connect_args, &pid_tgid);
	return 0;
}

/* A thread that exits with a syscall still pending never reaches that syscall's exit
 * tracepoint (it can only happen when the exit program was detached or not yet attached while
 * the syscall ran): drop the entry, so it cannot fill the map, and count its record as lost.
 * One program per probe, attached with it, so that Probes= without "exit" still cleans up. */
SEC("tp/sched/sched_process_exit")
int handle_open_reap(void *ctx) {
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (bpf_map_delete_elem(&open_args, &pid_tgid) == 0)
		count_lost_attempt(PERFRELAY_PRODUCER_OPEN);
	return 0;
}

SEC("tp/sched/sched_process_exit")
int handle_connect_reap(void *ctx) {
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (bpf_map_delete_elem(&connect_args, &pid_tgid) == 0)
		count_lost_attempt(PERFRELAY_PRODUCER_CONNECT);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
