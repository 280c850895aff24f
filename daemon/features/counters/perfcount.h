/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Perf counters for the counters programs (docs/counters.md): the per-CPU counting events the
 * daemon puts in the pinned counter arrays, and the per-cgroup totals it reads back. Main
 * thread I/O; the counters' names are in counter-names.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel/counter-names.h"
#include "kernel/cpuset.h"
#include "event.h"
#include "macro.h"

/* The counting events of one start: opened on every online CPU and put in the counter arrays
 * (array_fd by PERFRELAY_COUNTER_*), which hold them (PRESERVE_ELEMS) while no daemon runs. A
 * counter the machine lacks (no PMU, or the event unsupported) is left out of the mask, and
 * reported once. Returns the mask of counters in place. */
typedef struct PerfCountReport {
	uint32_t missing;   /* wanted counters the machine cannot count */
	uint32_t cpus;      /* CPUs with events */
	uint32_t cpu_fails; /* CPUs where an event of a present counter failed to open */
} PerfCountReport;
int perfcount_open(
	const int array_fd[PERFRELAY_COUNTERS_MAX],
	const CpuSet *online,
	uint32_t want,
	PerfCountReport *ret_report);
/* One CPU (hotplug): opens the events of `mask` on cpu and puts them in the arrays. */
int perfcount_open_cpu(const int array_fd[PERFRELAY_COUNTERS_MAX], uint32_t mask, unsigned cpu);

/* One cgroup's totals, summed over CPUs. */
typedef struct CgroupCounters {
	uint64_t cgroup_id;
	uint32_t mask, scaled;
	uint64_t value[PERFRELAY_COUNTERS_MAX];
} CgroupCounters;

/* Orders CgroupCounters by cgroup id (qsort, bsearch). */
int perfcount_cmp_cgroup(const void *a, const void *b);

/* A cgroup's totals with its unit ("" for none), for GetUnitCounters(). */
typedef struct UnitCounters {
	char unit[256];
	uid_t owner; /* the user whose slice or manager it is in; (uid_t) -1: the system's */
	CgroupCounters counters;
} UnitCounters;

/* Reads the per-CPU cgroup table (at most `max` entries) into *ret (malloc'd, sorted by
 * cgroup id), *ret_n entries. */
int perfcount_read_cgroups(int map_fd, unsigned n_possible_cpus, size_t max, CgroupCounters **ret, size_t *ret_n);

/* Takes a removed cgroup out of the table. */
int perfcount_remove_cgroup(int map_fd, uint64_t id);

/* Sums the per-CPU counters_stats array. */
int perfcount_read_stats(int map_fd, unsigned n_possible_cpus, struct perfrelay_counters_stats *ret);
