/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager: start-up order, the rings and readers, the flush loop of client output, the
 * event loop and shutdown. Its other parts: manager-api.c (what features use), manager-bus.c,
 * manager-cpu.c, manager-features.c (the features' hooks), manager-health.c, manager-reload.c
 * and manager-stats.c. */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <systemd/sd-daemon.h>

#include "perfrelay-config.h"

#include "api/bus.h"
#include "kernel/cgroup.h"
#include "kernel/grace.h"
#include "kernel/kernel-features.h"
#include "kernel/ledger.h"
#include "base/log.h"
#include "core/manager.h"
#include "kernel/pins.h"
#include "api/server.h"
#include "core/stats.h"
#include "core/manager-internal.h"
#include "kernel/topology.h"
#include "time-util.h"

int manager_new(const ManagerOptions *o, const FeatureVtable *const *features, size_t n_features, Manager **ret) {
	_cleanup_free_ char *error = NULL;
	_cleanup_(manager_freep) Manager *m = NULL;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->o = *o;
	m->state = MANAGER_STARTING;
	m->started_at = now_usec(CLOCK_REALTIME);
	if (asprintf(&m->dropin_dir, "%s.d", o->config_path) < 0) {
		m->dropin_dir = NULL;
		return -ENOMEM;
	}

	/* The features first: their sections are part of the configuration. */
	r = manager_features_new(m, features, n_features);
	if (r < 0)
		return log_oom();
	r = config_new(m->config_parts, m->n_config_parts, &m->config);
	if (r >= 0)
		r = config_load(m->config, o->config_path, m->dropin_dir, &error);
	if (r < 0) {
		if (error)
			log_error("%s", error);
		return error ? r : log_error_errno(r, "Failed to load configuration %s: %m", o->config_path);
	}
	if (o->pin_path) {
		free(m->config->pin_path);
		m->config->pin_path = strdup(o->pin_path);
		if (!m->config->pin_path)
			return -ENOMEM;
	}

	r = sd_event_default(&m->event);
	if (r < 0)
		return log_error_errno(r, "Failed to allocate event loop: %m");
	*ret = TAKE_PTR(m);
	return 0;
}

/* Writes the pinned "idle" flag that producers check before they build a record. */
static int manager_set_idle(Manager *m, bool idle) {
	uint32_t key = 0, v = idle;

	if (bpf_map_update_elem(probes_idle_fd(m->probes), &key, &v, BPF_ANY) < 0)
		return log_warning_errno(
			negative_errno(),
			"Failed to %s the idle flag under %s: %m",
			idle ? "set" : "clear",
			m->config->pin_path);
	return 0;
}

/* Empties every slot of the array and waits until no emitter can still be writing into a
 * ring it found there. Returns 0 once nothing can write any more. */
static int manager_clear_slots(Manager *m) {
	const struct {
		int fd;
		const char *name;
	} arrays[] = {
		{ probes_events_fd(m->probes), "events" },
		{ probes_critical_fd(m->probes), "critical" },
	};
	const char *how = NULL;
	int r = 0;

	for (size_t a = 0; a < ELEMENTSOF(arrays); a++)
		for (unsigned cpu = 0; cpu < probes_possible_cpus(m->probes); cpu++) {
			uint32_t key = cpu;

			if (bpf_map_delete_elem(arrays[a].fd, &key) < 0 && errno != ENOENT)
				r = log_error_errno(
					negative_errno(),
					"Failed to clear slot %u of %s/%s: %m",
					cpu,
					m->config->pin_path,
					arrays[a].name);
		}
	if (r < 0)
		return r;
	r = grace_period(&how);
	if (r < 0)
		return log_error_errno(
			r,
			"Failed to wait for the BPF programs in flight (membarrier and a "
			"map-in-map update both failed): %m");
	log_debug(
		"Cleared the slots of %s/events and %s/critical and waited out the emitters in flight (%s)",
		m->config->pin_path,
		m->config->pin_path,
		how);
	return 0;
}

/* Stop, and failed start-up: producers are told no daemon serves (they then count their
 * attempts as failures without building records), the slots are cleared (emits that did not
 * see the flag fail in the kernel, counted too), and the emits already writing are waited
 * out. After this the readers can drain the rings to empty: no record can arrive that no
 * counter sees. */
static void manager_quiesce(Manager *m) {
	if (!m->serving)
		return;
	(void) manager_set_idle(m, true);
	manager_features_quiesce(m); /* their writes in flight are waited out with the others */
	m->quiesced = manager_clear_slots(m) >= 0;
	m->serving = false;
}

static void manager_stop_readers(Manager *m) {
	manager_quiesce(m);
	for (size_t i = 0; i < m->n_readers; i++)
		reader_stop(m->readers[i], m->quiesced);
}

Manager *manager_free(Manager *m) {
	if (!m)
		return NULL;
	manager_stop_readers(m);
	/* The probes stay as they are (pinned links) while the subscribers leave. */
	if (m->hub)
		hub_set_demand_fn(m->hub, NULL, NULL);
	sd_event_source_disable_unref(m->health_source);
	/* Subscribers leave the hub before it goes; the features' bus objects with the bus. */
	manager_free_bus(m);
	m->server = server_free(m->server); /* the features done() below may still ask for it */
	sd_event_source_unref(m->notify_source);
	for (size_t i = 0; i < m->n_readers; i++)
		reader_free(m->readers[i]);
	free(m->readers);
	manager_features_done(m); /* the readers have stopped */
	manager_features_free(m);
	decoders_free(m->decoders);
	cgroup_fs_free(m->cgroups);
	cgroup_watch_free(m->cgroup_watch);
	hub_free(m->hub);
	ledger_free(m->ledger);
	probes_free(m->probes);
	kernel_features_free(m->kernel);
	sd_event_unref(m->event);
	config_free(m->config);
	free(m->config_parts);
	free(m->dropin_dir);
	free(m);
	return NULL;
}

static int manager_open_rings(Manager *m, const CpuSet *groups, size_t n_groups) {
	const Config *c = m->config;
	RingOptions ro = manager_ring_options(m);
	const char *array = NULL;
	int r;

	m->readers = calloc(n_groups, sizeof(Reader *));
	if (!m->readers)
		return -ENOMEM;

	for (size_t g = 0; g < n_groups; g++) {
		unsigned n = cpuset_count(&groups[g]), i = 0;
		Ring **rings = calloc(n, sizeof(Ring *));

		if (!rings)
			return -ENOMEM;
		FOREACH_CPU(cpu, &groups[g]) {
			if (cpuset_contains(&m->cpus_parked, cpu)) {
				/* Offline: no perf event can be opened there yet; the slot stays empty. */
				rings[i++] = NULL;
				cpuset_add(&m->cpus, cpu);
				continue;
			}
			r = ring_open(cpu, &ro, &rings[i]);
			if (r < 0) {
				for (unsigned k = 0; k < i; k++)
					ring_free(rings[k]);
				free(rings);
				return log_error_errno(
					r,
					"Failed to open the perf rings of CPU %d (%u pages, %u for the "
					"protected lane): %m",
					cpu,
					ro.pages,
					ro.lane_pages);
			}
			i++;
			/* From the first ring on, a stop or a failed start must quiesce. */
			m->serving = true;
			r = manager_store_ring(m, (unsigned) cpu, rings[i - 1], &array);
			if (r < 0) {
				for (unsigned k = 0; k < i; k++)
					ring_free(rings[k]);
				free(rings);
				return log_error_errno(
					r,
					"Failed to store the ring of CPU %d in %s/%s: %m",
					cpu,
					c->pin_path,
					array);
			}
			cpuset_add(&m->cpus, cpu);
		}
		r = reader_new(
			g,
			&groups[g],
			rings,
			n,
			m->hub,
			m->cgroup_watch,
			m->ledger,
			c->flush_interval_ms,
			&m->readers[g]);
		if (r < 0)
			return log_error_errno(r, "Failed to set up reader %zu: %m", g);
		m->n_readers++;
	}
	return 0;
}

/* Before any ring of ours is installed: whatever a previous daemon left in the slots goes,
 * and what it did not read is counted. A daemon killed by SIGKILL leaves its perf events in
 * the array (BPF_F_PRESERVE_ELEMS), and they keep accepting records nobody will read. */
static int manager_settle(Manager *m) {
	uint64_t lost[PERFRELAY_MAX_PRODUCERS];
	int64_t total;
	int r;

	r = ledger_open(probes_received_fd(m->probes), probes_possible_cpus(m->probes), &m->ledger);
	if (r < 0)
		return log_error_errno(r, "Failed to map %s/received: %m", m->config->pin_path);
	r = manager_set_idle(m, true);
	if (r < 0)
		return r;
	r = manager_clear_slots(m);
	if (r < 0)
		return r;
	if (probes_counters_created(m->probes) && !probes_received_created(m->probes)) {
		log_notice(
			"%s/counters was made anew: resetting %s/received, whose figures matched the old one",
			m->config->pin_path,
			m->config->pin_path);
		ledger_reset(m->ledger);
	} else if (probes_received_created(m->probes) && !probes_counters_created(m->probes)) {
		total = ledger_adopt(m->ledger, probes_counters_fd(m->probes));
		if (total < 0)
			return log_error_errno(
				(int) total, "Failed to read %s/counters: %m", m->config->pin_path);
		log_notice(
			"Made %s/received beside existing counters: the %" PRIi64
			" records they say were "
			"accepted before are taken as received",
			m->config->pin_path,
			total);
	}
	total = ledger_settle(m->ledger, probes_counters_fd(m->probes), lost);
	if (total < 0)
		return log_error_errno((int) total, "Failed to read %s/counters: %m", m->config->pin_path);
	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		m->crash_lost_at_start[id] = lost[id];
		if (lost[id] > 0)
			log_warning(
				"Producer %u: %" PRIu64
				" records were lost in the rings of a daemon that "
				"ended without reading them (crash_lost)",
				id,
				lost[id]);
	}
	return 0;
}

