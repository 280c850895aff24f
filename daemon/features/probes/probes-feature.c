/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The built-in probes at run time: which are attached (Probes=, and with OnDemand= only while a
 * consumer wants their records: docs/pipeline.md, "Demand"), the pinned demand map the probes
 * read first (the types nobody wants, ExcludeComms=, ExcludePaths=), what each probe costs
 * (BPF_ENABLE_STATS), the Probes property, ListProbes(), SetProbeEnabled() (root only) and
 * GetStats()' "probes". The probes' programs and pins are the core's (probes.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/bus-figures.h"
#include "features/feature-table.h"
#include "core/manager.h"
#include "base/log.h"
#include "features/probes/probes-config.h"
#include "features/probes/probes-notices.h"
#include "features/probes/probes-units.h"
#include "time-util.h"

/* How long a probe nobody wants any more stays attached (its records counted as filtered)
 * before it is detached: a client that reconnects does not flip a tracepoint on and off, and
 * a user's connect loop cannot make the host patch its kernel text (the static key behind a
 * tracepoint) at the loop's rate. */
#define PROBES_LINGER_USEC (2 * USEC_PER_SEC)

/* Why a probe is attached or not, for perfrelayctl probes and GetStats(). */
typedef enum ProbeState {
	PROBE_STATE_ATTACHED,
	PROBE_STATE_UNWANTED,   /* attached, nobody wants it: detached once it lingered */
	PROBE_STATE_OFF_CONFIG, /* not in Probes= */
	PROBE_STATE_OFF_BUS,    /* SetProbeEnabled(false) */
	PROBE_STATE_OFF_DEMAND, /* OnDemand=yes and no consumer wants its records */
	PROBE_STATE_FAILED,     /* it should be attached, and attaching failed */
	_PROBE_STATE_MAX,
} ProbeState;

static const char *const probe_state_table[_PROBE_STATE_MAX] = {
	[PROBE_STATE_ATTACHED] = "attached",     [PROBE_STATE_UNWANTED] = "unwanted",
	[PROBE_STATE_OFF_CONFIG] = "off-config", [PROBE_STATE_OFF_BUS] = "off-bus",
	[PROBE_STATE_OFF_DEMAND] = "off-demand", [PROBE_STATE_FAILED] = "failed",
};

typedef struct ProbesFeature {
	Feature feature;
	bool started;                        /* start() ran: demand changes are applied */
	bool stopping;                       /* quiesce() ran: probes stay as they are (pinned links) */
	uint32_t forced_on, forced_off;      /* SetProbeEnabled(), bits PROBE_*, until the next reload */
	uint64_t unwanted_since[_PROBE_MAX]; /* CLOCK_MONOTONIC µs it lost its last consumer, or 0 */
	ProbeState state[_PROBE_MAX];
	sd_event_source *linger;   /* the next unwanted probe's detach */
	uint64_t stats_since;      /* CLOCK_MONOTONIC µs this daemon turned BPF_ENABLE_STATS on, or 0 */
	UnitsPruned units_pruned;  /* "unit_counts" entries of removed cgroups, taken out */
	uint64_t excluded_cgroups; /* ExcludeUnits=: the cgroup ids in the demand map now */
	Notices notices;           /* the streams' notices of loss and throttling */
} ProbesFeature;

/* ExcludeUnits=: the units' own cgroup directories into the demand map. A unit that restarts
 * gets a new directory (a new id): the tick looks again every second, so its first second's
 * records may be made (not filtered) until then. */
static void probes_sync_units(ProbesFeature *pf) {
	Manager *m = pf->feature.manager;
	const ProbesConfig *pc = config_part(manager_config(m), &probes_config);
	const char *names[PERFRELAY_DEMAND_UNITS];
	uint64_t ids[PERFRELAY_DEMAND_UNIT_IDS];
	size_t n = 0;

	for (uint32_t i = 0; i < pc->exclude_units.n && i < PERFRELAY_DEMAND_UNITS; i++)
		names[i] = pc->exclude_units.units[i];
	if (pc->exclude_units.n > 0)
		n = cgroup_watch_unit_dirs(
			manager_cgroup_watch(m), names, pc->exclude_units.n, ids, ELEMENTSOF(ids));
	if (probes_set_excluded_cgroups(manager_probes(m), ids, n))
		log_debug("ExcludeUnits=: %zu cgroups excluded now", n);
	pf->excluded_cgroups = n;
}

