/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Notices of loss in the streams (probes-notices.h). What a producer lost is its counted
 * failures (the pinned "counters", the ledger's), so a client attached all along gets notices
 * whose "kernel" counts add up to the producer's failures over that time, exactly; who lost them
 * is the per-cgroup "unit_counts" (probes-units.c), read only when failures moved (the failures
 * it holds move with the producers', so the snapshot stays their baseline). Main thread only;
 * while nothing is lost the work is one batched read of the counters a second. */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "decode/decode.h"
#include "features/probes/probes-notices.h"
#include "features/probes/probes-units.h"
#include "macro.h"

/* The types MaxEventsPerUnitPerSec= throttles (docs/pipeline.md, "Throttle"). */
static const uint16_t throttled_types[] = { PERFRELAY_TYPE_OPEN, PERFRELAY_TYPE_CONNECT };

/* One cgroup's loss since the last notice. */
typedef struct UnitLoss {
	uint64_t cgroup_id;
	uint64_t lost;
} UnitLoss;

static int by_throttle_cgroup(const void *a, const void *b) {
	const NoticeThrottle *x = a, *y = b;

	return x->cgroup_id < y->cgroup_id ? -1 : x->cgroup_id > y->cgroup_id;
}

static int read_failures(Manager *m, uint64_t *ret) {
	_cleanup_free_ struct perfrelay_counters *c = calloc(PERFRELAY_MAX_PRODUCERS, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	r = probes_read_every_producer(manager_probes(m), c);
	if (r < 0)
		return log_warning_errno(r, "Failed to read %s/counters: %m", manager_pin_path(m));
	for (size_t i = 0; i < PERFRELAY_MAX_PRODUCERS; i++)
		ret[i] = c[i].failures;
	return 0;
}

static int read_units(Manager *m, UnitCount **ret, size_t *ret_n) {
	struct perfrelay_counters full;
	int r = probes_read_unit_counts(manager_probes(m), ret, ret_n, &full);

	if (r < 0)
		return log_warning_errno(r, "Failed to read %s/unit_counts: %m", manager_pin_path(m));
	qsort(*ret, *ret_n, sizeof(**ret), unit_count_cmp);
	return 0;
}

/* The throttle's buckets now, by cgroup, each with its episode as the last look left it. */
static int read_throttle(Manager *m, const Notices *n, NoticeThrottle **ret, size_t *ret_n) {
	_cleanup_free_ UnitThrottled *t = NULL;
	NoticeThrottle *out;
	size_t n_t;
	int r = probes_read_throttled(manager_probes(m), &t, &n_t);

	if (r < 0)
		return log_warning_errno(r, "Failed to read %s/throttle: %m", manager_pin_path(m));
	out = calloc(n_t ?: 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n_t; i++) {
		NoticeThrottle key = { .cgroup_id = t[i].cgroup_id }, *prev = NULL;

		if (n->n_throttle > 0)
			prev = bsearch(&key, n->throttle, n->n_throttle, sizeof(key), by_throttle_cgroup);
		out[i] = prev ? *prev : key;
		out[i].last = prev ? prev->throttled : 0;
		out[i].throttled = t[i].throttled;
	}
	qsort(out, n_t, sizeof(*out), by_throttle_cgroup);
	*ret = out;
	*ret_n = n_t;
	return 0;
}

/* What was lost and refused before now is no news. */
static void notices_baseline(Manager *m, Notices *n) {
	NoticeThrottle *t = NULL;
	size_t n_t = 0;

	if (read_failures(m, n->failures) < 0)
		return;
	free(n->units);
	n->units = NULL;
	n->n_units = 0;
	if (read_units(m, &n->units, &n->n_units) < 0 || read_throttle(m, n, &t, &n_t) < 0)
		return;
	for (size_t i = 0; i < n_t; i++)
		t[i].last = t[i].throttled;
	free(n->throttle);
	n->throttle = t;
	n->n_throttle = n_t;
	n->ready = true;
}

int notices_init(Manager *m, Notices *n) {
	*n = (Notices){};
	n->failures = calloc(PERFRELAY_MAX_PRODUCERS, sizeof(*n->failures));
	if (!n->failures)
		return log_oom();
	notices_baseline(m, n); /* or at the first tick, if the maps could not be read now */
	return 0;
}

void notices_done(Notices *n) {
	free(n->failures);
	free(n->units);
	free(n->throttle);
	*n = (Notices){};
}

static void add_u64(json_object *o, const char *key, uint64_t v) {
	json_object_object_add(o, key, json_object_new_uint64(v));
}

/* A cgroup in a notice: its id and unit, unless the notice is for a client that sees its own
 * uid's events only (they name other users' work), and its count. */
static json_object *unit_json(Manager *m, uint64_t cgroup_id, const char *key, uint64_t count, bool redact) {
	json_object *o = json_object_new_object();
	char buf[256];
	const char *unit;

	if (!o)
		return NULL;
	if (!redact) {
		add_u64(o, "cgroup_id", cgroup_id);
		unit = manager_cgroup_unit(m, cgroup_id, buf, sizeof(buf), NULL, NULL);
		if (unit)
			json_object_object_add(o, "unit", json_object_new_string(unit));
	}
	if (key)
		add_u64(o, key, count);
	return o;
}

static json_object *notice_head(const uint16_t *types, size_t n_types) {
	json_object *o = json_object_new_object(), *a = json_object_new_array();

	if (!o || !a) {
		json_object_put(o);
		json_object_put(a);
		return NULL;
	}
	json_object_object_add(o, "type", json_object_new_string("lost"));
	add_u64(o, "count", 0);
	for (size_t i = 0; i < n_types; i++) {
		const char *name = event_type_to_string(types[i]);

		json_object_array_add(a, name ? json_object_new_string(name) : json_object_new_int(types[i]));
	}
	json_object_object_add(o, "types", a);
	return o;
}

/* Offers the notice (full, and for "uid" clients redacted) to the slot's clients. */
static void
	publish(Manager *m,
		Notices *n,
		unsigned slot,
		const uint16_t *types,
		size_t n_types,
		bool third_party,
		json_object *full,
		json_object *red) {
	const int flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;
	const char *a = full ? json_object_to_json_string_ext(full, flags) : NULL;
	const char *b = red ? json_object_to_json_string_ext(red, flags) : NULL;
	HubNotice hn;

	if (!a || !b) {
		log_oom();
		return;
	}
	hn = (HubNotice){
		.types = types,
		.n_types = n_types,
		.third_party = third_party,
		.json = a,
		.json_len = strlen(a),
		.json_redacted = b,
		.json_redacted_len = strlen(b),
	};
	manager_publish_notice(m, slot, &hn, &n->delivery);
}

/* The types of a producer's records, or none (third_party: a third party's, whose types the
 * scan knows, not the counters). */
static size_t producer_types(uint32_t producer, uint16_t *types, bool *third_party) {
	int probe = probe_of_producer(producer);

	*third_party = false;
	if (probe >= 0)
		types[0] = probe_type((unsigned) probe);
	else if (producer == PERFRELAY_PRODUCER_CAPTURE)
		types[0] = PERFRELAY_TYPE_PACKET;
	else if (producer == PERFRELAY_PRODUCER_BENCH)
		types[0] = PERFRELAY_TYPE_BENCH;
	else {
		*third_party = true;
		return 0;
	}
	return 1;
}

/* The NOTICE_UNITS_MAX cgroups of `producer` that lost most between `prev` and `cur`, largest
 * first; returns how many, and their sum over every cgroup in *ret_sum. */
static size_t top_losers(
	const UnitCount *prev,
	size_t n_prev,
	const UnitCount *cur,
	size_t n_cur,
	uint32_t producer,
	UnitLoss *top,
	uint64_t *ret_sum) {
	size_t n_top = 0;
	uint64_t sum = 0;

	for (size_t i = 0; i < n_cur; i++) {
		const UnitCount *p;
		UnitLoss l;
		size_t k;

		if (cur[i].producer != producer)
			continue;
		p = n_prev > 0 ? bsearch(&cur[i], prev, n_prev, sizeof(*prev), unit_count_cmp) : NULL;
		/* Below the last look: the map was made again (its counts start over). */
		l = (UnitLoss){ .cgroup_id = cur[i].cgroup_id,
				.lost = p && cur[i].failures >= p->failures ? cur[i].failures - p->failures :
									      cur[i].failures };
		if (l.lost == 0)
			continue;
		sum += l.lost;
		for (k = n_top; k > 0 && top[k - 1].lost < l.lost; k--)
			if (k < NOTICE_UNITS_MAX)
				top[k] = top[k - 1];
		if (k < NOTICE_UNITS_MAX) {
			top[k] = l;
			n_top = MIN(n_top + 1, (size_t) NOTICE_UNITS_MAX);
		}
	}
	*ret_sum = sum;
	return n_top;
}

static json_object *kernel_json(
	Manager *m,
	uint32_t producer,
	uint64_t lost,
	const uint16_t *types,
	size_t n_types,
	const UnitLoss *top,
	size_t n_top,
	bool redact) {
	json_object *o = notice_head(types, n_types), *a;
	uint64_t listed = 0;

	if (!o)
		return NULL;
	add_u64(o, "kernel", lost);
	add_u64(o, "producer", producer);
	a = json_object_new_array();
	for (size_t i = 0; a && i < n_top; i++) {
		json_object_array_add(a, unit_json(m, top[i].cgroup_id, "lost", top[i].lost, redact));
		listed += top[i].lost;
	}
	json_object_object_add(o, "units", a);
	/* In cgroups not listed, or counted in none (the map was full, or the producer counts
	 * per cgroup not at all). */
	add_u64(o, "other", lost > listed ? lost - listed : 0);
	return o;
}

static void kernel_notices(Manager *m, Notices *n, unsigned slot, const uint64_t *failures) {
	_cleanup_free_ UnitCount *cur = NULL;
	size_t n_cur = 0;

	if (read_units(m, &cur, &n_cur) < 0)
		n_cur = 0; /* the loss is told all the same, without its cgroups */
	for (uint32_t p = 0; p < PERFRELAY_MAX_PRODUCERS; p++) {
		UnitLoss top[NOTICE_UNITS_MAX];
		uint16_t types[1];
		bool third_party;
		size_t n_top, n_types;
		uint64_t lost, in_units;
		json_object *full, *red;

		if (failures[p] <= n->failures[p])
			continue;
		lost = failures[p] - n->failures[p];
		n_types = producer_types(p, types, &third_party);
		n_top = top_losers(n->units, n->n_units, cur, n_cur, p, top, &in_units);
		full = kernel_json(m, p, lost, types, n_types, top, n_top, false);
		red = kernel_json(m, p, lost, types, n_types, top, n_top, true);
		publish(m, n, slot, types, n_types, third_party, full, red);
		json_object_put(full);
		json_object_put(red);
		n->kernel++;
	}
	if (cur) {
		free(n->units);
		n->units = TAKE_PTR(cur);
		n->n_units = n_cur;
	}
}

/* What a tick saw of the throttle: episodes that started and that ended, NOTICE_THROTTLE_MAX
 * of each named, the rest counted. */
typedef struct ThrottleNews {
	UnitLoss started[NOTICE_THROTTLE_MAX], stopped[NOTICE_THROTTLE_MAX];
	size_t n_started, n_stopped;
	uint64_t more_started, more_stopped;
} ThrottleNews;

static void news_add(UnitLoss *list, size_t *n, uint64_t *more, uint64_t cgroup_id, uint64_t count) {
	if (*n < NOTICE_THROTTLE_MAX)
		list[(*n)++] = (UnitLoss){ .cgroup_id = cgroup_id, .lost = count };
	else
		(*more)++;
}

/* The episode of bucket e ended: with what it refused since it began. */
static void news_stopped(ThrottleNews *news, const NoticeThrottle *e) {
	news_add(news->stopped, &news->n_stopped, &news->more_stopped, e->cgroup_id, e->throttled - e->base);
}

static json_object *throttle_json(Manager *m, const ThrottleNews *news, bool redact) {
	json_object *o = notice_head(throttled_types, ELEMENTSOF(throttled_types)),
		    *th = json_object_new_object();
	json_object *started = json_object_new_array(), *stopped = json_object_new_array();

	if (!o || !th || !started || !stopped) {
		json_object_put(o);
		json_object_put(th);
		json_object_put(started);
		json_object_put(stopped);
		return NULL;
	}
	for (size_t i = 0; i < news->n_started; i++)
		json_object_array_add(started, unit_json(m, news->started[i].cgroup_id, NULL, 0, redact));
	for (size_t i = 0; i < news->n_stopped; i++)
		json_object_array_add(
			stopped,
			unit_json(m, news->stopped[i].cgroup_id, "throttled", news->stopped[i].lost, redact));
	json_object_object_add(th, "started", started);
	json_object_object_add(th, "stopped", stopped);
	add_u64(th, "more_started", news->more_started);
	add_u64(th, "more_stopped", news->more_stopped);
	json_object_object_add(o, "throttle", th);
	return o;
}

/* Throttle episodes: a cgroup whose bucket refused records since the last look, and was not
 * refusing before, starts one; one that refused none since ends it, and the notice says what it
 * refused in all. A bucket that is gone (pruned: its cgroup was removed) ends its episode too. */
static void throttle_notices(Manager *m, Notices *n, unsigned slot, bool on) {
	_cleanup_free_ NoticeThrottle *cur = NULL;
	ThrottleNews news = {};
	size_t n_cur = 0;
	bool active = false;
	json_object *full, *red;

	for (size_t i = 0; i < n->n_throttle && !active; i++)
		active = n->throttle[i].active;
	if (!on && !active)
		return; /* off, and nothing left to end */
	if (read_throttle(m, n, &cur, &n_cur) < 0)
		return;
	for (size_t i = 0; i < n_cur; i++) {
		NoticeThrottle *e = &cur[i];
		/* Below the last look: the bucket was made again; all it holds is new. */
		bool moved = e->throttled != e->last && e->throttled > 0;

		if (e->throttled < e->last)
			e->base = 0;
		if (moved && !e->active) {
			e->active = true;
			e->base = e->throttled < e->last ? 0 : e->last;
			news_add(news.started, &news.n_started, &news.more_started, e->cgroup_id, 0);
		} else if (!moved && e->active) {
			e->active = false;
			news_stopped(&news, e);
		}
	}
	for (size_t i = 0; i < n->n_throttle; i++) {
		const NoticeThrottle *e = &n->throttle[i];

		if (e->active && !bsearch(e, cur, n_cur, sizeof(*cur), by_throttle_cgroup))
			news_stopped(&news, e);
	}
	free(n->throttle);
	n->throttle = TAKE_PTR(cur);
	n->n_throttle = n_cur;
	if (news.n_started + news.more_started + news.n_stopped + news.more_stopped == 0)
		return;
	n->throttle_started += news.n_started + news.more_started;
	n->throttle_stopped += news.n_stopped + news.more_stopped;
	full = throttle_json(m, &news, false);
	red = throttle_json(m, &news, true);
	publish(m, n, slot, throttled_types, ELEMENTSOF(throttled_types), false, full, red);
	json_object_put(full);
	json_object_put(red);
}

void notices_tick(Manager *m, Notices *n, unsigned slot, bool throttle) {
	_cleanup_free_ uint64_t *failures = NULL;
	bool moved = false;

	if (!n->failures)
		return; /* notices_init() failed */
	if (!n->ready) {
		notices_baseline(m, n);
		return;
	}
	failures = calloc(PERFRELAY_MAX_PRODUCERS, sizeof(*failures));
	if (!failures || read_failures(m, failures) < 0)
		return;
	for (size_t i = 0; i < PERFRELAY_MAX_PRODUCERS && !moved; i++)
		moved = failures[i] > n->failures[i];
	if (moved)
		kernel_notices(m, n, slot, failures);
	memcpy(n->failures, failures, PERFRELAY_MAX_PRODUCERS * sizeof(*failures));
	throttle_notices(m, n, slot, throttle);
}
