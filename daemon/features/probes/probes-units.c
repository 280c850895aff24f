/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GetStats()' "units" (docs/dbus.md): who emits and who loses, per cgroup and producer, from the
 * pinned "unit_counts" (producer.bpf.h). The map has room for PERFRELAY_UNIT_COUNTS_MAX keys;
 * what finds none is counted as unattributed, and the entries of removed cgroups (whose tasks
 * can emit no more) are pruned every UNITS_PRUNE_USEC into a total of their own, so that
 * listed + pruned + unattributed always adds up to every attempt and failure the producers
 * counted since the map was made. */
#include <stdlib.h>

#include "api/bus-figures.h"
#include "base/log.h"
#include "features/probes/probes-units.h"
#include "kernel/probes.h"

/* One cgroup's counts over its producers, for the list. */
typedef struct UnitRow {
	uint64_t cgroup_id;
	uint64_t attempts, failures;
	uint64_t throttled; /* MaxEventsPerUnitPerSec= refused (docs/pipeline.md, "Throttle") */
	size_t first, n;    /* its entries in the array sorted by cgroup */
	bool top_failures;  /* among the UNITS_LISTED_MAX that lost, or were throttled, most */
} UnitRow;

int unit_count_cmp(const void *a, const void *b) {
	const UnitCount *x = a, *y = b;

	if (x->cgroup_id != y->cgroup_id)
		return x->cgroup_id < y->cgroup_id ? -1 : 1;
	return x->producer < y->producer ? -1 : x->producer > y->producer;
}

static int by_row_cgroup(const void *a, const void *b) {
	const UnitRow *x = a, *y = b;

	return x->cgroup_id < y->cgroup_id ? -1 : x->cgroup_id > y->cgroup_id;
}

static int by_attempts(const void *a, const void *b) {
	const UnitRow *x = a, *y = b;

	if (x->attempts != y->attempts)
		return x->attempts > y->attempts ? -1 : 1;
	return x->cgroup_id < y->cgroup_id ? -1 : x->cgroup_id > y->cgroup_id;
}

static int by_failures(const void *a, const void *b) {
	const UnitRow *x = a, *y = b;

	if (x->failures != y->failures)
		return x->failures > y->failures ? -1 : 1;
	return by_attempts(a, b);
}

static int by_throttled(const void *a, const void *b) {
	const UnitRow *x = a, *y = b;

	if (x->throttled != y->throttled)
		return x->throttled > y->throttled ? -1 : 1;
	return by_attempts(a, b);
}

/* Whether cgroup `id` was removed, so that no task can emit in it any more and its entries may
 * go: the cgroup watch knows it as no live cgroup, and either remembers its unit from when it
 * went (manager_cgroup_unit() names it then) or has never left a directory unwatched
 * (`complete`: a live cgroup it does not watch would look the same; its entries stay, counted
 * on, rather than lose increments in flight). */
static bool cgroup_gone(Manager *m, uint64_t id, bool complete) {
	char buf[256];
	bool gone = false;
	const char *remembered;

	if (id == 0) /* no task's (packets, PERFRELAY_UNIT_CGROUP()), or the shared bucket */
		return false;
	remembered = manager_cgroup_unit(m, id, buf, sizeof(buf), &gone, NULL);
	return gone && (remembered || complete);
}

void units_prune(Manager *m, UnitsPruned *pruned) {
	_cleanup_free_ UnitCount *u = NULL;
	_cleanup_free_ UnitThrottled *t = NULL;
	CgroupWatch *w = manager_cgroup_watch(m);
	struct perfrelay_counters full;
	CgroupWatchStats st;
	size_t n, n_t;
	bool complete;
	int r;

	if (!w)
		return; /* no cgroup2: nothing is known gone */
	cgroup_watch_get_stats(w, &st);
	complete = st.unwatched == 0 && st.unwatched_users == 0;
	r = probes_read_unit_counts(manager_probes(m), &u, &n, &full);
	if (r < 0) {
		log_warning_errno(r, "Failed to read %s/unit_counts: %m", manager_pin_path(m));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (!cgroup_gone(m, u[i].cgroup_id, complete))
			continue;
		/* Read a moment ago; nothing adds to it since (no task is left in the cgroup). */
		if (probes_forget_unit_count(manager_probes(m), u[i].cgroup_id, u[i].producer) < 0)
			continue;
		pruned->attempts += u[i].attempts;
		pruned->failures += u[i].failures;
		pruned->entries++;
	}
	r = probes_read_throttled(manager_probes(m), &t, &n_t);
	if (r < 0) {
		log_warning_errno(r, "Failed to read %s/throttle: %m", manager_pin_path(m));
		return;
	}
	for (size_t i = 0; i < n_t; i++)
		if (cgroup_gone(m, t[i].cgroup_id, complete) &&
		    probes_forget_throttle(manager_probes(m), t[i].cgroup_id) >= 0)
			pruned->throttled += t[i].throttled;
}