static uint32_t probe_mask(const Manager *m) {
	uint32_t mask = 0;

	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(manager_probes(m), i))
			mask |= 1u << i;
	return mask;
}

static int probes_sync(ProbesFeature *pf);

static int on_linger(sd_event_source *s, uint64_t usec, void *userdata) {
	(void) probes_sync(userdata);
	return 0;
}

/* Arms the linger timer for the earliest unwanted probe's detach. */
static void linger_arm(ProbesFeature *pf, uint64_t deadline) {
	Manager *m = pf->feature.manager;
	int r;

	if (!pf->linger) {
		r = sd_event_add_time(
			manager_event(m), &pf->linger, CLOCK_MONOTONIC, deadline, 0, on_linger, pf);
		if (r < 0)
			log_warning_errno(r, "Failed to arm the probes' linger timer: %m");
		return;
	}
	(void) sd_event_source_set_time(pf->linger, deadline);
	(void) sd_event_source_set_enabled(pf->linger, SD_EVENT_ONESHOT);
}

/* Makes the attached probes and the demand map what the configuration, SetProbeEnabled() and
 * the consumers' demand say. The order keeps every wanted record: the demand map clears a type's
 * bit before its probe is attached (and before the caller acknowledges the subscription that
 * wants it), and a probe nobody wants is detached after its bit is set. */
static int probes_sync(ProbesFeature *pf) {
	Manager *m = pf->feature.manager;
	const ProbesConfig *pc = config_part(manager_config(m), &probes_config);
	Probes *p = manager_probes(m);
	uint32_t attached = probe_mask(m);
	uint64_t demand = pc->on_demand ? manager_demand(m) : UINT64_MAX, unwanted = 0;
	uint64_t now = now_usec(CLOCK_MONOTONIC), next = 0;
	bool attach[_PROBE_MAX] = {};
	int ret = 0;

	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		uint32_t bit = 1u << i;
		bool allowed = ((pc->probes | pf->forced_on) & bit) && !(pf->forced_off & bit);
		bool wanted = (demand & (UINT64_C(1) << probe_type(i))) || (pf->forced_on & bit);

		if (!wanted)
			unwanted |= UINT64_C(1) << probe_type(i);
		if (wanted || !(attached & bit))
			pf->unwanted_since[i] = 0;
		if (!allowed) {
			pf->state[i] = pf->forced_off & bit ? PROBE_STATE_OFF_BUS : PROBE_STATE_OFF_CONFIG;
			continue;
		}
		if (wanted) {
			attach[i] = true;
			pf->state[i] = PROBE_STATE_ATTACHED;
			continue;
		}
		pf->state[i] = PROBE_STATE_OFF_DEMAND;
		if (!(attached & bit))
			continue;
		if (pf->unwanted_since[i] == 0)
			pf->unwanted_since[i] = now;
		if (now < pf->unwanted_since[i] + PROBES_LINGER_USEC) {
			attach[i] = true;
			pf->state[i] = PROBE_STATE_UNWANTED;
			if (next == 0 || pf->unwanted_since[i] + PROBES_LINGER_USEC < next)
				next = pf->unwanted_since[i] + PROBES_LINGER_USEC;
		}
	}

	probes_set_unwanted(p, unwanted);
	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		int r;

		/* At start, a probe that stays off may still have the pinned links of an earlier
		 * daemon, which keep it attached: detaching removes them. */
		if (attach[i] == probes_is_enabled(p, i) && (attach[i] || pf->started))
			continue;
		r = probes_set_enabled(p, i, attach[i]);
		if (r < 0) {
			log_error_errno(
				r,
				"Failed to %s probe %s: %m",
				attach[i] ? "attach" : "detach",
				probe_to_string(i));
			if (attach[i])
				pf->state[i] = PROBE_STATE_FAILED;
			ret = ret ?: r;
			continue;
		}
		if (pf->started)
			log_info(
				"Probe %s %s%s",
				probe_to_string(i),
				attach[i] ? "attached" : "detached",
				pf->state[i] == PROBE_STATE_OFF_DEMAND ? " (no consumer wants its records)" :
									 "");
	}
	if (next != 0)
		linger_arm(pf, next);
	if (probe_mask(m) != attached)
		bus_emit_manager_changed(manager_bus(m), STRV_MAKE("Probes"));
	return ret;
}

static void probes_demand_changed(Feature *f) {
	ProbesFeature *pf = (ProbesFeature *) f;

	if (pf->started && !pf->stopping)
		(void) probes_sync(pf);
}

