/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Perf counters charged to processes and cgroups at context switch (docs/counters.md): part of
 * the probes object, included by probes.bpf.c after producer.bpf.h and lane.bpf.h. The daemon opens one
 * counting perf event per CPU and configured counter and puts it in that counter's array; the
 * programs here read them with bpf_perf_event_read_value() and charge each slice to the task
 * that ran it. */
#ifndef PERFRELAY_COUNTERS_BPF_H
#define PERFRELAY_COUNTERS_BPF_H

#include "counters-scale.h"

/* A task flag (<linux/sched.h>): a #define, which vmlinux.h cannot carry. */
#define PERFRELAY_PF_EXITING 0x00000004

/* One array per counter, one slot per possible CPU: the loader sets max_entries and pins each
 * at <PinPath>/perf-counters/<name>. PRESERVE_ELEMS keeps the events counting while no daemon
 * runs. */
#define PERFRELAY_COUNTER_ARRAY(name)                              \
	struct {                                                   \
		__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);       \
		__uint(key_size, sizeof(__u32));                   \
		__uint(value_size, sizeof(__u32));                 \
		__uint(map_flags, PERFRELAY_BPF_F_PRESERVE_ELEMS); \
	} name SEC(".maps")

PERFRELAY_COUNTER_ARRAY(counter_task_clock);
PERFRELAY_COUNTER_ARRAY(counter_context_switches);
PERFRELAY_COUNTER_ARRAY(counter_page_faults);
PERFRELAY_COUNTER_ARRAY(counter_cpu_migrations);
PERFRELAY_COUNTER_ARRAY(counter_cycles);
PERFRELAY_COUNTER_ARRAY(counter_instructions);
PERFRELAY_COUNTER_ARRAY(counter_cache_misses);
PERFRELAY_COUNTER_ARRAY(counter_branch_misses);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perfrelay_counters_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perfrelay_counters_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_stats SEC(".maps");

/* Per CPU: each counter's reading at the last charge, the start of the running slice; and
 * whether a charge is under way on this CPU. The tick (below) runs in interrupt context and may
 * interrupt the exit program's charge, which would then read and write the readings half done:
 * it sees `busy` and leaves the slice to the next charge. (sched_switch runs with interrupts
 * off, and the exit program cannot interrupt anything.) */
struct counters_last {
	struct perfrelay_counter_reading r[PERFRELAY_COUNTERS_MAX];
	__u64 busy;
	/* Whose the open slice is: the process and cgroup switched to at the last charge. */
	__u64 owner_cgroup;
	__u32 owner_tgid;
	__u32 _pad;
	struct perfrelay_counter_values delta; /* the charge under way's deltas (see below) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters_last);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_last SEC(".maps");

/* Per process (tgid), shared by its threads on every CPU: added to atomically. A scaled flag
 * is a count so that concurrent threads can set it with an atomic add. */
struct counters_proc {
	__u64 value[PERFRELAY_COUNTERS_MAX];
	__u32 scaled_n[PERFRELAY_COUNTERS_MAX];
};

/* A preallocated hash, not task storage: a charge happens under the runqueue lock, where task
 * storage would allocate (and an allocation may wake kswapd, which takes a runqueue lock).
 * Entries go when the process exits (handle_exit, or the reaper below); the loader sizes it
 * from CountersMaxProcesses=. Full, a charge is lost and counted. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, struct counters_proc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_procs SEC(".maps");

/* The cgroup table's share for cgroups users made (in subtrees delegated to them, so their
 * directory is the user's): [PERFRELAY_COUNTERS_USERS_HELD] the rows they hold, recounted by the
 * daemon each interval; [_MAX] the most they may hold (the daemon sets half the table; 0: no
 * share); [_REFUSED] their charges refused for it. A user who makes cgroups by the thousand
 * then leaves the other half to systemd's units. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PERFRELAY_COUNTERS_USERS_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_cgroups_users SEC(".maps");

/* Per cgroup id and CPU (no atomics needed), summed by the daemon each interval. Preallocated
 * for the same reason; sized from CountersMaxCgroups=; the daemon removes removed cgroups. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct perfrelay_counter_values);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_cgroups SEC(".maps");

static __always_inline long counter_read(__u32 i, struct bpf_perf_event_value *v) {
	switch (i) {
	case PERFRELAY_COUNTER_TASK_CLOCK:
		return bpf_perf_event_read_value(&counter_task_clock, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_CONTEXT_SWITCHES:
		return bpf_perf_event_read_value(&counter_context_switches, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_PAGE_FAULTS:
		return bpf_perf_event_read_value(&counter_page_faults, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_CPU_MIGRATIONS:
		return bpf_perf_event_read_value(&counter_cpu_migrations, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_CYCLES:
		return bpf_perf_event_read_value(&counter_cycles, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_INSTRUCTIONS:
		return bpf_perf_event_read_value(&counter_instructions, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_CACHE_MISSES:
		return bpf_perf_event_read_value(&counter_cache_misses, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case PERFRELAY_COUNTER_BRANCH_MISSES:
		return bpf_perf_event_read_value(&counter_branch_misses, BPF_F_CURRENT_CPU, v, sizeof(*v));
	}
	return -PERFRELAY_EINVAL;
}

/* How a charge treats the running task's process. */
#define COUNTERS_PROCESS_OFF    0 /* not at all */
#define COUNTERS_PROCESS_ADD    1 /* its entry, made if it has none */
#define COUNTERS_PROCESS_EXISTS 2 /* its entry if it has one: an exiting thread's */

/* The cgroups users made (in subtrees delegated to them): ids the daemon puts here from its
 * cgroup watch as they are made, and takes out as they go. Kernel-independent: an owner read
 * from kernfs internals did not hold across kernels. Sized with the cgroup table. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters_users_cgroup_ids SEC(".maps");

/* Levels above a cgroup that counters_cgroup_is_users() looks at. */
#define COUNTERS_USERS_DEPTH 16

/* Whether the running task's cgroup (cgid) is one a user made: in the set, or below one that is.
 * The daemon's cgroup watch gives each user a quota of watched directories; one made beyond it
 * is never in the set, but the subtree delegated to the user (user@UID.service, a Delegate=yes
 * unit: the first directories the user owns) is. Only when a row is made, not per charge. */
static __always_inline int counters_cgroup_is_users(__u64 cgid) {
	struct task_struct *task = (struct task_struct *) bpf_get_current_task();
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);