static int manager_read_failures(void *userdata, uint32_t producer, uint64_t *ret) {
	Manager *m = userdata;
	struct perfrelay_counters sum;
	int r;

	r = probes_read_counters(m->probes, producer, &sum, NULL);
	if (r < 0)
		return r;
	*ret = sum.failures;
	return 0;
}

static int manager_clear_idle(void *userdata) {
	return manager_set_idle(userdata, false);
}

/* The pinned failure counts when we begin to serve: what fails from now on fails while this
 * daemon serves, what failed before is the downtime's (ledger_end_downtime() keeps the order
 * that never hides a serving failure among the downtime's). */
static void manager_mark_serving(Manager *m) {
	static const LedgerDowntimeOps ops = {
		.read_failures = manager_read_failures,
		.clear_idle = manager_clear_idle,
	};

	(void) ledger_end_downtime(&ops, m, m->failures_at_start);
}

static int on_hub_notify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	Manager *m = userdata;

	manager_flush(m);
	/* Scans the readers no longer use can go now. */
	(void) decoders_collect(m->decoders);
	return 0;
}

static void manager_flush_all(void *userdata) {
	manager_flush(userdata);
}

/* The readers decode third-party records with the scans of the producers feature; they hold
 * from their first record on the decoders it publishes in (reader_set_decoders()). */