static int probes_start(Feature *f) {
	ProbesFeature *pf = (ProbesFeature *) f;
	Manager *m = f->manager;
	const ProbesConfig *pc = config_part(manager_config(m), &probes_config);
	Probes *p = manager_probes(m);
	int r;

	if (pc->run_stats) {
		r = probes_enable_run_stats(p);
		if (r < 0)
			log_notice_errno(
				r,
				"Cannot count what the probes cost (BPF_ENABLE_STATS, Linux 5.8): %m; RunStats= off");
		else
			pf->stats_since = now_usec(CLOCK_MONOTONIC);
	}
	probes_set_exclusions(p, &pc->exclude_comms, &pc->exclude_paths);
	probes_set_unit_rate(p, pc->max_events_per_unit_per_sec);
	probes_sync_units(pf);
	r = notices_init(m, &pf->notices);
	if (r < 0)
		return r;
	r = probes_sync(pf);
	pf->started = true;
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(p, i))
			log_info(
				"Probe %s attached%s",
				probe_to_string(i),
				probes_was_reused(p, i) ? " (pinned links reused)" : "");
	return 0;
}

static void probes_quiesce(Feature *f) {
	ProbesFeature *pf = (ProbesFeature *) f;

	pf->stopping = true;
	pf->linger = sd_event_source_disable_unref(pf->linger);
}

static void probes_done(Feature *f) {
	ProbesFeature *pf = (ProbesFeature *) f;

	pf->linger = sd_event_source_disable_unref(pf->linger);
	notices_done(&pf->notices);
}

/* A reload applies Probes= again: SetProbeEnabled() holds until then. */
static int probes_reload(Feature *f) {
	ProbesFeature *pf = (ProbesFeature *) f;
	const ProbesConfig *pc = config_part(manager_config(f->manager), &probes_config);

	pf->forced_on = pf->forced_off = 0;
	probes_set_exclusions(manager_probes(f->manager), &pc->exclude_comms, &pc->exclude_paths);
	probes_set_unit_rate(manager_probes(f->manager), pc->max_events_per_unit_per_sec);
	probes_sync_units(pf);
	/* probes_sync() logged which probe; the rest is applied all the same. */
	return probes_sync(pf);
}

/* Attaches or detaches a built-in probe until the next reload or restart (which apply Probes=
 * again), whatever the demand. */
static int probes_set_one(ProbesFeature *pf, unsigned probe, bool enabled) {
	if (probe >= _PROBE_MAX)
		return -EINVAL;
	pf->forced_on = enabled ? pf->forced_on | (1u << probe) : pf->forced_on & ~(1u << probe);
	pf->forced_off = enabled ? pf->forced_off & ~(1u << probe) : pf->forced_off | (1u << probe);
	return probes_sync(pf);
}

static int property_get_probes(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Feature *f = userdata;
	Probes *p = manager_probes(f->manager);
	int r;

	r = sd_bus_message_open_container(reply, 'a', "s");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(p, i)) {
			r = sd_bus_message_append(reply, "s", probe_to_string(i));
			if (r < 0)
				return r;
		}
	return sd_bus_message_close_container(reply);
}

static int method_list_probes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	Feature *f = userdata;
	Probes *p = manager_probes(f->manager);
	int r;

	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(sbt)");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		struct perfrelay_counters sum;

		r = probes_read_counters(p, probe_producer(i), &sum, NULL);
		if (r < 0)
			return sd_bus_error_set_errnof(
				error, r, "Failed to read the counters of probe %s: %m", probe_to_string(i));
		r = sd_bus_message_append(
			reply, "(sbt)", probe_to_string(i), (int) probes_is_enabled(p, i), sum.attempts);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_set_probe_enabled(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	ProbesFeature *pf = userdata;
	const char *name;
	int enabled, probe, r;

	r = sd_bus_message_read(message, "sb", &name, &enabled);
	if (r < 0)
		return r;
	r = bus_check_root(message, "SetProbeEnabled", error);
	if (r < 0)
		return r;
	probe = probe_from_string(name);
	if (probe < 0) {
		char known[128] = "";

		for (unsigned i = 0; i < _PROBE_MAX; i++) {
			size_t n = strlen(known);

			snprintf(known + n, sizeof(known) - n, "%s%s", n ? " " : "", probe_to_string(i));
		}
		return sd_bus_error_setf(
			error, SD_BUS_ERROR_INVALID_ARGS, "Unknown probe \"%s\" (known: %s)", name, known);
	}
	r = probes_set_one(pf, (unsigned) probe, enabled);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to %s probe %s: %m", enabled ? "attach" : "detach", name);
	return sd_bus_reply_method_return(message, NULL);
}