	if (bpf_map_lookup_elem(&counters_users_cgroup_ids, &cgid))
		return 1;
#pragma unroll
	for (int i = 0; i < COUNTERS_USERS_DEPTH; i++) {
		struct cgroup_subsys_state *parent = BPF_CORE_READ(cg, self.parent);
		__u64 id;

		if (!parent)
			return 0;
		/* The css a cgroup embeds as `self`; its parent's is its parent cgroup's. */
		cg = (struct cgroup *) ((void *) parent - bpf_core_field_offset(struct cgroup, self));
		id = BPF_CORE_READ(cg, kn, id);
		if (bpf_map_lookup_elem(&counters_users_cgroup_ids, &id))
			return 1;
	}
	return 0;
}

/* A row for a cgroup the table has none for yet, unless users' cgroups are at their share. */
static __always_inline void counters_cgroup_add(__u64 cgid, const struct perfrelay_counter_values *zero) {
	__u32 k_held = PERFRELAY_COUNTERS_USERS_HELD, k_max = PERFRELAY_COUNTERS_USERS_MAX,
	      k_refused = PERFRELAY_COUNTERS_USERS_REFUSED;
	__u64 *held = bpf_map_lookup_elem(&counters_cgroups_users, &k_held);
	__u64 *max = bpf_map_lookup_elem(&counters_cgroups_users, &k_max);
	__u64 *refused = bpf_map_lookup_elem(&counters_cgroups_users, &k_refused);
	int user = counters_cgroup_is_users(cgid);

	if (user && held && max && refused && *max != 0 && *held >= *max) {
		__sync_fetch_and_add(refused, 1);
		return;
	}
	if (bpf_map_update_elem(&counters_cgroups, &cgid, zero, BPF_NOEXIST) == 0 && user && held)
		__sync_fetch_and_add(held, 1);
}

/* Charges what the counters counted on this CPU since the last charge to the running task:
 * its process (`charge_process`, COUNTERS_PROCESS_*) and its cgroup. A thread that exits
 * (PF_EXITING) still charges its process while the process has an entry: the other threads'
 * exits, and the last one's teardown until its totals are taken (at its last switch,
 * counters_exit_flush(), or at the exit tracepoint); after that the entry is gone and is not
 * made again. Callers
 * run with preemption off (tracepoints), so the per-CPU state is theirs. `tid` 0 is the idle
 * task, whose slices belong to nobody.
 * The deltas live in the per-CPU state, not on the stack: the verifier then sees the same
 * registers after each counter whether it was configured or not, and prunes; with them on the
 * stack every combination of the eight would be a state of its own (a program too slow to
 * load on an emulated CPU). */
