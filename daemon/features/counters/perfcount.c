/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Perf counters: the per-CPU counting events in the pinned counter arrays, and the per-cgroup
 * totals the counters program keeps. Main thread only. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "kernel/percpu.h"
#include "features/counters/perfcount.h"

static void counter_attr(unsigned id, struct perf_event_attr *attr) {
	static const struct {
		uint32_t type;
		uint64_t config;
	} events[PERFRELAY_COUNTERS_MAX] = {
		[PERFRELAY_COUNTER_TASK_CLOCK] = { PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK },
		[PERFRELAY_COUNTER_CONTEXT_SWITCHES] = { PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES },
		[PERFRELAY_COUNTER_PAGE_FAULTS] = { PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS },
		[PERFRELAY_COUNTER_CPU_MIGRATIONS] = { PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS },
		[PERFRELAY_COUNTER_CYCLES] = { PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES },
		[PERFRELAY_COUNTER_INSTRUCTIONS] = { PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS },
		[PERFRELAY_COUNTER_CACHE_MISSES] = { PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES },
		[PERFRELAY_COUNTER_BRANCH_MISSES] = { PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES },
	};

	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = events[id].type;
	attr->config = events[id].config;
	/* Counting, CPU-wide, enabled now: the program reads it at each switch on that CPU. */
	attr->read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
}

/* Opens the event and puts it in slot `cpu`; the array holds the event, our fd goes. */
static int open_one(int array_fd, unsigned id, unsigned cpu) {
	struct perf_event_attr attr;
	uint32_t key = cpu;
	int fd, r = 0;

	counter_attr(id, &attr);
	fd = (int) syscall(SYS_perf_event_open, &attr, -1, (int) cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (bpf_map_update_elem(array_fd, &key, &fd, BPF_ANY) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* The machine has no such event: no PMU, or the PMU lacks it. */
static bool is_missing(int r) {
	return r == -ENOENT || r == -EOPNOTSUPP || r == -ENODEV || r == -EINVAL;
}

int perfcount_open(
	const int array_fd[PERFRELAY_COUNTERS_MAX],
	const CpuSet *online,
	uint32_t want,
	PerfCountReport *ret_report) {
	PerfCountReport rep = {};
	uint32_t mask = 0;

	for (unsigned id = 0; id < PERFRELAY_COUNTERS_MAX; id++) {
		bool first = true;

		if (!(want & (1u << id)))
			continue;
		FOREACH_CPU(cpu, online) {
			int r = open_one(array_fd[id], id, (unsigned) cpu);

			if (r < 0 && first && is_missing(r)) {
				rep.missing |= 1u << id;
				break;
			}
			if (r < 0 && first)
				return r;
			if (r < 0)
				rep.cpu_fails++;
			first = false;
		}
		if (!(rep.missing & (1u << id)))
			mask |= 1u << id;
	}
	rep.cpus = cpuset_count(online);
	if (ret_report)
		*ret_report = rep;
	return (int) mask;
}

int perfcount_open_cpu(const int array_fd[PERFRELAY_COUNTERS_MAX], uint32_t mask, unsigned cpu) {
	int r = 0;

	for (unsigned id = 0; id < PERFRELAY_COUNTERS_MAX; id++)
		if (mask & (1u << id)) {
			int k = open_one(array_fd[id], id, cpu);

			if (k < 0 && r == 0)
				r = k;
		}
	return r;
}

int perfcount_cmp_cgroup(const void *a, const void *b) {
	uint64_t x = ((const CgroupCounters *) a)->cgroup_id, y = ((const CgroupCounters *) b)->cgroup_id;

	return x < y ? -1 : x > y;
}

int perfcount_read_cgroups(int map_fd, unsigned n_possible_cpus, size_t max, CgroupCounters **ret, size_t *ret_n) {
	_cleanup_free_ struct perfrelay_counter_values *v = NULL;
	_cleanup_free_ CgroupCounters *out = NULL;
	uint64_t key, next;
	size_t n = 0;
	bool first = true;

	v = calloc(n_possible_cpus, sizeof(*v));
	out = calloc(max ?: 1, sizeof(*out));
	if (!v || !out)
		return -ENOMEM;
	while (n < max && bpf_map_get_next_key(map_fd, first ? NULL : &key, &next) == 0) {
		CgroupCounters *c = &out[n];

		first = false;
		key = next;
		if (bpf_map_lookup_elem(map_fd, &key, v) < 0) {
			if (errno == ENOENT)
				continue; /* removed between the two calls */
			return -errno;
		}
		memset(c, 0, sizeof(*c));
		c->cgroup_id = key;
		for (unsigned cpu = 0; cpu < n_possible_cpus; cpu++) {
			c->mask |= v[cpu].mask;
			c->scaled |= v[cpu].scaled;
			for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
				c->value[i] += v[cpu].value[i];
		}
		n++;
	}
	qsort(out, n, sizeof(*out), perfcount_cmp_cgroup);
	*ret = TAKE_PTR(out);
	*ret_n = n;
	return 0;
}

int perfcount_remove_cgroup(int map_fd, uint64_t id) {
	return bpf_map_delete_elem(map_fd, &id) < 0 ? -errno : 0;
}

int perfcount_read_stats(int map_fd, unsigned n_possible_cpus, struct perfrelay_counters_stats *ret) {
	return PERCPU_SUM(map_fd, 0, n_possible_cpus, ret);
}