/* clang-format off */
static const sd_bus_vtable probes_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_PROPERTY("Probes", "as", property_get_probes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	SD_BUS_METHOD_WITH_NAMES("ListProbes",
	                         NULL, "",
	                         "a(sbt)", SD_BUS_PARAM(probes),
	                         method_list_probes, SD_BUS_VTABLE_UNPRIVILEGED),
	/* UNPRIVILEGED only keeps sd-bus from applying its own CAP_SYS_ADMIN check: the method
	 * checks the sender's uid itself (bus_check_root()). */
	SD_BUS_METHOD_WITH_NAMES("SetProbeEnabled",
	                         "sb", SD_BUS_PARAM(name) SD_BUS_PARAM(enabled),
	                         NULL, "",
	                         method_set_probe_enabled, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

/* "probes": per probe its state, the records its demand check skipped and what its programs
 * ran (docs/dbus.md). */
static int append_probe(ProbesFeature *pf, sd_bus_message *m, unsigned i) {
	Probes *p = manager_probes(pf->feature.manager);
	struct perfrelay_counters sum = {};
	ProbeRunStats run = {};
	uint64_t filtered = 0;
	int r;

	r = probes_read_counters(p, probe_producer(i), &sum, NULL);
	if (r >= 0)
		r = probes_read_filtered(p, probe_producer(i), &filtered);
	if (r >= 0 && pf->stats_since)
		r = probes_read_run_stats(p, i, &run);
	if (r >= 0)
		r = open_section(m, probe_to_string(i));
	if (r >= 0)
		r = sd_bus_message_append(
			m,
			"{sv}{sv}",
			"state",
			"s",
			probe_state_table[pf->state[i]],
			"attached",
			"b",
			(int) probes_is_enabled(p, i));
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "hits", filtered + sum.attempts },
			{ "filtered", filtered },
			{ "attempts", sum.attempts },
			{ "runs", run.runs },
			{ "run_ns", run.run_ns });
	return r < 0 ? r : close_entry(m);
}

static int probes_stats_append(Feature *f, sd_bus_message *m) {
	ProbesFeature *pf = (ProbesFeature *) f;
	int r = open_section(m, "probes");

	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "run_stats_since_usec", pf->stats_since },
			{ "excluded_cgroups", pf->excluded_cgroups },
			{ "unwanted", probes_unwanted(manager_probes(f->manager)) },
			{ "notices_kernel", pf->notices.kernel },
			{ "notices_throttle_started", pf->notices.throttle_started },
			{ "notices_throttle_stopped", pf->notices.throttle_stopped },
			{ "notices_delivered", pf->notices.delivery.delivered },
			{ "notices_dropped", pf->notices.delivery.dropped });
	for (unsigned i = 0; r >= 0 && i < _PROBE_MAX; i++)
		r = append_probe(pf, m, i);
	if (r >= 0)
		r = close_entry(m);
	return r < 0 ? r : units_stats_append(f->manager, m, &pf->units_pruned);
}

static void probes_tick(Feature *f) {
	ProbesFeature *pf = (ProbesFeature *) f;
	const ProbesConfig *pc = config_part(manager_config(f->manager), &probes_config);
	uint64_t now = now_usec(CLOCK_MONOTONIC);

	if (pc->exclude_units.n > 0)
		probes_sync_units(pf);
	notices_tick(f->manager, &pf->notices, f->hub_slot, pc->max_events_per_unit_per_sec > 0);
	if (now - pf->units_pruned.last_usec < UNITS_PRUNE_USEC)
		return;
	pf->units_pruned.last_usec = now;
	units_prune(f->manager, &pf->units_pruned);
}

/* The streams' notices (probes-notices.h) come from the main thread. */
static bool probes_wants_hub_slot(const Config *c) {
	return true;
}

const FeatureVtable probes_feature = {
	.name = "probes",
	.object_size = sizeof(ProbesFeature),
	.config = &probes_config,
	.wants_hub_slot = probes_wants_hub_slot,
	.start = probes_start,
	.quiesce = probes_quiesce,
	.done = probes_done,
	.reload = probes_reload,
	.demand_changed = probes_demand_changed,
	.bus_vtable = probes_bus_vtable,
	.stats_append = probes_stats_append,
	.tick = probes_tick,
};
