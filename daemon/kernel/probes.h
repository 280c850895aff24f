/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The built-in probes: the libbpf skeleton (open -> check pins -> load), the pinned maps it
 * shares with third-party producers, and one pinned BPF link per program so probes stay
 * attached while the daemon restarts. Main thread only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "event.h"
#include "macro.h"

/* The built-in probes, as bits of Config.probes and Probes=; their names in probes-names.c
 * (pure, for the configuration parser too). */
enum {
	PROBE_EXEC = 0,
	PROBE_EXIT,
	PROBE_FORK,
	PROBE_OPEN,
	PROBE_CONNECT,
	_PROBE_MAX,
};
#define PROBES_ALL ((1u << _PROBE_MAX) - 1)
const char *probe_to_string(unsigned probe); /* "exec", ... or NULL */
int probe_from_string(const char *s);        /* PROBE_* or -EINVAL */
uint16_t probe_type(unsigned probe);         /* the PERFRELAY_TYPE_* of its records, or 0 */
/* The record types (bit t: type t) of the probes in `probes` (bits PROBE_*). */
uint64_t probes_type_mask(uint32_t probes);

typedef struct Probes Probes;

/* Sizes of the probes' private maps. */
typedef struct ProbesLimits {
	uint32_t pending_syscalls;       /* open_args, connect_args (PendingSyscalls=) */
	uint32_t counters_max_processes; /* counters_procs (CountersMaxProcesses=) */
	uint32_t counters_max_cgroups;   /* counters_cgroups (CountersMaxCgroups=) */
	bool compat;                     /* load the objects' compat build (kernel-features.h) */
} ProbesLimits;

/* Locks the pin root (pins_lock(): -EWOULDBLOCK if another daemon serves it, held until
 * probes_free()), opens and loads the probes object with its maps pinned under pin_path (reusing
 * compatible pins; the private maps sized from `limits`; each counter array at
 * perf-counters/<name>), and unpins links under links/ that this build has no program for.
 * Attaches nothing yet. */
