/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Perf counters (docs/counters.md): the counting events and the counters programs from start to
 * stop, every CountersIntervalMs= one "counters" event per cgroup that ran, published to
 * subscribers through the feature's own hub slot; GetUnitCounters() and GetStats()' "counters". */
#include "perfrelay-config.h"

#include <bpf/bpf.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/bus-figures.h"
#include "features/feature-table.h"
#include "core/manager.h"
#include "base/log.h"
#include "features/counters/counters-config.h"
#include "features/counters/perfcount.h"
#include "time-util.h"

typedef struct CountersFeature {
	Feature feature;
	uint32_t mask;           /* the counters in place (bits PERFRELAY_COUNTER_*); 0: off */
	sd_event_source *source; /* the interval timer */
	CgroupCounters *prev;    /* every cgroup's totals at the last interval, by id */
	size_t prev_n;
	uint64_t prev_at; /* CLOCK_MONOTONIC ns of the last interval; 0 before the first */
	/* GetUnitCounters()' answer, made once per interval from what the interval read anyway:
	 * callers cannot make the main thread walk the table. */
	UnitCounters *unit_view;
	size_t unit_view_n;
	/* The next "counters" event's seq. It starts at CLOCK_BOOTTIME ns when the daemon starts, so
	 * it never repeats within a boot across restarts (fewer than one event per ns is made): the
	 * exporter's message ids (boot id, producer, cpu, seq) stay unique (docs/counters.md). */
	uint64_t seq;
	uint64_t events;          /* "counters" events published */
	uint64_t intervals;       /* intervals read */
	uint64_t cgroups_removed; /* removed cgroups taken out of the table */
} CountersFeature;

static const CountersConfig *counters_cfg(const Manager *m) {
	return config_part(manager_config(m), &counters_config);
}

static void counters_array_fds(CountersFeature *cf, int fds[PERFRELAY_COUNTERS_MAX]) {
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		fds[i] = probes_counter_array_fd(manager_probes(cf->feature.manager), i);
}

static const CgroupCounters *find_prev(CountersFeature *cf, uint64_t id) {
	CgroupCounters key = { .cgroup_id = id };

	if (cf->prev_n == 0)
		return NULL;
	return bsearch(&key, cf->prev, cf->prev_n, sizeof(key), perfcount_cmp_cgroup);
}