static int manager_setup_decoders(Manager *m) {
	int r;

	r = decoders_new(m->n_readers, probes_possible_cpus(m->probes), &m->decoders);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the third-party decoders: %m");
	for (size_t i = 0; i < m->n_readers; i++)
		reader_set_decoders(m->readers[i], m->decoders);
	return 0;
}

/* Every subscriber holds a descriptor: MaxClients= may be far above the soft limit of 1024
 * that only matters to select(), which nothing in the daemon uses. */
static void manager_raise_fd_limit(Manager *m) {
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_debug(
			"Failed to raise the file descriptor limit to %llu: %m",
			(unsigned long long) rl.rlim_max);
}

static void manager_open_cgroups(Manager *m) {
	int r = cgroup_fs_open("/proc/self/mountinfo", &m->cgroups);

	if (r < 0) {
		log_warning_errno(
			r,
			"No cgroup2 hierarchy (%m): events will carry no systemd unit and unit filters "
			"will match nothing");
		return;
	}
	/* The tree's index names the units of events (and of removed cgroups, for snapshots and
	 * the counters' last intervals). */
	r = cgroup_watch_new(m->event, cgroup_fs_path(m->cgroups), &m->cgroup_watch);
	if (r < 0) {
		log_warning_errno(
			r,
			"Failed to watch the cgroup2 hierarchy at %s: %m; events will carry no systemd unit",
			cgroup_fs_path(m->cgroups));
		return;
	}
	log_debug("Resolving units from the cgroup2 hierarchy at %s", cgroup_fs_path(m->cgroups));
}

/* Probes the kernel; refuses to go on without a required feature (main() exits with
 * PERFRELAY_EXIT_KERNEL then), and says what is off without an optional one. */
