/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl top: the units that used the most of a perf counter, per second, refreshed like
 * systemd-cgtop, from D-Bus GetUnitCounters() (docs/counters.md); with --by=events the units that
 * emitted and lost the most records, from GetStats()' "units" (docs/pipeline.md, "Attribution").
 * --batch prints one table per iteration for scripts; --json one JSON array per iteration. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "ctl/ctl.h"
#include "ctl/format.h"
#include "event.h"
#include "json-util.h"
#include "kernel/counter-names.h"
#include "time-util.h"

#define TOP_COUNTERS  PERFRELAY_COUNTERS_MAX
#define TOP_UNITS_MAX 65536u /* answers are bounded by the daemon's CountersMaxCgroups= */

/* Each counter's column (its names and keys: kernel/counter-names.c, shared with the daemon). */
static const char *const columns[TOP_COUNTERS] = {
	[PERFRELAY_COUNTER_TASK_CLOCK] = "CPU%",      [PERFRELAY_COUNTER_CONTEXT_SWITCHES] = "CSW/s",
	[PERFRELAY_COUNTER_PAGE_FAULTS] = "FAULTS/s", [PERFRELAY_COUNTER_CPU_MIGRATIONS] = "MIGR/s",
	[PERFRELAY_COUNTER_CYCLES] = "CYCLES/s",      [PERFRELAY_COUNTER_INSTRUCTIONS] = "INSTR/s",
	[PERFRELAY_COUNTER_CACHE_MISSES] = "CMISS/s", [PERFRELAY_COUNTER_BRANCH_MISSES] = "BMISS/s",
};

/* --by=events: the columns, in TopUnit.value[]. */
enum {
	TOP_EVENTS_ATTEMPTS,
	TOP_EVENTS_FAILURES,
	_TOP_EVENTS_MAX,
};
static const char *const event_columns[_TOP_EVENTS_MAX] = { "EVENTS/s", "LOST/s" };
static const char *const event_keys[_TOP_EVENTS_MAX] = { "events", "lost" };
static bool by_events;

static const char *column_name(unsigned c) {
	return by_events ? event_columns[c] : columns[c];
}
static const char *column_key(unsigned c) {
	return by_events ? event_keys[c] : counter_key_to_string(c);
}

typedef struct TopUnit {
	char *name; /* the unit, or "cgroup:ID" for a cgroup of no unit */
	uint64_t cgroup_id;
	uint32_t mask;
	uint64_t value[TOP_COUNTERS];
	double rate[TOP_COUNTERS];
} TopUnit;

typedef struct TopSample {
	TopUnit *units;
	size_t n;
	uint32_t mask;  /* counters any unit has */
	uint64_t at_ns; /* CLOCK_MONOTONIC */
} TopSample;

static void sample_clear(TopSample *s) {
	for (size_t i = 0; i < s->n; i++)
		free(s->units[i].name);
	free(s->units);
	*s = (TopSample){};
}

/* A counter by its key in GetUnitCounters() or its name in Counters=. */
static int counter_index(const char *key) {
	int k = counter_key_from_string(key);

	return k >= 0 ? k : counter_from_string(key);
}

/* Adds a unit to the sample: its name, or "cgroup:ID" for a cgroup of no unit. */
static TopUnit *sample_add(TopSample *s, const char *unit, uint64_t id) {
	TopUnit *u;

	if (s->n >= TOP_UNITS_MAX)
		return NULL;
	u = realloc(s->units, (s->n + 1) * sizeof(*u));
	if (!u)
		return NULL;
	s->units = u;
	u = &s->units[s->n];
	*u = (TopUnit){ .cgroup_id = id };
	if (unit[0])
		u->name = strdup(unit);
	else if (asprintf(&u->name, "cgroup:%" PRIu64, id) < 0)
		u->name = NULL;
	if (!u->name)
		return NULL;
	s->n++;
	return u;
}

/* --by=events: GetStats()' "units" list, the records each cgroup's tasks emitted and lost. */
static int read_sample_events(TopSample *ret) {
	_cleanup_(json_object_putp) json_object *stats = NULL;
	json_object *units, *list;
	TopSample s = {};
	int r;

	r = bus_call_json("GetStats", &stats);
	if (r < 0)
		return r;
	s.at_ns = now_nsec(CLOCK_MONOTONIC);
	if (!json_object_object_get_ex(stats, "units", &units) ||
	    !json_object_object_get_ex(units, "list", &list) || !json_object_is_type(list, json_type_array))
		return error_msg("GetStats() has no \"units\" list (perfrelayd older than perfrelayctl?)");
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *o = json_object_array_get_idx(list, i), *name;
		uint64_t id = 0;
		TopUnit *u;

		(void) juint(o, "cgroup_id", &id);
		u = sample_add(
			&s,
			json_object_object_get_ex(o, "unit", &name) ? json_object_get_string(name) ?: "" : "",
			id);
		if (!u) {
			sample_clear(&s);
			return error_errno(-ENOMEM, "Failed to read the GetStats() answer");
		}
		(void) juint(o, "attempts", &u->value[TOP_EVENTS_ATTEMPTS]);
		(void) juint(o, "failures", &u->value[TOP_EVENTS_FAILURES]);
		u->mask = s.mask = (1u << _TOP_EVENTS_MAX) - 1;
	}
	*ret = s;
	return 0;
}

