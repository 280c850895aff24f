/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The CPUs the manager serves: the reader groups, the ring options, CPUs offline at start, and a
 * CPU going offline or coming back (from the hotplug feature's uevents or its look at /sys). */
#include <unistd.h>

#include <bpf/bpf.h>

#include "perfrelay-config.h"

#include "kernel/grace.h"
#include "base/log.h"
#include "core/manager-internal.h"
#include "kernel/topology.h"

/* Possible CPUs that are offline at start get a parked slot (no ring) in a reader group, so that
 * they are served when they come online (manager_cpu_online()): with CpuGroups=, in the group that
 * lists them (or, if none of that group's CPUs is online, in the group with the fewest CPUs);
 * CPUs that CpuGroups= does not list stay unserved. Without CpuGroups=, in the group with the
 * fewest CPUs: the cache topology of an offline CPU is not in sysfs. */
static void manager_park_offline_cpus(Manager *m, const CpuSet *online, CpuSet *groups, size_t n_groups) {
	const Config *c = m->config;

	for (unsigned cpu = 0; cpu < probes_possible_cpus(m->probes) && cpu < PERFRELAY_MAX_CPUS; cpu++) {
		size_t g = n_groups, fewest = 0;

		if (cpuset_contains(online, cpu))
			continue;
		if (c->n_cpu_groups > 0) {
			size_t listed = c->n_cpu_groups;

			for (size_t i = 0; i < c->n_cpu_groups && listed == c->n_cpu_groups; i++)
				if (cpuset_contains(&c->cpu_groups[i], cpu))
					listed = i;
			if (listed == c->n_cpu_groups)
				continue;
			/* The configured group survives as the one holding its online CPUs. */
			for (size_t i = 0; i < n_groups; i++)
				if (cpuset_intersects(&groups[i], &c->cpu_groups[listed]))
					g = i;
		}
		if (g == n_groups) {
			for (size_t i = 1; i < n_groups; i++)
				if (cpuset_count(&groups[i]) < cpuset_count(&groups[fewest]))
					fewest = i;
			g = fewest;
		}
		cpuset_add(&groups[g], cpu);
		cpuset_add(&m->cpus_parked, cpu);
		log_debug("CPU %u is offline: parked in reader group %zu until it comes online", cpu, g);
	}
}

/* The CPU groups the readers serve: from CpuGroups=, CpusPerReader= or the cache topology of
 * the online CPUs, plus the offline CPUs parked in them (manager_park_offline_cpus()). */
int manager_cpu_groups(Manager *m, CpuSet **ret, size_t *ret_n) {
	const Config *c = m->config;
	CpuSet online;
	int r;

	r = topology_online_cpus("/sys", &online);
	if (r < 0)
		return log_error_errno(r, "Failed to read online CPUs from /sys/devices/system/cpu/online: %m");

	if (c->n_cpu_groups > 0) {
		CpuSet *groups = calloc(c->n_cpu_groups, sizeof(CpuSet));
		size_t n = 0;

		if (!groups)
			return -ENOMEM;
		for (size_t i = 0; i < c->n_cpu_groups; i++) {
			CpuSet g = {};

			FOREACH_CPU(cpu, &c->cpu_groups[i]) {
				if (cpuset_contains(&online, cpu))
					cpuset_add(&g, cpu);
				else if ((unsigned) cpu >= probes_possible_cpus(m->probes))
					/* Not a possible CPU: it can never come online. */
					log_warning("CpuGroups=: CPU %d is not online, skipping it", cpu);
			}
			if (!cpuset_is_empty(&g))
				groups[n++] = g;
		}
		if (n == 0) {
			free(groups);
			return log_error_errno(-EINVAL, "CpuGroups=: none of the configured CPUs is online");
		}
		*ret = groups;
		*ret_n = n;
	} else {
		if (c->cpus_per_reader > 0)
			r = topology_chunk_groups(&online, c->cpus_per_reader, ret);
		else
			r = topology_llc_groups("/sys", &online, ret);
		if (r < 0)
			return log_error_errno(r, "Failed to split CPUs into reader groups: %m");
		*ret_n = r;
	}
	manager_park_offline_cpus(m, &online, *ret, *ret_n);
	return 0;
}

RingOptions manager_ring_options(const Manager *m) {
	const Config *c = m->config;
	long page = sysconf(_SC_PAGESIZE);
	RingOptions ro = {
		.pages = c->pages_per_cpu,
		.lane_pages = c->critical_pages_per_cpu,
		.watermark = c->watermark,
		.wakeup_events = c->wakeup_events,
	};

	/* Default wakeup: a quarter of the ring, so the reader is woken while three quarters are
	 * still free, but not later than after RING_WATERMARK_MAX bytes: a larger ring then buys
	 * room for bursts, not latency (the flush interval bounds the latency of anything below
	 * the watermark). */
	if (ro.watermark == 0 && ro.wakeup_events == 0)
		ro.watermark = (uint32_t) MIN(
			(uint64_t) page * c->pages_per_cpu / 4, (uint64_t) RING_WATERMARK_MAX);
	return ro;
}

/* Puts `ring` (and its protected lane) of `cpu` into the arrays' slots: the lane first, so that
 * exec, fork and exit never find the CPU's main ring served and their own not. Returns 0, or a
 * negative errno with *ret_array naming the array that refused it. */
int manager_store_ring(Manager *m, unsigned cpu, const Ring *ring, const char **ret_array) {
	uint32_t key = cpu;
	Ring *lane = ring_lane(ring);
	int fd;

	if (lane) {
		fd = ring_fd(lane);
		if (bpf_map_update_elem(probes_critical_fd(m->probes), &key, &fd, BPF_ANY) < 0) {
			*ret_array = "critical";
			return negative_errno();
		}
	}
	fd = ring_fd(ring);
	if (bpf_map_update_elem(probes_events_fd(m->probes), &key, &fd, BPF_ANY) < 0) {
		*ret_array = "events";
		return negative_errno();
	}
	return 0;
}

/* Empties the slots of `cpu` in both arrays (ENOENT, an empty slot, is no error). */
int manager_clear_cpu_slots(Manager *m, unsigned cpu) {
	uint32_t key = cpu;
	int r = 0;

	if (bpf_map_delete_elem(probes_events_fd(m->probes), &key) < 0 && errno != ENOENT)
		r = negative_errno();
	if (bpf_map_delete_elem(probes_critical_fd(m->probes), &key) < 0 && errno != ENOENT)
		r = negative_errno();
	return r;
}

/* CPU hotplug. A CPU of ours that goes offline gets its slot emptied (emits there now fail, and
 * are counted) and its ring drained by its reader; when it comes back its old perf event is
 * dead, so it gets a new ring in the same reader, and the reader's counters for that CPU carry
 * on. Kernel uevents say so at once (an offline/online pair may last milliseconds); the health
 * tick re-reads the online CPUs in case uevents were lost or are not delivered. CPUs offline at
 * start are parked in a reader group (manager_park_offline_cpus()) and take the same path when
 * they come online. Only CPUs outside every reader group (not listed in CpuGroups=) are not
 * served until a restart: their slot stays empty, so their emits fail and are counted. */

static Reader *manager_reader_of(Manager *m, unsigned cpu) {
	for (size_t i = 0; i < m->n_readers; i++)
		if (cpuset_contains(reader_cpus(m->readers[i]), cpu))
			return m->readers[i];
	return NULL;
}

/* Empties the slot of `cpu` (from then on emits there fail, counted), has its reader drain its
 * ring to empty and let it go, and parks the CPU; `what` says what happened to it, for the
 * messages. A CPU gone offline runs no emitter any more. One that still runs (`in_flight`) may
 * have emitters that took the ring from the slot before it was emptied: they are waited out
 * (one grace period, as at stop) before the drain, and if that cannot be made sure the ring
 * stays, read, and the CPU is not parked. Returns whether it was parked. */
static bool manager_cpu_retire(Manager *m, Reader *rd, unsigned cpu, bool in_flight, const char *what) {
	int r;

	r = manager_clear_cpu_slots(m, cpu);
	if (r < 0) {
		log_warning_errno(r, "CPU %u %s; failed to empty its slots: %m", cpu, what);
		if (in_flight)
			return false;
	}
	if (in_flight) {
		r = grace_period(NULL);
		if (r < 0) {
			log_warning_errno(
				r, "CPU %u %s; failed to wait out the emitters in flight: %m", cpu, what);
			return false; /* the slot stays empty: its emits fail, counted */
		}
	}
	r = reader_replace_ring(rd, cpu, NULL);
	if (r < 0) {
		log_warning_errno(r, "CPU %u %s; failed to hand its ring back: %m", cpu, what);
		if (in_flight)
			return false;
	}
	cpuset_add(&m->cpus_parked, cpu);
	return true;
}

void manager_cpu_offline(Manager *m, unsigned cpu) {
	Reader *rd = manager_reader_of(m, cpu);

	if (!rd || !cpuset_contains(&m->cpus, cpu) || cpuset_contains(&m->cpus_parked, cpu))
		return;
	(void) manager_cpu_retire(m, rd, cpu, false, "went offline");
	log_info("CPU %u went offline: its ring is drained and its slot empty", cpu);
}

void manager_cpu_online(Manager *m, unsigned cpu) {
	RingOptions ro = manager_ring_options(m);
	Reader *rd = manager_reader_of(m, cpu);
	const char *array = NULL;
	Ring *ring;
	int r;

	if (!rd || !cpuset_contains(&m->cpus, cpu)) {
		if (!cpuset_contains(&m->cpus_unserved_seen, cpu)) {
			cpuset_add(&m->cpus_unserved_seen, cpu);
			log_notice(
				"CPU %u came online; it is in no reader group (CpuGroups=) until perfrelayd restarts (its emits "
				"fail and are counted)",
				cpu);
		}
		return;
	}
	/* Even if we never saw it go: an online event means the CPU went through offline, which
	 * killed the perf event of its ring. But if we never saw it go, its ring may still be
	 * written (a lost offline uevent, or one made up by a write to its uevent file): it is
	 * retired with the quiesce of a stop before it is replaced. */
	if (!cpuset_contains(&m->cpus_parked, cpu)) {
		if (!manager_cpu_retire(m, rd, cpu, true, "came online again"))
			return;
		log_info("CPU %u came online again without going offline first: its ring is replaced", cpu);
	}
	/* Features first (the flight recorder's ring: every record the live ring takes from now on
	 * is recorded too). */
	manager_features_cpu_prepare(m, cpu);
	r = ring_open(cpu, &ro, &ring);
	if (r < 0) {
		log_warning_errno(r, "CPU %u came online; failed to open its new ring (retrying): %m", cpu);
		cpuset_add(&m->cpus_parked, cpu);
		return;
	}
	r = manager_store_ring(m, cpu, ring, &array);
	if (r < 0) {
		log_warning_errno(
			r, "CPU %u came online; failed to store its ring in %s (retrying): %m", cpu, array);
		(void) manager_clear_cpu_slots(m, cpu);
		ring_free(ring);
		cpuset_add(&m->cpus_parked, cpu);
		return;
	}
	r = reader_replace_ring(rd, cpu, ring); /* consumes ring */
	if (r < 0) {
		/* The slots hold rings nobody will read: empty them, emits fail and are counted. */
		(void) manager_clear_cpu_slots(m, cpu);
		log_warning_errno(
			r,
			"CPU %u came online; failed to hand its ring to reader %u (retrying): %m",
			cpu,
			reader_id(rd));
		cpuset_add(&m->cpus_parked, cpu);
		return;
	}
	cpuset_remove(&m->cpus_parked, cpu);
	log_info("CPU %u came online: reader %u reads its new ring", cpu, reader_id(rd));
	/* Its perf events of features went with it (a perf event on an offline CPU stays off). */
	manager_features_cpu_online(m, cpu);
}

void manager_cpus_check(Manager *m) {
	CpuSet online;

	for (size_t i = 0; i < m->n_readers; i++)
		reader_free_retired_rings(m->readers[i]);
	if (topology_online_cpus("/sys", &online) < 0)
		return;
	FOREACH_CPU(cpu, &m->cpus) {
		bool parked = cpuset_contains(&m->cpus_parked, cpu);

		if (!cpuset_contains(&online, cpu) && !parked)
			manager_cpu_offline(m, cpu);
		else if (cpuset_contains(&online, cpu) && parked)
			manager_cpu_online(m, cpu);
	}
}