int probes_new(const char *pin_path, bool replace_incompatible, const ProbesLimits *limits, Probes **ret);
/* Closes everything without unpinning: pinned links keep the probes attached. */
Probes *probes_free(Probes *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(Probes *, probes_free);

int probes_events_fd(const Probes *p);
/* The protected lane's array ("critical"): exec, fork and exit records, one ring per CPU. */
int probes_critical_fd(const Probes *p);
int probes_counters_fd(const Probes *p);
/* "received": mmapable, PERFRELAY_MAX_PRODUCERS * possible CPUs struct perfrelay_received. */
int probes_received_fd(const Probes *p);
/* "idle": one __u32, 1 while no daemon serves (see bpf/producer.bpf.h). */
int probes_idle_fd(const Probes *p);
/* The flight recorder's pinned maps (docs/recorder.md). */
int probes_recorder_fd(const Probes *p);
int probes_recorder_on_fd(const Probes *p);
int probes_recorder_stats_fd(const Probes *p);
/* Whether the "counters" or "received" pin was made by this start (none existed before). */
bool probes_counters_created(const Probes *p);
bool probes_received_created(const Probes *p);
unsigned probes_possible_cpus(const Probes *p);
/* Exit events dropped because counters were turned off while their processes were still in
 * their teardown (probes_set_counters()). */
uint64_t probes_exit_records_dropped(const Probes *p);

/* Whether probes_set_enabled() pins the links it creates (default: yes). Without pins (kernels before
 * 5.15 for tracepoint/ programs) the probes detach when the daemon exits. */
void probes_set_pin_links(Probes *p, bool pin);
/* Attaches a probe (reusing its pinned links when they run a program identical to the loaded
 * one with the same maps, else attaching and pinning anew), or detaches it and removes its pins,
 * those an earlier daemon left included. */
int probes_set_enabled(Probes *p, unsigned probe, bool enabled);
bool probes_is_enabled(const Probes *p, unsigned probe);
/* 1 if the probe's links were found pinned at start and reused. */
bool probes_was_reused(const Probes *p, unsigned probe);

/* Perf counters (docs/counters.md). Sets the counters the programs read (bits
 * PERFRELAY_COUNTER_*) and attaches the counters programs (reusing pinned links), or with 0
 * detaches them and empties the process table. The caller fills the counter arrays. */
int probes_set_counters(Probes *p, uint32_t mask);
/* Charges the running task on `cpu` every period_ns (a cpu-clock sampling event running the
 * counters tick), so that a task that keeps its CPU is not charged only when it stops. */
int probes_counters_tick(Probes *p, unsigned cpu, uint64_t period_ns);
int probes_counter_array_fd(const Probes *p, unsigned id); /* PERFRELAY_COUNTER_* */
int probes_counters_cgroups_fd(const Probes *p);  /* per-CPU perfrelay_counter_values by cgroup id */
int probes_counters_user_ids_fd(const Probes *p); /* the ids of cgroups users made (u64 -> u8) */
int probes_counters_users_fd(const Probes *p);    /* u64 by PERFRELAY_COUNTERS_USERS_*: users' share */
int probes_counters_stats_fd(const Probes *p);    /* per-CPU perfrelay_counters_stats */

/* Kernel-side demand (docs/pipeline.md, "Demand"), in the pinned "demand" map the probes read
 * first. set_unwanted: the types (bit t: type t) no consumer wants now, which their probes count
 * as filtered. set_exclusions: [Probes] ExcludeComms= and ExcludePaths=. */
void probes_set_unwanted(Probes *p, uint64_t types);
uint64_t probes_unwanted(const Probes *p);
/* [Probes] ExcludeComms= and ExcludePaths= (docs/config.md), as the configuration holds them:
 * inline and bounded by what the map holds, so that a value copies and compares as bytes. */
typedef struct CommList {
	uint32_t n;
	char comms[PERFRELAY_DEMAND_COMMS][PERFRELAY_COMM_LEN]; /* zero-padded */
} CommList;

typedef struct PathPatternList {
	uint32_t n;
	struct perfrelay_demand_path paths[PERFRELAY_DEMAND_PATHS];
} PathPatternList;

/* [Probes] ExcludeUnits=: unit names (unitname.h: attributable, NUL-terminated). */
#define PROBES_UNIT_NAME_MAX 256u
typedef struct UnitList {
	uint32_t n;
	char units[PERFRELAY_DEMAND_UNITS][PROBES_UNIT_NAME_MAX];
} UnitList;
/* The cgroup ids of ExcludeUnits=' units now (at most PERFRELAY_DEMAND_UNIT_IDS) into the
 * demand map; returns whether they changed. */
bool probes_set_excluded_cgroups(Probes *p, const uint64_t *ids, size_t n);

void probes_set_exclusions(Probes *p, const CommList *comms, const PathPatternList *paths);
/* MaxEventsPerUnitPerSec= into the demand map (0: off). */
void probes_set_unit_rate(Probes *p, uint64_t per_second);
/* The throttle's buckets (docs/pipeline.md, "Throttle"): per cgroup id the records it refused.
 * Into *ret (malloc'ed, *ret_n of them, at most PERFRELAY_THROTTLE_MAX). */
typedef struct UnitThrottled {
	uint64_t cgroup_id; /* 0: the bucket cgroups share when the map is full */
	uint64_t throttled;
} UnitThrottled;
int probes_read_throttled(const Probes *p, UnitThrottled **ret, size_t *ret_n);
int probes_forget_throttle(const Probes *p, uint64_t cgroup_id);
/* Records of `producer` that its probe did not make because of the demand map (lifetime, the
 * pinned per-CPU "filtered"). */
int probes_read_filtered(const Probes *p, uint32_t producer, uint64_t *ret);

/* Who emits and who loses (docs/pipeline.md, "Attribution"): one (cgroup, producer) entry of the
 * pinned "unit_counts", summed over the CPUs. */
typedef struct UnitCount {
	uint64_t cgroup_id;
	uint32_t producer;
	uint64_t attempts;
	uint64_t failures;
} UnitCount;
/* Every entry of "unit_counts" (at most PERFRELAY_UNIT_COUNTS_MAX) into *ret (malloc'ed, *ret_n
 * of them), and in *ret_full what found no room in it ("unit_counts_full"). */
int probes_read_unit_counts(const Probes *p, UnitCount **ret, size_t *ret_n, struct perfrelay_counters *ret_full);
/* Removes the entry of (cgroup, producer): for a cgroup that is gone, whose tasks emit no more. */
int probes_forget_unit_count(const Probes *p, uint64_t cgroup_id, uint32_t producer);

/* What a probe's programs cost: invocations and their run time, counted by the kernel while
 * BPF_ENABLE_STATS is on (probes_enable_run_stats(), held until probes_free(); Linux 5.8,
 * CAP_SYS_ADMIN: it turns the counting on for every BPF program of the host). Figures of what
 * ran while this daemon held the probe attached. */
typedef struct ProbeRunStats {
	uint64_t run_ns;
	uint64_t runs;
} ProbeRunStats;
int probes_enable_run_stats(Probes *p);
bool probes_run_stats_enabled(const Probes *p);
int probes_read_run_stats(const Probes *p, unsigned probe, ProbeRunStats *ret);

/* The producer id (PERFRELAY_PRODUCER_*) in the records of a built-in probe, or 0. */
uint32_t probe_producer(unsigned probe);
/* The probe (PROBE_*) whose records carry producer id `producer`, or -ENOENT. */
int probe_of_producer(uint32_t producer);

/* Sums the counters of every producer id: *ret_sum over all CPUs, and per_cpu[cpu] (possible
 * CPUs entries; may be NULL) over producers. Reads the whole pinned array at once. */
int probes_read_all_counters(
	const Probes *p, struct perfrelay_counters *ret_sum, struct perfrelay_counters *per_cpu);

/* Every producer's counters summed over the CPUs, into per_producer[id]
 * (PERFRELAY_MAX_PRODUCERS entries). */
int probes_read_every_producer(const Probes *p, struct perfrelay_counters *per_producer);

/* Sums a producer's per-CPU counters; per_cpu (possible CPUs entries) may be NULL. */
int probes_read_counters(
	const Probes *p,
	uint32_t producer,
	struct perfrelay_counters *ret_sum,
	struct perfrelay_counters *per_cpu);