static void
	publish(CountersFeature *cf,
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
			.seq = cf->seq++,
			.ts_ns = now_nsec(CLOCK_BOOTTIME),
		},
		.cgroup_id = cur->cgroup_id,
		.interval_ns = interval_ns,
		.counters = { .mask = cur->mask & cf->mask, .scaled = cur->scaled },
	};
	DecodedEvent ev;

	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		/* A total below the last one: the table was emptied under us (counters turned off
		 * and on while we were down); it counts from 0 again. */
		rec.counters.value[i] = prev && cur->value[i] >= prev->value[i] ?
			cur->value[i] - prev->value[i] :
			cur->value[i];
	decode_daemon_record(&rec, &ev);
	/* A unit's counters are of no one process: no lineage. */
	hub_publish(
		manager_hub(cf->feature.manager), cf->feature.hub_slot, &ev, &(HubOrigin){ .unit = unit }, NULL);
	cf->events++;
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
static void counters_interval(CountersFeature *cf) {
	Manager *m = cf->feature.manager;
	Probes *p = manager_probes(m);
	_cleanup_free_ CgroupCounters *cur = NULL;
	_cleanup_free_ UnitCounters *view = NULL;
	uint64_t users_held = 0;
	size_t n_view = 0;
	uint64_t now = now_nsec(CLOCK_MONOTONIC);
	int cg_fd = probes_counters_cgroups_fd(p);
	bool baseline = cf->prev_at == 0;
	size_t n = 0;
	int r;

	r = perfcount_read_cgroups(
		cg_fd, probes_possible_cpus(p), manager_config(m)->counters_max_cgroups, &cur, &n);
	if (r < 0) {
		log_warning_errno(r, "Failed to read the counters_cgroups table: %m");
		return;
	}
	cf->intervals++;
	view = calloc(n ?: 1, sizeof(*view));
	if (!view)
		log_warning("Counters: out of memory for GetUnitCounters()' view; it keeps the last one");
	if (!baseline)
		hub_reader_begin(manager_hub(m), cf->feature.hub_slot);
	for (size_t i = 0; i < n; i++) {
		const CgroupCounters *prev = find_prev(cf, cur[i].cgroup_id);
		char buf[256];
		const char *unit;
		uid_t owner;
		bool gone;

		unit = manager_cgroup_unit(m, cur[i].cgroup_id, buf, sizeof(buf), &gone, &owner);
		if (!gone && cgroup_watch_dir_owner(manager_cgroup_watch(m), cur[i].cgroup_id) != 0)
			users_held++;
		/* The view is the table as this interval leaves it: without the cgroups gone. */
		if (view && !gone) {
			UnitCounters *v = &view[n_view++];

			snprintf(v->unit, sizeof(v->unit), "%s", unit ?: "");
			v->owner = owner;
			v->counters = cur[i];
			v->counters.mask &= cf->mask;
		}
		if (!baseline && ran(&cur[i], prev))
			publish(cf, &cur[i], prev, now - cf->prev_at, unit);
		if (gone) {
			uint64_t id = cur[i].cgroup_id;

			/* Its last interval is out (or it never ran since the baseline): nobody will
			 * charge it again. */
			if (perfcount_remove_cgroup(cg_fd, id) == 0)
				cf->cgroups_removed++;
			cur[i].cgroup_id = 0; /* not kept as a baseline */
		}
	}
	if (!baseline) {
		hub_reader_end(manager_hub(m), cf->feature.hub_slot);
		manager_flush(m);
	}
	/* The programs count the rows users' cgroups take as they add them; the daemon recounts,
	 * since only it takes rows out. A row added between the read and this write is missed
	 * until the next interval: the share is a bound within one interval's new cgroups. */
	(void) bpf_map_update_elem(
		probes_counters_users_fd(p), &(uint32_t){ PERFRELAY_COUNTERS_USERS_HELD }, &users_held, BPF_ANY);
	if (view) {
		free(cf->unit_view);
		cf->unit_view = TAKE_PTR(view);
		cf->unit_view_n = n_view;
	}
	free(cf->prev);
	cf->prev = TAKE_PTR(cur);
	cf->prev_n = n;
	/* Removed ones sort first (id 0) and are never found: bsearch needs the order kept. */
	qsort(cf->prev, n, sizeof(CgroupCounters), perfcount_cmp_cgroup);
	cf->prev_at = now;
}

static int on_counters_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	CountersFeature *cf = userdata;

	counters_interval(cf);
	(void) sd_event_source_set_time(
		s, usec + (uint64_t) counters_cfg(cf->feature.manager)->interval_ms * USEC_PER_MSEC);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

/* The tick: a quarter of the interval, at most 100 ms, so that an interval's events hold
 * what the units used up to a tick before it. */

static uint64_t counters_tick_ns(const Manager *m) {
	return MIN((uint64_t) counters_cfg(m)->interval_ms / 4, (uint64_t) 100) * NSEC_PER_MSEC;
}

/* The cgroup watch's cgroups users made, into the programs' set (counters_users_cgroup_ids):
 * those are held to the users' share of the cgroup table. */
static void on_user_cgroup(void *userdata, uint64_t id, bool added) {
	Manager *m = userdata;
	int fd = probes_counters_user_ids_fd(manager_probes(m));

	if (added)
		(void) bpf_map_update_elem(fd, &id, &(uint8_t){ 1 }, BPF_ANY);
	else
		(void) bpf_map_delete_elem(fd, &id);
}

/* Empties the pinned set (ids a previous daemon put there may be of cgroups gone since). */
static void clear_user_cgroups(Manager *m) {
	int fd = probes_counters_user_ids_fd(manager_probes(m));
	uint64_t key;

	while (bpf_map_get_next_key(fd, NULL, &key) == 0)
		if (bpf_map_delete_elem(fd, &key) < 0)
			break;
}

