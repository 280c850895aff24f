/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Kernel-side demand for the built-in probes (docs/pipeline.md, "Demand"): what perfrelayd's
 * consumers want, read before a record is built, and the records skipped for it, counted.
 * Included by probes.bpf.c after producer.bpf.h. */
#ifndef PERFRELAY_DEMAND_BPF_H
#define PERFRELAY_DEMAND_BPF_H

#include "event.h"

/* Mmapable: the daemon flips a type's bit with one store, no syscall. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perfrelay_demand);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} demand SEC(".maps");

/* Per producer id: records a probe did not make because nobody wanted them. Per-CPU and atomic
 * like "counters" (a tracepoint program can be preempted by another on its CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PERFRELAY_MAX_PRODUCERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} filtered SEC(".maps");

/* MaxEventsPerUnitPerSec=: a token bucket per cgroup (event.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PERFRELAY_THROTTLE_MAX);
	__type(key, __u64);
	__type(value, struct perfrelay_throttle);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} throttle SEC(".maps");

static __always_inline const struct perfrelay_demand *demand_get(void) {
	__u32 zero = 0;

	return bpf_map_lookup_elem(&demand, &zero);
}

/* Counts one record of `producer` that its probe skipped. */
static __always_inline void count_filtered(__u32 producer) {
	__u64 *n = bpf_map_lookup_elem(&filtered, &producer);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* True (and counted as filtered) if no consumer wants records of `type` now. One plain 64-bit
 * load: the daemon sets a bit before it detaches a probe nobody wants and clears it before the
 * subscription that wants the type is acknowledged, so a stale read can only cost a record
 * nobody waits for yet (counted as filtered) or count one the last consumer just left. */
static __always_inline int demand_unwanted(const struct perfrelay_demand *d, __u16 type, __u32 producer) {
	if (!d || type >= 64 || !(d->unwanted & (1ULL << type)))
		return 0;
	count_filtered(producer);
	return 1;
}

/* What a probe checks first: no daemon (the attempt and its failure counted), or nobody wants
 * its records (counted as filtered). */
static __always_inline int probe_skip(__u16 type, __u32 producer) {
	return perfrelay_idle(producer) || demand_unwanted(demand_get(), type, producer);
}

/* True (and counted as throttled for the cgroup; the caller counts it as filtered) when the
 * current task's cgroup spent its MaxEventsPerUnitPerSec= budget. The bucket is shared by the
 * CPUs and updated without a lock (tracing programs cannot take a bpf_spin_lock): racing CPUs may
 * let a record more or fewer through, never count one twice or not at all (each record is either
 * throttled, counted here, or goes on to be an attempt). Exec, fork and exit never ask. */
static __always_inline int demand_throttled(const struct perfrelay_demand *d) {
	__u64 rate = d ? d->unit_rate : 0, id, now, tokens, full;
	struct perfrelay_throttle *t, fresh = {};

	if (rate == 0)
		return 0;
	id = bpf_get_current_cgroup_id();
	now = bpf_ktime_get_ns();
	full = rate * 1000000000ull;
	t = bpf_map_lookup_elem(&throttle, &id);
	if (!t) {
		fresh.last_ns = now;
		fresh.tokens = full;
		if (bpf_map_update_elem(&throttle, &id, &fresh, BPF_NOEXIST) < 0) {
			id = 0; /* no room: the shared bucket */
			bpf_map_update_elem(&throttle, &id, &fresh, BPF_NOEXIST);
		}
		t = bpf_map_lookup_elem(&throttle, &id);
		if (!t)
			return 0;
	}
	tokens = t->tokens;
	if (now > t->last_ns) {
		__u64 elapsed = now - t->last_ns;

		/* At most a second's worth: the bucket is full by then (and rate * elapsed stays
		 * far from overflowing: MaxEventsPerUnitPerSec= is at most 10^7). */
		if (elapsed > 1000000000ull)
			elapsed = 1000000000ull;
		tokens += elapsed * rate;
		if (tokens > full)
			tokens = full;
		t->last_ns = now;
	}
	if (tokens >= 1000000000ull) {
		t->tokens = tokens - 1000000000ull;
		return 0;
	}
	t->tokens = tokens;
	__sync_fetch_and_add(&t->throttled, 1);
	return 1;
}

#ifndef PERFRELAY_NO_ANCESTOR_CGROUP
/* The current task's cgroup is an ExcludeUnits= unit's directory or below it: one of its
 * ancestors (itself included), down to PERFRELAY_DEMAND_UNIT_LEVELS, is one of the ids. */
static __always_inline int demand_unit_excluded(const struct perfrelay_demand *d) {
	__u32 n = d->n_unit_ids;

	for (__u32 level = 1; level <= PERFRELAY_DEMAND_UNIT_LEVELS; level++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id((int) level);

		if (id == 0)
			break; /* deeper than the task's cgroup */
		for (__u32 i = 0; i < PERFRELAY_DEMAND_UNIT_IDS; i++) {
			if (i >= n)
				break;
			if (d->unit_ids[i] == id)
				return 1;
		}
	}
	return 0;
}
#else
/* The compat build (bpf/meson.build): kernels before 5.12 have no ancestor helper in tracing
 * programs, so only the task's own cgroup is compared, not the cgroups above it. */
static __always_inline int demand_unit_excluded(const struct perfrelay_demand *d) {
	__u64 id = bpf_get_current_cgroup_id();

	for (__u32 i = 0; i < PERFRELAY_DEMAND_UNIT_IDS; i++) {
		if (i >= d->n_unit_ids)
			break;
		if (d->unit_ids[i] == id)
			return 1;
	}
	return 0;
}
#endif

/* comm (16 bytes, zero-padded as bpf_get_current_comm() writes it) is one ExcludeComms= has. */
static __always_inline int demand_comm_excluded(const struct perfrelay_demand *d, const char *comm) {
	__u64 lo = ((const __u64 *) comm)[0], hi = ((const __u64 *) comm)[1];

	for (__u32 i = 0; i < PERFRELAY_DEMAND_COMMS; i++) {
		const __u64 *c;

		if (i >= d->n_comms)
			break;
		c = (const __u64 *) d->comms[i];
		if (c[0] == lo && c[1] == hi)
			return 1;
	}
	return 0;
}

/* The current task is one ExcludeComms= (by comm) or ExcludeUnits= (by its cgroup) names. */
static __always_inline int demand_task_excluded(const struct perfrelay_demand *d, const char *comm) {
	return d &&
		((d->n_comms && demand_comm_excluded(d, comm)) || (d->n_unit_ids && demand_unit_excluded(d)));
}

/* path (NUL-terminated, PERFRELAY_PATH_LEN bytes) matches an ExcludePaths= entry: equal to it,
 * or for a prefix entry, starting with it. */
static __always_inline int demand_path_excluded(const struct perfrelay_demand *d, const char *path) {
	for (__u32 i = 0; i < PERFRELAY_DEMAND_PATHS; i++) {
		const struct perfrelay_demand_path *p;
		__u32 len, k;

		if (i >= d->n_paths)
			break;
		p = &d->paths[i];
		len = p->len;
		if (len == 0 || len >= PERFRELAY_DEMAND_PATH_LEN)
			continue;
		for (k = 0; k < PERFRELAY_DEMAND_PATH_LEN - 1; k++)
			if (k >= len || path[k] != p->path[k])
				break;
		if (k == len && (p->prefix || path[k & (PERFRELAY_DEMAND_PATH_LEN - 1)] == 0))
			return 1;
	}
	return 0;
}

#endif