static __always_inline void counters_charge(__u32 tgid, __u32 tid, int charge_process) {
	struct perfrelay_counter_values zero = {}, *cg;
	struct perfrelay_counters_config *cfg;
	struct perfrelay_counters_stats *st;
	struct counters_proc *proc = NULL;
	struct counters_last *last;
	__u32 key = 0, mask;
	__u64 cgid;

	cfg = bpf_map_lookup_elem(&counters_config, &key);
	if (!cfg || cfg->mask == 0)
		return;
	last = bpf_map_lookup_elem(&counters_last, &key);
	st = bpf_map_lookup_elem(&counters_stats, &key);
	if (!last || !st || last->busy)
		return;
	last->busy = 1;
	asm volatile("" ::: "memory"); /* busy is set before the readings are touched */

	mask = cfg->mask;
	last->delta.mask = mask;
	last->delta.scaled = 0;
#pragma unroll
	for (__u32 i = 0; i < PERFRELAY_COUNTERS_MAX; i++) {
		struct bpf_perf_event_value v = {};
		struct perfrelay_counter_reading cur;
		int scaled;

		last->delta.value[i] = 0;
		if (!(mask & (1u << i)))
			continue;
		if (counter_read(i, &v) < 0) {
			st->read_errors++;
			continue;
		}
		cur.counter = v.counter;
		cur.enabled = v.enabled;
		cur.running = v.running;
		last->delta.value[i] = perfrelay_counter_delta(&last->r[i], &cur, &scaled);
		last->r[i] = cur;
		if (scaled) {
			last->delta.scaled |= 1u << i;
			st->scaled++;
		}
	}
	if (tid == 0)
		goto done;
	st->charges++;

	if (charge_process != COUNTERS_PROCESS_OFF) {
		proc = bpf_map_lookup_elem(&counters_procs, &tgid);
		if (!proc && charge_process == COUNTERS_PROCESS_ADD) {
			struct counters_proc fresh = {};

			bpf_map_update_elem(&counters_procs, &tgid, &fresh, BPF_NOEXIST);
			proc = bpf_map_lookup_elem(&counters_procs, &tgid);
		}
		if (!proc && charge_process == COUNTERS_PROCESS_ADD)
			st->process_full++;
	}
	cgid = bpf_get_current_cgroup_id();
	cg = bpf_map_lookup_elem(&counters_cgroups, &cgid);
	if (!cg) {
		counters_cgroup_add(cgid, &zero);
		cg = bpf_map_lookup_elem(&counters_cgroups, &cgid);
	}
	if (!cg)
		st->cgroup_full++;

	if (proc) {
#pragma unroll
		for (__u32 i = 0; i < PERFRELAY_COUNTERS_MAX; i++) {
			__sync_fetch_and_add(&proc->value[i], last->delta.value[i]);
			if (last->delta.scaled & (1u << i))
				perfrelay_counter_mark_scaled(&proc->scaled_n[i]);
		}
	}
	if (cg) {
#pragma unroll
		for (__u32 i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
			cg->value[i] += last->delta.value[i];
		cg->mask |= mask;
		cg->scaled |= last->delta.scaled;
	}
done:
	asm volatile("" ::: "memory");
	last->busy = 0;
}

/* At the last thread's exit: charges the running slice, then takes the process's totals out of
 * the table into *ret (map memory; mask 0 when counters are off or nothing was charged). */
static __always_inline void counters_take(__u32 tgid, __u32 tid, struct perfrelay_counter_values *ret) {
	struct perfrelay_counters_config *cfg;
	struct counters_proc *proc;
	__u32 key = 0;

	ret->mask = ret->scaled = 0;
	counters_charge(tgid, tid, COUNTERS_PROCESS_ADD);
	cfg = bpf_map_lookup_elem(&counters_config, &key);
	proc = bpf_map_lookup_elem(&counters_procs, &tgid);
	if (!cfg || !proc)
		return;
	ret->mask = cfg->mask;
#pragma unroll
	for (__u32 i = 0; i < PERFRELAY_COUNTERS_MAX; i++) {
		ret->value[i] = proc->value[i];
		if (proc->scaled_n[i])
			ret->scaled |= 1u << i;
	}
	bpf_map_delete_elem(&counters_procs, &tgid);
}

/* Exit records waiting for their process's last switch, by the last thread's tid
 * (PERFRELAY_EXIT_PROBE_DEFER). The exit tracepoint, where the exit probe runs, comes before
 * exit_mm() on newer kernels (6.18 here) and before exit_files() and the rest on every kernel:
 * a process that frees GiBs spends much of its CPU time after it. The probe builds its record
 * there and leaves it here; the first switch of the thread after exit_notify() (exit_state
 * set: the teardown is done) charges that slice, takes the totals into the record and emits it.
 * A full table: the probe emits at once, with the totals of then. */
#define EXIT_PENDING_MAX 4096
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EXIT_PENDING_MAX);
	__type(key, __u32);
	__type(value, struct perfrelay_exit);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} exit_pending SEC(".maps");