static int counters_start(Feature *f) {
	CountersFeature *cf = (CountersFeature *) f;
	Manager *m = f->manager;
	const Config *c = manager_config(m);
	const CountersConfig *cc = counters_cfg(m);
	Probes *p = manager_probes(m);
	int fds[PERFRELAY_COUNTERS_MAX];
	PerfCountReport rep;
	CpuSet online = *manager_cpus(m);
	int r;

	cf->seq = now_nsec(CLOCK_BOOTTIME);
	if (cc->counters == 0) {
		/* Off: the programs detached, their links unpinned, the process table emptied. */
		return probes_set_counters(p, 0);
	}
	FOREACH_CPU(cpu, manager_cpus_parked(m))
		cpuset_remove(&online, (unsigned) cpu);
	counters_array_fds(cf, fds);
	r = perfcount_open(fds, &online, cc->counters, &rep);
	if (r < 0) {
		log_warning_errno(r, "Failed to open the perf counters: %m; running without counters");
		(void) probes_set_counters(p, 0);
		return 0;
	}
	cf->mask = (uint32_t) r;
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
	if (cf->mask == 0) {
		log_notice("Counters: none of Counters= can be counted here; counters off");
		return probes_set_counters(p, 0);
	}
	r = probes_set_counters(p, cf->mask);
	if (r < 0) {
		cf->mask = 0;
		log_warning_errno(r, "Failed to attach the counters programs: %m; running without counters");
		return 0;
	}
	/* Users' cgroups may take half the cgroup table, so that systemd's units keep the rest. */
	clear_user_cgroups(m);
	cgroup_watch_set_user_fn(manager_cgroup_watch(m), on_user_cgroup, m);
	if (bpf_map_update_elem(
		    probes_counters_users_fd(p),
		    &(uint32_t){ PERFRELAY_COUNTERS_USERS_MAX },
		    &(uint64_t){ c->counters_max_cgroups / 2 },
		    BPF_ANY) < 0)
		log_warning_errno(-errno, "Counters: failed to set the users' share of the cgroup table: %m");
	FOREACH_CPU(cpu, &online) {
		r = probes_counters_tick(p, (unsigned) cpu, counters_tick_ns(m));
		if (r < 0)
			log_warning_errno(
				r,
				"Counters: failed to start the tick on CPU %d: %m; a task that keeps that CPU is "
				"charged only when it leaves it",
				cpu);
	}
	counters_interval(cf); /* the baseline */
	r = sd_event_add_time_relative(
		manager_event(m),
		&cf->source,
		CLOCK_MONOTONIC,
		(uint64_t) cc->interval_ms * USEC_PER_MSEC,
		USEC_PER_MSEC,
		on_counters_timer,
		cf);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the counters timer: %m");
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		if (cf->mask & (1u << i))
			log_info(
				"Counter %s on (%s/perf-counters/%s)",
				counter_to_string(i),
				c->pin_path,
				counter_to_string(i));
	return 0;
}

static void counters_cpu_online(Feature *f, unsigned cpu) {
	CountersFeature *cf = (CountersFeature *) f;
	Manager *m = f->manager;
	int fds[PERFRELAY_COUNTERS_MAX];
	int r;

	if (cf->mask == 0)
		return;
	counters_array_fds(cf, fds);
	r = perfcount_open_cpu(fds, cf->mask, cpu);
	if (r < 0)
		log_warning_errno(
			r, "Counters: failed to open the events of CPU %u: %m; it counts nothing", cpu);
	r = probes_counters_tick(manager_probes(m), cpu, counters_tick_ns(m));
	if (r < 0)
		log_warning_errno(r, "Counters: failed to start the tick on CPU %u: %m", cpu);
}

static void counters_done(Feature *f) {
	CountersFeature *cf = (CountersFeature *) f;

	cgroup_watch_set_user_fn(manager_cgroup_watch(f->manager), NULL, NULL);
	cf->source = sd_event_source_disable_unref(cf->source);
	free(cf->unit_view);
	cf->unit_view = NULL;
	cf->unit_view_n = 0;
	free(cf->prev);
	cf->prev = NULL;
	cf->prev_n = 0;
}