static int manager_probe_features(Manager *m) {
	KernelFeature missing;
	int r;

	r = kernel_features_probe(&m->kernel);
	if (r < 0)
		return log_error_errno(r, "Failed to probe the kernel's BPF features: %m");
	for (unsigned i = 0; i < _FEATURE_MAX; i++) {
		if (kernel_features_forced_off(m->kernel, i))
			log_warning(
				"Kernel feature %s forced off by $PERFRELAY_TEST_DISABLE_FEATURES (test-only)",
				kernel_feature_to_string(i));
		if (!kernel_feature_required(i) && !kernel_features_has(m->kernel, i))
			log_warning(
				"Kernel feature %s is unavailable (Linux %s has it): %s",
				kernel_feature_to_string(i),
				kernel_feature_since(i),
				kernel_feature_without(i));
	}
	missing = kernel_features_first_missing_required(m->kernel);
	if (missing != _FEATURE_MAX) {
		m->kernel_unsupported = true;
		log_error(
			"The running kernel lacks the required feature %s (Linux %s or newer has it): %s",
			kernel_feature_to_string(missing),
			kernel_feature_since(missing),
			kernel_feature_without(missing));
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The pins, the kernel's features and the built-in probes' objects (not attached yet). */
static int manager_open_probes(Manager *m) {
	const Config *c = m->config;
	int r;

	r = pins_prepare(c->pin_path);
	if (r < 0)
		return r;
	r = manager_probe_features(m);
	if (r < 0)
		return r;
	r = probes_new(
		c->pin_path,
		c->replace_incompatible_pins,
		&(ProbesLimits){
			.pending_syscalls = c->pending_syscalls,
			.counters_max_processes = c->counters_max_processes,
			.counters_max_cgroups = c->counters_max_cgroups,
			.compat = kernel_features_need_compat(m->kernel),
		},
		&m->probes);
	if (r < 0)
		return r;
	probes_set_pin_links(m->probes, kernel_features_has(m->kernel, FEATURE_LINK_PIN));
	return 0;
}

static void on_hub_demand(void *userdata) {
	manager_demand_changed(userdata);
}

/* The hub: one slot per reader, and one for each feature that publishes from the main thread. */
static int manager_setup_hub(Manager *m, size_t n_groups) {
	unsigned n_small = manager_features_hub_slots(m, n_groups);
	int r;

	r = hub_new(n_groups + n_small, &m->hub);
	if (r < 0)
		return log_error_errno(
			r, "Failed to make the hub (%zu reader slots, %u small): %m", n_groups, n_small);
	if (n_small > 0) {
		r = hub_set_small_slots(m->hub, n_small);
		if (r < 0)
			return log_error_errno(r, "Failed to make the hub's %u small slots: %m", n_small);
	}
	if (m->config->process_table_entries != PROC_TABLE_DEFAULT) {
		r = hub_set_process_table(m->hub, m->config->process_table_entries);
		if (r < 0)
			return log_error_errno(
				r,
				"Failed to make the process table of ProcessTableEntries=%u: %m",
				m->config->process_table_entries);
	}
	hub_set_demand_fn(m->hub, on_hub_demand, m);
	r = sd_event_add_io(m->event, &m->notify_source, hub_notify_fd(m->hub), EPOLLIN, on_hub_notify, m);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the hub: %m");
	return 0;
}

static int manager_start_readers(Manager *m) {
	for (size_t i = 0; i < m->n_readers; i++) {
		int e = 0, r;

		r = reader_start(
			m->readers[i],
			m->config->reader_nice,
			m->config->reader_priority,
			m->config->reader_priority_budget,
			&e);
		if (r < 0)
			return log_error_errno(r, "Failed to start reader thread %zu: %m", i);
		/* Clients on the readers' CPUs must not starve them: what a reader cannot drain
		 * the kernel drops (counted) for every client. */
		if (r > 0)
			log_warning_errno(
				-e,
				"Reader thread %zu: could not apply ReaderPriority=%u / ReaderNice=%d: %m "
				"(needs CAP_SYS_NICE); it runs at the nice value it could get",
				i,
				m->config->reader_priority,
				m->config->reader_nice);
	}
	return 0;
}

static void manager_log_serving(Manager *m) {
	const Config *c = m->config;
	uint32_t map_id = 0;
	char events_pin[PATH_MAX], cpus[256];

	snprintf(events_pin, sizeof(events_pin), "%s/events", c->pin_path);
	(void) pins_get_map_id(events_pin, &map_id);
	if (cpuset_format(&m->cpus, cpus, sizeof(cpus)) < 0)
		strcpy(cpus, "?");
	log_info(
		"Pinned perf event array at %s (map id %u, %u possible CPUs, BPF_F_PRESERVE_ELEMS)",
		events_pin,
		map_id,
		probes_possible_cpus(m->probes));
	if (cpuset_is_empty(&m->cpus_parked))
		log_info(
			"%zu reader thread%s serving %u CPUs (%s), %u pages per ring",
			m->n_readers,
			m->n_readers == 1 ? "" : "s",
			cpuset_count(&m->cpus),
			cpus,
			c->pages_per_cpu);
	else
		log_info(
			"%zu reader thread%s serving %u CPUs (%s; %u offline, served when they come online), "
			"%u pages per ring",
			m->n_readers,
			m->n_readers == 1 ? "" : "s",
			cpuset_count(&m->cpus),
			cpus,
			cpuset_count(&m->cpus_parked),
			c->pages_per_cpu);
}

int manager_start(Manager *m) {
	_cleanup_free_ CpuSet *groups = NULL;
	size_t n_groups = 0;
	ApiOptions api = manager_api_options(m->config);
	int r;

	r = manager_open_probes(m);
	if (r < 0)
		return r;
	r = manager_settle(m);
	if (r < 0)
		return r;

	r = manager_cpu_groups(m, &groups, &n_groups);
	if (r < 0)
		return r;
	manager_raise_fd_limit(m);
	manager_open_cgroups(m);
	r = manager_setup_hub(m, n_groups);
	if (r < 0)
		return r;

	r = manager_open_rings(m, groups, n_groups);
	if (r < 0)
		return r;
	/* Slots of CPUs given no ring here (outside every group, offline) were emptied with the
	 * others by manager_settle(), and stay empty: emits there fail and are counted. */
	r = manager_setup_decoders(m);
	if (r < 0)
		return r;
	/* What the readers need from their first record on (hotplug is watched from here on,
	 * before the socket exists: its events wait for the loop). */
	r = manager_features_setup(m);
	if (r < 0)
		return r;
	r = manager_start_readers(m);
	if (r < 0)
		return r;
	manager_mark_serving(m);

	r = server_new(m->event, m->hub, &api, manager_flush_all, m, &m->server);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the event socket: %m");

	/* Probes last (the probe feature's start): every ring is mapped and read before the first
	 * event is emitted. */
	r = manager_features_start(m);
	if (r < 0)
		return r;
	manager_log_serving(m);

	/* Before READY=1, so that the name is on the bus when systemd says the service is up.
	 * Without a bus this logs a warning and leaves m->bus NULL. */
	r = manager_setup_bus(m);
	if (r < 0)
		return r;

	m->state = MANAGER_RUNNING;
	manager_emit_state_changed(m);
	r = manager_setup_health(m);
	if (r < 0)
		return r;
	(void) sd_notify(false, "READY=1\nSTATUS=Running");
	return 0;
}


static int on_exit_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
	Manager *m = userdata;

	m->state = MANAGER_STOPPING;
	manager_emit_state_changed(m);
	bus_flush(m->bus);
	return sd_event_exit(sd_event_source_get_event(s), 0);
}

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
	/* Errors are logged; the daemon runs on with what it had. */
	(void) manager_reload(userdata, NULL);
	return 0;
}

int manager_run(Manager *m) {
	int r;

	r = sd_event_add_signal(m->event, NULL, SIGTERM, on_exit_signal, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGINT, on_exit_signal, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGHUP, on_sighup, m);
#if PERFRELAY_FAULT_INJECTION
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGUSR2, manager_on_fault_signal, m);
#endif
	if (r < 0)
		return log_error_errno(r, "Failed to watch signals: %m");

	r = sd_event_loop(m->event);
	if (r < 0)
		return log_error_errno(r, "Event loop failed: %m");

	(void) sd_notify(false, "STOPPING=1\nSTATUS=Draining rings");
	/* No silent window: the slots are cleared and the emitters in flight waited out first,
	 * then the readers drain the rings to empty, then the last output goes out. A blocked
	 * stdout is not waited for. The rings are unmapped with the readers (manager_free()). */
	manager_stop_readers(m);
	manager_flush(m);
	if (m->server)
		server_shutdown(m->server);
	manager_features_finish(m);
	manager_log_stats(m);
	return 0;
}