static int read_sample(sd_bus *bus, TopSample *ret) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	TopSample s = {};
	const char *unit;
	uint64_t id;
	int r;

	r = bus_call(bus, "GetUnitCounters", &reply, NULL);
	if (r < 0)
		return r;
	s.at_ns = now_nsec(CLOCK_MONOTONIC);
	r = sd_bus_message_enter_container(reply, 'a', "(sta{st})");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "sta{st}")) > 0) {
		TopUnit *u;
		const char *key;
		uint64_t v;

		r = sd_bus_message_read(reply, "st", &unit, &id);
		if (r < 0)
			break;
		u = sample_add(&s, unit, id);
		if (!u) {
			r = s.n >= TOP_UNITS_MAX ? -E2BIG : -ENOMEM;
			break;
		}
		r = sd_bus_message_enter_container(reply, 'a', "{st}");
		while (r >= 0 && (r = sd_bus_message_read(reply, "{st}", &key, &v)) > 0) {
			int k = counter_index(key);

			if (k < 0)
				continue; /* a counter a newer daemon has */
			u->value[k] = v;
			u->mask |= 1u << k;
			s.mask |= 1u << k;
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	if (r < 0) {
		sample_clear(&s);
		return error_errno(r, "Failed to read the GetUnitCounters() answer");
	}
	*ret = s;
	return 0;
}

/* Rates since `prev` for the units in both samples (by cgroup id); units that did not exist
 * then count from 0. */
static void compute_rates(TopSample *cur, const TopSample *prev) {
	double dt = (double) (cur->at_ns - prev->at_ns) / 1e9;

	if (dt <= 0)
		dt = 1e-9;
	for (size_t i = 0; i < cur->n; i++) {
		TopUnit *u = &cur->units[i];
		const TopUnit *p = NULL;

		for (size_t k = 0; k < prev->n && !p; k++)
			if (prev->units[k].cgroup_id == u->cgroup_id)
				p = &prev->units[k];
		for (unsigned c = 0; c < TOP_COUNTERS; c++) {
			uint64_t before = p && p->value[c] <= u->value[c] ? p->value[c] : 0;

			u->rate[c] = (double) (u->value[c] - before) / dt;
		}
	}
}

static unsigned order_by;

static int cmp_rate(const void *a, const void *b) {
	const TopUnit *x = a, *y = b;

	if (x->rate[order_by] < y->rate[order_by])
		return 1;
	if (x->rate[order_by] > y->rate[order_by])
		return -1;
	return strcmp(x->name, y->name);
}

static bool any_rate(const TopUnit *u) {
	for (unsigned c = 0; c < TOP_COUNTERS; c++)
		if (u->rate[c] > 0)
			return true;
	return false;
}

static void print_table(const TopSample *s, bool json) {
	_cleanup_(json_object_putp) json_object *a = json ? json_object_new_array() : NULL;

	if (!json) {
		printf("%-40s", "UNIT");
		for (unsigned c = 0; c < TOP_COUNTERS; c++)
			if (s->mask & (1u << c))
				printf(" %12s", column_name(c));
		printf("\n");
	}
	for (size_t i = 0; i < s->n; i++) {
		const TopUnit *u = &s->units[i];

		if (!any_rate(u))
			continue;
		if (json) {
			json_object *o = json_object_new_object(), *rates = json_object_new_object();

			json_object_object_add(o, "unit", json_object_new_string(u->name));
			json_object_object_add(o, "cgroup_id", json_object_new_uint64(u->cgroup_id));
			for (unsigned c = 0; c < TOP_COUNTERS; c++)
				if (u->mask & (1u << c))
					json_object_object_add(
						rates, column_key(c), json_object_new_double(u->rate[c]));
			json_object_object_add(o, "per_second", rates);
			json_object_array_add(a, o);
			continue;
		}
		printf("%-40.40s", u->name);
		for (unsigned c = 0; c < TOP_COUNTERS; c++) {
			if (!(s->mask & (1u << c)))
				continue;
			if (!(u->mask & (1u << c)))
				printf(" %12s", "-");
			else if (!by_events && c == PERFRELAY_COUNTER_TASK_CLOCK)
				printf(" %12.1f", u->rate[c] / 1e7); /* ns per s -> percent of one CPU */
			else
				printf(" %12.0f", u->rate[c]);
		}
		printf("\n");
	}
	if (json)
		printf("%s\n", json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN));
	fflush(stdout);
}

