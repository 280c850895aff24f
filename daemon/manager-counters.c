/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Perf counters in the manager (docs/counters.md): the counting events and the counters
 * programs from start to stop, and every CountersIntervalMs= one "counters" event per cgroup
 * that ran, published to subscribers through the hub's main-thread slot. */
#include "perfrelay-config.h"

#include <bpf/bpf.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "manager-internal.h"
#include "perfcount.h"
#include "time-util.h"

static void counters_array_fds(Manager *m, int fds[PERFRELAY_COUNTERS_MAX]) {
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		fds[i] = probes_counter_array_fd(m->probes, i);
}

static const CgroupCounters *find_prev(Manager *m, uint64_t id) {
	CgroupCounters key = { .cgroup_id = id };

	if (m->counters_prev_n == 0)
		return NULL;
	return bsearch(&key, m->counters_prev, m->counters_prev_n, sizeof(key), perfcount_cmp_cgroup);
}

static void
	publish(Manager *m,
		const CgroupCounters *cur,
		const CgroupCounters *prev,
		uint64_t interval_ns,
		const char *unit) {
	struct perfrelay_unit_counters rec = {
		.hdr = {
			.magic = PERFRELAY_MAGIC,
			.version = PERFRELAY_VERSION,
			.type = PERFRELAY_TYPE_COUNTERS,
			.size = sizeof(rec),
			.producer = PERFRELAY_PRODUCER_COUNTERS,
			.seq = m->counters_seq++,
			.ts_ns = now_nsec(CLOCK_BOOTTIME),
		},
		.cgroup_id = cur->cgroup_id,
		.interval_ns = interval_ns,
		.counters = { .mask = cur->mask & m->counters_mask, .scaled = cur->scaled },
	};
	DecodedEvent ev;

	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		/* A total below the last one: the table was emptied under us (counters turned off
		 * and on while we were down); it counts from 0 again. */
		rec.counters.value[i] = prev && cur->value[i] >= prev->value[i] ?
			cur->value[i] - prev->value[i] :
			cur->value[i];
	decode_daemon_record(&rec, &ev);
	hub_publish(m->hub, m->counters_slot, &ev, unit);
	m->counters_events++;
}

static bool ran(const CgroupCounters *cur, const CgroupCounters *prev) {
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		if (cur->value[i] != (prev ? prev->value[i] : 0))
			return true;
	return false;
}

/* One interval: reads every cgroup's totals, publishes what each used since the last interval
 * (nothing at the first: that is the baseline), and removes cgroups that are gone from the
 * table once their last interval is out. */
