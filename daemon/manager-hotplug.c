/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU hotplug in the manager: a CPU going offline or coming back, from uevents or the health
 * tick. */
#include <bpf/bpf.h>

#include "perfrelay-config.h"

#include "grace.h"
#include "log.h"
#include "manager-internal.h"
#include "stats.h"
#include "time-util.h"
#include "pins.h"
#include "topology.h"

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
	uint32_t key = cpu;
	int r;

	if (bpf_map_delete_elem(probes_events_fd(m->probes), &key) < 0 && errno != ENOENT) {
		log_warning_errno(-errno, "CPU %u %s; failed to empty its slot: %m", cpu, what);
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

static void manager_cpu_offline(Manager *m, unsigned cpu) {
	Reader *rd = manager_reader_of(m, cpu);

	if (!rd || !cpuset_contains(&m->cpus, cpu) || cpuset_contains(&m->cpus_parked, cpu))
		return;
	(void) manager_cpu_retire(m, rd, cpu, false, "went offline");
	log_info("CPU %u went offline: its ring is drained and its slot empty", cpu);
}

static void manager_cpu_online(Manager *m, unsigned cpu) {
	RingOptions ro = manager_ring_options(m);
	uint32_t key = cpu;
	Reader *rd = manager_reader_of(m, cpu);
	Ring *ring;
	int r, fd;

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
	/* The recorder's ring first: every record the live ring takes from now on is recorded
	 * too (before, those emitted between the two found no recorder ring). */
	r = recorder_cpu_online(m->recorder, cpu);
	if (r < 0)
		log_warning_errno(
			r,
			"CPU %u came online; failed to give it a flight recorder ring: %m (its records are not kept)",
			cpu);
	r = ring_open(cpu, &ro, &ring);
	if (r < 0) {
		log_warning_errno(r, "CPU %u came online; failed to open its new ring (retrying): %m", cpu);
		cpuset_add(&m->cpus_parked, cpu);
		return;
	}
	fd = ring_fd(ring);
	if (bpf_map_update_elem(probes_events_fd(m->probes), &key, &fd, BPF_ANY) < 0) {
		log_warning_errno(-errno, "CPU %u came online; failed to store its ring (retrying): %m", cpu);
		ring_free(ring);
		cpuset_add(&m->cpus_parked, cpu);
		return;
	}
	r = reader_replace_ring(rd, cpu, ring); /* consumes ring */
	if (r < 0) {
		/* The slot holds a ring nobody will read: empty it, emits fail and are counted. */
		(void) bpf_map_delete_elem(probes_events_fd(m->probes), &key);
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
	/* Its counting events went with it (a perf event on an offline CPU stays off). */
	manager_counters_cpu_online(m, cpu);
	manager_producers_cpu_online(m, cpu);
}

static void on_cpu_hotplug(void *userdata, unsigned cpu, bool online) {
	if (online)
		manager_cpu_online(userdata, cpu);
	else
		manager_cpu_offline(userdata, cpu);
}

void manager_hotplug_tick(Manager *m) {
	CpuSet online;

	if (m->state != MANAGER_RUNNING)
		return;
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

void manager_hotplug_setup(Manager *m) {
	int r = hotplug_watch_new(m->event, on_cpu_hotplug, m, &m->hotplug);

	if (r < 0)
		log_warning_errno(
			r,
			"Cannot watch CPU hotplug uevents (%m): a CPU taken offline and back "
			"within a second may stay without a ring");
}