/* Every cgroup's perf counter totals (*ret malloc'd, NULL and 0 when counters are off). */
static int unit_counters(CountersFeature *cf, UnitCounters **ret, size_t *ret_n) {
	UnitCounters *out;

	if (cf->mask == 0 || !cf->unit_view) {
		/* No counters, or no interval yet: nothing counted that a caller could rate. */
		*ret = NULL;
		*ret_n = 0;
		return 0;
	}
	out = memdup_array(cf->unit_view, cf->unit_view_n ?: 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	*ret = out;
	*ret_n = cf->unit_view_n;
	return 0;
}

/* GetUnitCounters(): each cgroup's perf counter totals (docs/counters.md) as a(sta{st}): unit
 * ("" when the cgroup belongs to no unit), cgroup id, and the configured counters by their JSON
 * names. Counters that change at every context switch tell what another user's processes do (a
 * side channel), so root, AllowGroups= and ControlGroups= members get every cgroup, anyone else
 * the cgroups of their own slice and manager (user-UID.slice, user@UID.service). The answer is
 * the view the counters' interval made, never a walk of the table per call. */
static int method_get_unit_counters(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_free_ UnitCounters *units = NULL;
	CountersFeature *cf = userdata;
	SubscriptionAccess access;
	size_t n = 0;
	uid_t uid;
	int r;

	r = bus_require_read(
		manager_bus(cf->feature.manager), message, "GetUnitCounters", &uid, &access, error);
	if (r < 0)
		return r;
	r = unit_counters(cf, &units, &n);
	if (r < 0)
		return sd_bus_error_set_errnof(error, r, "Failed to read the counters_cgroups table: %m");
	r = sd_bus_message_new_method_return(message, &reply);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "(sta{st})");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		const CgroupCounters *c = &units[i].counters;

		if (access != SUBSCRIPTION_ACCESS_ALL && units[i].owner != uid)
			continue;
		r = sd_bus_message_open_container(reply, 'r', "sta{st}");
		if (r >= 0)
			r = sd_bus_message_append(reply, "st", units[i].unit, c->cgroup_id);
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'a', "{st}");
		for (unsigned k = 0; r >= 0 && k < PERFRELAY_COUNTERS_MAX; k++)
			if (c->mask & (1u << k))
				r = sd_bus_message_append(reply, "{st}", counter_key_to_string(k), c->value[k]);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

/* "counters": the counters in place (names) and every figure of docs/counters.md: what the
 * programs did (the pinned counters_stats, over every daemon) and what this daemon published. */
static int counters_stats_append(Feature *f, sd_bus_message *m) {
	CountersFeature *cf = (CountersFeature *) f;
	Probes *p = manager_probes(f->manager);
	struct perfrelay_counters_stats st = {};
	uint64_t users[PERFRELAY_COUNTERS_USERS_SLOTS] = {};
	int r;

	(void) perfcount_read_stats(probes_counters_stats_fd(p), probes_possible_cpus(p), &st);
	for (uint32_t k = 0; k < PERFRELAY_COUNTERS_USERS_SLOTS; k++)
		(void) bpf_map_lookup_elem(probes_counters_users_fd(p), &k, &users[k]);
	r = open_section(m, "counters");
	if (r >= 0)
		r = open_entry(m, "counters", "as", 'a', "s");
	for (unsigned i = 0; r >= 0 && i < PERFRELAY_COUNTERS_MAX; i++)
		if (cf->mask & (1u << i))
			r = sd_bus_message_append(m, "s", counter_to_string(i));
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "charges", st.charges },
			{ "read_errors", st.read_errors },
			{ "scaled", st.scaled },
			{ "cgroup_full", st.cgroup_full },
			{ "cgroups_users", users[PERFRELAY_COUNTERS_USERS_HELD] },
			{ "cgroups_users_max", users[PERFRELAY_COUNTERS_USERS_MAX] },
			{ "cgroup_full_users", users[PERFRELAY_COUNTERS_USERS_REFUSED] },
			{ "process_full", st.process_full },
			{ "reaped", st.reaped },
			{ "events", cf->events },
			{ "intervals", cf->intervals },
			{ "cgroups_removed", cf->cgroups_removed },
			{ "exit_dropped", probes_exit_records_dropped(p) });
	return r < 0 ? r : close_entry(m);
}

static bool counters_wants_hub_slot(const Config *c) {
	const CountersConfig *cc = config_part(c, &counters_config);

	return cc->counters != 0;
}

/* clang-format off */
static const sd_bus_vtable counters_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("GetUnitCounters",
	                         NULL, "",
	                         "a(sta{st})", SD_BUS_PARAM(units),
	                         method_get_unit_counters, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

const FeatureVtable counters_feature = {
	.name = "counters",
	.object_size = sizeof(CountersFeature),
	.config = &counters_config,
	.wants_hub_slot = counters_wants_hub_slot,
	.start = counters_start,
	.cpu_online = counters_cpu_online,
	.done = counters_done,
	.bus_vtable = counters_bus_vtable,
	.stats_append = counters_stats_append,
};