static void counters_interval(Manager *m) {
	_cleanup_free_ CgroupCounters *cur = NULL;
	_cleanup_free_ UnitCounters *view = NULL;
	uint64_t users_held = 0;
	size_t n_view = 0;
	uint64_t now = now_nsec(CLOCK_MONOTONIC);
	int cg_fd = probes_counters_cgroups_fd(m->probes);
	bool baseline = m->counters_prev_at == 0;
	size_t n = 0;
	int r;

	r = perfcount_read_cgroups(
		cg_fd, probes_possible_cpus(m->probes), m->config->counters_max_cgroups, &cur, &n);
	if (r < 0) {
		log_warning_errno(r, "Failed to read the counters_cgroups table: %m");
		return;
	}
	m->counters_intervals++;
	view = calloc(n ?: 1, sizeof(*view));
	if (!view)
		log_warning("Counters: out of memory for GetUnitCounters()' view; it keeps the last one");
	if (!baseline)
		hub_reader_begin(m->hub, m->counters_slot);
	for (size_t i = 0; i < n; i++) {
		const CgroupCounters *prev = find_prev(m, cur[i].cgroup_id);
		char buf[256];
		const char *unit;
		uid_t owner;
		bool gone;

		unit = manager_cgroup_unit(m, cur[i].cgroup_id, buf, sizeof(buf), &gone, &owner);
		if (!gone && cgroup_watch_dir_owner(m->cgroup_watch, cur[i].cgroup_id) != 0)
			users_held++;
		/* The view is the table as this interval leaves it: without the cgroups gone. */
		if (view && !gone) {
			UnitCounters *v = &view[n_view++];

			snprintf(v->unit, sizeof(v->unit), "%s", unit ?: "");
			v->owner = owner;
			v->counters = cur[i];
			v->counters.mask &= m->counters_mask;
		}
		if (!baseline && ran(&cur[i], prev))
			publish(m, &cur[i], prev, now - m->counters_prev_at, unit);
		if (gone) {
			uint64_t id = cur[i].cgroup_id;

			/* Its last interval is out (or it never ran since the baseline): nobody will
			 * charge it again. */
			if (perfcount_remove_cgroup(cg_fd, id) == 0)
				m->counters_cgroups_removed++;
			cur[i].cgroup_id = 0; /* not kept as a baseline */
		}
	}
	if (!baseline) {
		hub_reader_end(m->hub, m->counters_slot);
		manager_flush(m);
	}
	/* The programs count the rows users' cgroups take as they add them; the daemon recounts,
	 * since only it takes rows out. A row added between the read and this write is missed
	 * until the next interval: the share is a bound within one interval's new cgroups. */
	(void) bpf_map_update_elem(
		probes_counters_users_fd(m->probes),
		&(uint32_t){ PERFRELAY_COUNTERS_USERS_HELD },
		&users_held,
		BPF_ANY);
	if (view) {
		free(m->unit_view);
		m->unit_view = TAKE_PTR(view);
		m->unit_view_n = n_view;
	}
	free(m->counters_prev);
	m->counters_prev = TAKE_PTR(cur);
	m->counters_prev_n = n;
	/* Removed ones sort first (id 0) and are never found: bsearch needs the order kept. */
	qsort(m->counters_prev, n, sizeof(CgroupCounters), perfcount_cmp_cgroup);
	m->counters_prev_at = now;
}

static int on_counters_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	Manager *m = userdata;

	counters_interval(m);
	(void) sd_event_source_set_time(s, usec + (uint64_t) m->config->counters_interval_ms * USEC_PER_MSEC);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

/* The tick: a quarter of the interval, at most 100 ms, so that an interval's events hold
 * what the units used up to a tick before it. */
static uint64_t counters_tick_ns(const Manager *m) {
	return MIN((uint64_t) m->config->counters_interval_ms / 4, (uint64_t) 100) * NSEC_PER_MSEC;
}

/* The cgroup watch's cgroups users made, into the programs' set (counters_users_cgroup_ids):
 * those are held to the users' share of the cgroup table. */
static void on_user_cgroup(void *userdata, uint64_t id, bool added) {
	Manager *m = userdata;
	int fd = probes_counters_user_ids_fd(m->probes);

	if (added)
		(void) bpf_map_update_elem(fd, &id, &(uint8_t){ 1 }, BPF_ANY);
	else
		(void) bpf_map_delete_elem(fd, &id);
}

/* Empties the pinned set (ids a previous daemon put there may be of cgroups gone since). */
static void clear_user_cgroups(Manager *m) {
	int fd = probes_counters_user_ids_fd(m->probes);
	uint64_t key;

	while (bpf_map_get_next_key(fd, NULL, &key) == 0)
		if (bpf_map_delete_elem(fd, &key) < 0)
			break;
}