static int append_row(Manager *m, sd_bus_message *reply, const UnitRow *row, const UnitCount *u) {
	char buf[256];
	bool gone = false;
	const char *unit = manager_cgroup_unit(m, row->cgroup_id, buf, sizeof(buf), &gone, NULL);
	int r = sd_bus_message_open_container(reply, 'a', "{sv}");

	if (r >= 0)
		r = sd_bus_message_append(
			reply,
			"{sv}{sv}{sv}",
			"cgroup_id",
			"t",
			row->cgroup_id,
			"unit",
			"s",
			unit ?: "",
			"gone",
			"b",
			(int) gone);
	if (r >= 0)
		r = APPEND_FIGURES(
			reply,
			{ "attempts", row->attempts },
			{ "failures", row->failures },
			{ "throttled", row->throttled });
	if (r >= 0)
		r = open_entry(reply, "producers", "aa{sv}", 'a', "a{sv}");
	for (size_t k = row->first; r >= 0 && k < row->first + row->n; k++) {
		r = sd_bus_message_open_container(reply, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(reply, "{sv}", "id", "u", u[k].producer);
		if (r >= 0)
			r = APPEND_FIGURES(reply, { "attempts", u[k].attempts }, { "failures", u[k].failures });
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
	}
	if (r >= 0)
		r = close_entry(reply);
	return r < 0 ? r : sd_bus_message_close_container(reply);
}

int units_stats_append(Manager *m, sd_bus_message *reply, const UnitsPruned *pruned) {
	_cleanup_free_ UnitCount *u = NULL;
	_cleanup_free_ UnitThrottled *t = NULL;
	_cleanup_free_ UnitRow *rows = NULL;
	struct perfrelay_counters full;
	uint64_t throttled = 0;
	size_t n, n_t, n_rows = 0, n_counted;
	int r;

	r = probes_read_unit_counts(manager_probes(m), &u, &n, &full);
	if (r >= 0)
		r = probes_read_throttled(manager_probes(m), &t, &n_t);
	if (r < 0)
		return r;
	qsort(u, n, sizeof(*u), unit_count_cmp);
	rows = calloc(n + n_t ?: 1, sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (n_rows == 0 || rows[n_rows - 1].cgroup_id != u[i].cgroup_id)
			rows[n_rows++] = (UnitRow){ .cgroup_id = u[i].cgroup_id, .first = i };
		rows[n_rows - 1].attempts += u[i].attempts;
		rows[n_rows - 1].failures += u[i].failures;
		rows[n_rows - 1].n++;
	}
	/* The throttle's buckets join their cgroups' rows, or make rows of their own (a cgroup
	 * all of whose records were refused made no attempt). */
	n_counted = n_rows;
	for (size_t i = 0; i < n_t; i++) {
		UnitRow key = { .cgroup_id = t[i].cgroup_id }, *row;

		throttled += t[i].throttled;
		if (t[i].throttled == 0)
			continue;
		row = bsearch(&key, rows, n_counted, sizeof(*rows), by_row_cgroup);
		if (!row) {
			row = &rows[n_rows++];
			*row = key;
		}
		row->throttled = t[i].throttled;
	}

	r = open_section(reply, "units");
	if (r >= 0)
		r = APPEND_FIGURES(
			reply,
			{ "capacity", PERFRELAY_UNIT_COUNTS_MAX },
			{ "entries", n },
			{ "cgroups", n_rows },
			{ "unattributed_attempts", full.attempts },
			{ "unattributed_failures", full.failures },
			{ "pruned_attempts", pruned->attempts },
			{ "pruned_failures", pruned->failures },
			{ "pruned_entries", pruned->entries },
			{ "throttled", throttled },
			{ "pruned_throttled", pruned->throttled });
	/* Listed: the UNITS_LISTED_MAX cgroups that lost most (who loses), that were throttled
	 * most, and the UNITS_LISTED_MAX that emitted most (who floods), by attempts. */
	qsort(rows, n_rows, sizeof(*rows), by_failures);
	for (size_t i = 0; i < n_rows && i < UNITS_LISTED_MAX && rows[i].failures > 0; i++)
		rows[i].top_failures = true;
	qsort(rows, n_rows, sizeof(*rows), by_throttled);
	for (size_t i = 0; i < n_rows && i < UNITS_LISTED_MAX && rows[i].throttled > 0; i++)
		rows[i].top_failures = true;
	qsort(rows, n_rows, sizeof(*rows), by_attempts);
	if (r >= 0)
		r = open_entry(reply, "list", "aa{sv}", 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < n_rows; i++)
		if (i < UNITS_LISTED_MAX || rows[i].top_failures)
			r = append_row(m, reply, &rows[i], u);
	if (r >= 0)
		r = close_entry(reply);
	return r < 0 ? r : close_entry(reply);
}