static void help(void) {
	printf("%s top [OPTIONS...]\n\n"
	       "Show the units that used the most of a perf counter, per second (D-Bus\n"
	       "GetUnitCounters()), refreshed like systemd-cgtop; or with --by=events the units\n"
	       "whose tasks emitted and lost the most records (GetStats(), \"units\").\n\n"
	       "  -h --help            Show this help\n"
	       "     --by=WHAT         counters (default) or events\n"
	       "  -o --order=COUNTER   Sort by this counter (default task-clock; also\n"
	       "                       context-switches page-faults cpu-migrations cycles\n"
	       "                       instructions cache-misses branch-misses; with\n"
	       "                       --by=events: events (default) or lost)\n"
	       "  -d --delay=SECONDS   Time between refreshes (default 1)\n"
	       "  -n --iterations=N    Stop after N refreshes (default: run until interrupted)\n"
	       "  -b --batch           Print each refresh as a plain table (no screen clearing)\n"
	       "  -j --json            Print each refresh as a JSON array\n",
	       program);
}

int verb_top(int argc, char *argv[]) {
	enum { ARG_BY = 0x100 };
	static const struct option options[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "by", required_argument, NULL, ARG_BY },
		{ "order", required_argument, NULL, 'o' },
		{ "delay", required_argument, NULL, 'd' },
		{ "iterations", required_argument, NULL, 'n' },
		{ "batch", no_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'j' },
		{},
	};
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	uint32_t iterations = 0, delay_ms = 1000;
	bool batch = false, json = false;
	TopSample prev = {}, cur = {};
	const char *order = NULL;
	int opt, r, k;
	char *end;

	by_events = false;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "ho:d:n:bj", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return 0;
		case ARG_BY:
			if (streq(optarg, "events"))
				by_events = true;
			else if (!streq(optarg, "counters"))
				return error_msg("--by=%s: counters or events", optarg);
			break;
		case 'o':
			order = optarg;
			break;
		case 'd': {
			double d = strtod(optarg, &end);

			if (end == optarg || *end || !(d >= 0.1 && d <= 3600))
				return error_msg("--delay=%s: seconds from 0.1 to 3600", optarg);
			delay_ms = (uint32_t) (d * 1000);
			break;
		}
		case 'n':
			if (parse_u32(optarg, &iterations) < 0 || iterations == 0)
				return error_msg("--iterations=%s: a positive number", optarg);
			break;
		case 'b':
			batch = true;
			break;
		case 'j':
			json = true;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("top takes no arguments (see --help)");
	if (by_events) {
		order_by = TOP_EVENTS_ATTEMPTS;
		if (order && streq(order, "lost"))
			order_by = TOP_EVENTS_FAILURES;
		else if (order && !streq(order, "events"))
			return error_msg("--order=%s: events or lost with --by=events", order);
	} else {
		k = order ? counter_index(order) : (int) PERFRELAY_COUNTER_TASK_CLOCK;
		if (k < 0)
			return error_msg("--order=%s: not a counter (see --help)", order);
		order_by = (unsigned) k;
	}

	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = by_events ? read_sample_events(&prev) : read_sample(bus, &prev);
	for (uint32_t i = 0; r >= 0 && (iterations == 0 || i < iterations); i++) {
		struct timespec ts = { delay_ms / 1000, (long) (delay_ms % 1000) * 1000000 };

		nanosleep(&ts, NULL);
		r = by_events ? read_sample_events(&cur) : read_sample(bus, &cur);
		if (r < 0)
			break;
		compute_rates(&cur, &prev);
		if (cur.n > 0) /* a caller shown no unit gets none: NULL */
			qsort(cur.units, cur.n, sizeof(TopUnit), cmp_rate);
		if (!batch && !json && isatty(STDOUT_FILENO))
			printf("\033[H\033[2J");
		else if (i > 0 && !json)
			printf("\n");
		if (cur.mask == 0 && !json)
			printf("No counters: the daemon counts none (Counters=none, or none can be counted here)\n");
		else
			print_table(&cur, json);
		sample_clear(&prev);
		prev = cur;
		cur = (TopSample){};
	}
	sample_clear(&prev);
	return r < 0 ? r : 0;
}