int manager_setup_counters(Manager *m) {
	int fds[PERFRELAY_COUNTERS_MAX];
	PerfCountReport rep;
	CpuSet online = m->cpus;
	int r;

	if (m->counters_seq == 0)
		m->counters_seq = now_nsec(CLOCK_BOOTTIME);
	if (m->config->counters == 0) {
		/* Off: the programs detached, their links unpinned, the process table emptied. */
		return probes_set_counters(m->probes, 0);
	}
	FOREACH_CPU(cpu, &m->cpus_parked)
		cpuset_remove(&online, (unsigned) cpu);
	counters_array_fds(m, fds);
	r = perfcount_open(fds, &online, m->config->counters, &rep);
	if (r < 0) {
		log_warning_errno(r, "Failed to open the perf counters: %m; running without counters");
		(void) probes_set_counters(m->probes, 0);
		return 0;
	}
	m->counters_mask = (uint32_t) r;
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		if (rep.missing & (1u << i))
			log_notice(
				"Counter %s: this machine cannot count it (no hardware PMU, or the PMU lacks "
				"the event); left out",
				counter_to_string(i));
	if (rep.cpu_fails > 0)
		log_warning(
			"Counters: %" PRIu32 " per-CPU events failed to open; those CPUs count nothing",
			rep.cpu_fails);
	if (m->counters_mask == 0) {
		log_notice("Counters: none of Counters= can be counted here; counters off");
		return probes_set_counters(m->probes, 0);
	}
	r = probes_set_counters(m->probes, m->counters_mask);
	if (r < 0) {
		m->counters_mask = 0;
		log_warning_errno(r, "Failed to attach the counters programs: %m; running without counters");
		return 0;
	}
	/* Users' cgroups may take half the cgroup table, so that systemd's units keep the rest. */
	clear_user_cgroups(m);
	cgroup_watch_set_user_fn(m->cgroup_watch, on_user_cgroup, m);
	if (bpf_map_update_elem(
		    probes_counters_users_fd(m->probes),
		    &(uint32_t){ PERFRELAY_COUNTERS_USERS_MAX },
		    &(uint64_t){ m->config->counters_max_cgroups / 2 },
		    BPF_ANY) < 0)
		log_warning_errno(-errno, "Counters: failed to set the users' share of the cgroup table: %m");
	FOREACH_CPU(cpu, &online) {
		r = probes_counters_tick(m->probes, (unsigned) cpu, counters_tick_ns(m));
		if (r < 0)
			log_warning_errno(
				r,
				"Counters: failed to start the tick on CPU %d: %m; a task that keeps that CPU is "
				"charged only when it leaves it",
				cpu);
	}
	counters_interval(m); /* the baseline */
	r = sd_event_add_time_relative(
		m->event,
		&m->counters_source,
		CLOCK_MONOTONIC,
		(uint64_t) m->config->counters_interval_ms * USEC_PER_MSEC,
		USEC_PER_MSEC,
		on_counters_timer,
		m);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the counters timer: %m");
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		if (m->counters_mask & (1u << i))
			log_info(
				"Counter %s on (%s/perf-counters/%s)",
				counter_to_string(i),
				m->config->pin_path,
				counter_to_string(i));
	return 0;
}

void manager_counters_cpu_online(Manager *m, unsigned cpu) {
	int fds[PERFRELAY_COUNTERS_MAX];
	int r;

	if (m->counters_mask == 0)
		return;
	counters_array_fds(m, fds);
	r = perfcount_open_cpu(fds, m->counters_mask, cpu);
	if (r < 0)
		log_warning_errno(
			r, "Counters: failed to open the events of CPU %u: %m; it counts nothing", cpu);
	r = probes_counters_tick(m->probes, cpu, counters_tick_ns(m));
	if (r < 0)
		log_warning_errno(r, "Counters: failed to start the tick on CPU %u: %m", cpu);
}

void manager_free_counters(Manager *m) {
	cgroup_watch_set_user_fn(m->cgroup_watch, NULL, NULL);
	m->counters_source = sd_event_source_disable_unref(m->counters_source);
	free(m->unit_view);
	m->unit_view = NULL;
	m->unit_view_n = 0;
	free(m->counters_prev);
	m->counters_prev = NULL;
	m->counters_prev_n = 0;
}

int manager_unit_counters(Manager *m, UnitCounters **ret, size_t *ret_n) {
	UnitCounters *out;

	if (m->counters_mask == 0 || !m->unit_view) {
		/* No counters, or no interval yet: nothing counted that a caller could rate. */
		*ret = NULL;
		*ret_n = 0;
		return 0;
	}
	out = memdup_array(m->unit_view, m->unit_view_n ?: 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	*ret = out;
	*ret_n = m->unit_view_n;
	return 0;
}