/* prev's exit record, if it waits in exit_pending: emitted with the process's totals, taken
 * now that its teardown is done. Returns 1 if there was one (its slice is charged). */
static __always_inline int counters_exit_flush(void *ctx, struct task_struct *prev) {
	__u32 tid = prev->pid;
	struct perfrelay_exit *e = bpf_map_lookup_elem(&exit_pending, &tid);

	if (!e)
		return 0;
	/* Taken even while idle: the process's entry must leave the table with it. */
	counters_take(prev->tgid, tid, &e->counters);
	if (!probe_skip(PERFRELAY_TYPE_EXIT, PERFRELAY_PRODUCER_EXIT))
		emit_critical(ctx, e, sizeof(*e), PERFRELAY_TYPE_EXIT, PERFRELAY_PRODUCER_EXIT);
	bpf_map_delete_elem(&exit_pending, &tid);
	return 1;
}

/* sched_switch fires before the switch, while prev is still current: its slice ends here,
 * unless the next task belongs to the same process and cgroup, whose slice then simply goes
 * on (as the kernel's own cgroup perf events only switch when the cgroup changes): reading the
 * counters costs far more than this test, and the charge at the next change of owner (or the
 * tick, or the exit) gives the same totals to the same process and cgroup. */
SEC("tp_btf/sched_switch")
int BPF_PROG(handle_switch, bool preempt, struct task_struct *prev, struct task_struct *next) {
	__u64 next_cgroup = next->cgroups->dfl_cgrp->kn->id; /* BTF loads, no helper calls */
	int exiting = prev->flags & PERFRELAY_PF_EXITING;
	__u32 next_tgid = next->tgid, key = 0;
	struct counters_last *last;

	last = bpf_map_lookup_elem(&counters_last, &key);
	if (!last)
		return 0;
	/* Past exit_notify(): an exit record may wait for this switch (before the config check:
	 * it is emitted even if counters were turned off since). */
	if (prev->exit_state && counters_exit_flush(ctx, prev)) {
		last->owner_tgid = next_tgid;
		last->owner_cgroup = next_cgroup;
		return 0;
	}
	if (next_tgid != 0 && prev->tgid == next_tgid && last->owner_tgid == next_tgid &&
	    last->owner_cgroup == next_cgroup)
		return 0;
	counters_charge(prev->tgid, prev->pid, exiting ? COUNTERS_PROCESS_EXISTS : COUNTERS_PROCESS_ADD);
	last->owner_tgid = next_tgid;
	last->owner_cgroup = next_cgroup;
	return 0;
}

/* A running task is charged when it switches out; one that keeps its CPU (a busy loop on an
 * otherwise idle CPU) would be charged only when it stops. A cpu-clock sampling event per CPU
 * runs this every tick period (the daemon opens them; docs/counters.md) to charge the slice so
 * far, so that the units' counters lag by one tick at most. It never writes a sample. */
SEC("perf_event")
int handle_counters_tick(void *ctx) {
	struct task_struct *task = (struct task_struct *) bpf_get_current_task();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	int exiting = BPF_CORE_READ(task, flags) & PERFRELAY_PF_EXITING;

	counters_charge(
		pid_tgid >> 32, (__u32) pid_tgid, exiting ? COUNTERS_PROCESS_EXISTS : COUNTERS_PROCESS_ADD);
	return 0;
}

/* With the exit probe off nobody takes a process's totals: drop them when its last thread
 * exits, so the table holds live processes only. (With it on, handle_exit takes them.) */
SEC("tp/sched/sched_process_exit")
int handle_counters_reap(void *ctx) {
	struct task_struct *task = (struct task_struct *) bpf_get_current_task();
	struct perfrelay_counters_config *cfg;
	struct perfrelay_counters_stats *st;
	__u32 key = 0, tgid;

	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	cfg = bpf_map_lookup_elem(&counters_config, &key);
	if (!cfg || cfg->exit_probe)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_delete_elem(&counters_procs, &tgid) == 0) {
		st = bpf_map_lookup_elem(&counters_stats, &key);
		if (st)
			st->reaped++;
	}
	return 0;
}

#endif
