/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager: start-up order, the main thread's event loop, client output, shutdown. */
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

#include "bus.h"
#include "cgroup.h"
#include "grace.h"
#include "hotplug.h"
#include "kernelfeatures.h"
#include "ledger.h"
#include "log.h"
#include "manager.h"
#include "pins.h"
#include "server.h"
#include "stats.h"
#include "topology.h"
#include "time-util.h"


struct Manager {
	ManagerOptions o;
	ManagerState state;
	uint64_t started_at; /* CLOCK_REALTIME usec */
	char *dropin_dir;
	Config *config;
	sd_event *event;
	Probes *probes;
	Ledger *ledger; /* the pinned "received" map, mmapped */
	/* Per producer: its pinned failure count when this daemon began serving (the failures of
	 * the downtime before it), and what ledger_settle() found lost with a dead daemon. */
	uint64_t failures_at_start[PERFRELAY_MAX_PRODUCERS];
	uint64_t crash_lost_at_start[PERFRELAY_MAX_PRODUCERS];
	bool serving;            /* our rings may be in the array: quiesce before the last drain */
	bool quiesced;           /* slots cleared and a grace period waited out: nothing writes */
	Features *features;      /* what the running kernel offers, probed at start */
	bool kernel_unsupported; /* start failed: a required kernel feature is missing */
	Hub *hub;
	Reader **readers;
	size_t n_readers;
	CpuSet cpus;       /* CPUs with a ring */
	CgroupFs *cgroups; /* cgroup2 mount for unit names; NULL if there is none */
	Server *server;    /* the event socket and its subscribers */
	Bus *bus;          /* NULL without a system bus */

	HubClient *stdout_client;
	HubClientStats stdout_gone;     /* the standard output client's counters after it went away */
	sd_event_source *stdout_source; /* EPOLLOUT wait on fd 1, NULL for files */
	sd_event_source *notify_source;

	/* Health: STATUS= every second, and WATCHDOG=1 while every reader makes progress. */
	sd_event_source *health_source;
	uint64_t watchdog_usec; /* from $WATCHDOG_USEC, 0 when systemd does not watch us */
	uint64_t health_last_usec;
	uint64_t health_last_events;
	bool watchdog_withheld;

	/* CPU hotplug (manager_hotplug_*()). */
	HotplugWatch *hotplug; /* kernel uevents; NULL where they cannot be had (the tick remains) */
	CpuSet cpus_parked;    /* CPUs of `cpus` that are offline: slot empty, ring drained or none yet */
	CpuSet cpus_unserved_seen; /* CPUs outside every group already reported as online */
};

int manager_new(const ManagerOptions *o, Manager **ret) {
	_cleanup_free_ char *error = NULL;
	Manager *m;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->o = *o;
	m->state = MANAGER_STARTING;
	m->started_at = now_usec(CLOCK_REALTIME);
	if (asprintf(&m->dropin_dir, "%s.d", o->config_path) < 0) {
		free(m);
		return -ENOMEM;
	}

	r = config_new(&m->config);
	if (r >= 0)
		r = config_load(m->config, o->config_path, m->dropin_dir, &error);
	if (r < 0) {
		manager_free(m);
		if (error)
			log_error("%s", error);
		return error ? r : log_error_errno(r, "Failed to load configuration %s: %m", o->config_path);
	}
	if (o->pin_path) {
		free(m->config->pin_path);
		m->config->pin_path = strdup(o->pin_path);
		if (!m->config->pin_path) {
			manager_free(m);
			return -ENOMEM;
		}
	}

	r = sd_event_default(&m->event);
	if (r < 0) {
		manager_free(m);
		return log_error_errno(r, "Failed to allocate event loop: %m");
	}
	*ret = m;
	return 0;
}

const char *manager_pin_path(const Manager *m) {
	return m->config->pin_path;
}

static const char *const manager_state_table[_MANAGER_STATE_MAX] = {
	[MANAGER_STARTING] = "starting",
	[MANAGER_RUNNING] = "running",
	[MANAGER_STOPPING] = "stopping",
};

const char *manager_state_to_string(ManagerState s) {
	return (unsigned) s < _MANAGER_STATE_MAX ? manager_state_table[s] : NULL;
}

ManagerState manager_state(const Manager *m) {
	return m->state;
}
uint64_t manager_started_at(const Manager *m) {
	return m->started_at;
}
const Config *manager_config(const Manager *m) {
	return m->config;
}
const CpuSet *manager_cpus(const Manager *m) {
	return &m->cpus;
}
size_t manager_n_readers(const Manager *m) {
	return m->n_readers;
}
const Reader *manager_reader(const Manager *m, size_t i) {
	return m->readers[i];
}
Probes *manager_probes(Manager *m) {
	return m->probes;
}
const Features *manager_features(const Manager *m) {
	return m->features;
}
bool manager_kernel_unsupported(const Manager *m) {
	return m->kernel_unsupported;
}
Server *manager_server(Manager *m) {
	return m->server;
}
Hub *manager_hub(Manager *m) {
	return m->hub;
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
	int events_fd = probes_events_fd(m->probes), r = 0;
	const char *how = NULL;

	for (unsigned cpu = 0; cpu < probes_possible_cpus(m->probes); cpu++) {
		uint32_t key = cpu;

		if (bpf_map_delete_elem(events_fd, &key) < 0 && errno != ENOENT)
			r = log_error_errno(
				negative_errno(),
				"Failed to clear slot %u of %s/events: %m",
				cpu,
				m->config->pin_path);
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
		"Cleared the slots of %s/events and waited out the emitters in flight (%s)",
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
	hotplug_watch_free(m->hotplug);
	sd_event_source_disable_unref(m->health_source);
	/* Subscribers leave the hub before it goes. */
	bus_free(m->bus);
	server_free(m->server);
	if (m->stdout_client) {
		hub_client_detach(m->hub, m->stdout_client);
		hub_client_free(m->stdout_client);
	}
	sd_event_source_unref(m->stdout_source);
	sd_event_source_unref(m->notify_source);
	for (size_t i = 0; i < m->n_readers; i++)
		reader_free(m->readers[i]);
	free(m->readers);
	cgroup_fs_free(m->cgroups);
	hub_free(m->hub);
	ledger_free(m->ledger);
	probes_free(m->probes);
	features_free(m->features);
	sd_event_unref(m->event);
	config_free(m->config);
	free(m->dropin_dir);
	free(m);
	return NULL;
}

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
static int manager_cpu_groups(Manager *m, CpuSet **ret, size_t *ret_n) {
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

static RingOptions manager_ring_options(const Manager *m) {
	const Config *c = m->config;
	long page = sysconf(_SC_PAGESIZE);
	RingOptions ro = {
		.pages = c->pages_per_cpu,
		.watermark = c->watermark,
		.wakeup_events = c->wakeup_events,
	};

	/* Default wakeup: a quarter of the ring, so the reader is woken while three quarters are
	 * still free; the flush interval bounds the latency of anything below it. */
	if (ro.watermark == 0 && ro.wakeup_events == 0)
		ro.watermark = (uint32_t) ((uint64_t) page * c->pages_per_cpu / 4);
	return ro;
}

static int manager_open_rings(Manager *m, const CpuSet *groups, size_t n_groups) {
	const Config *c = m->config;
	RingOptions ro = manager_ring_options(m);
	int events_fd = probes_events_fd(m->probes);
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
			uint32_t key = cpu;
			int fd;

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
					"Failed to open the perf ring of CPU %d (%u pages): %m",
					cpu,
					ro.pages);
			}
			fd = ring_fd(rings[i]);
			i++;
			/* From the first ring on, a stop or a failed start must quiesce. */
			m->serving = true;
			if (bpf_map_update_elem(events_fd, &key, &fd, BPF_ANY) < 0) {
				r = negative_errno();
				for (unsigned k = 0; k < i; k++)
					ring_free(rings[k]);
				free(rings);
				return log_error_errno(
					r,
					"Failed to store the ring of CPU %d in %s/events: %m",
					cpu,
					c->pin_path);
			}
			cpuset_add(&m->cpus, cpu);
		}
		r = reader_new(
			g,
			&groups[g],
			rings,
			n,
			m->hub,
			m->cgroups,
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

/* The pinned failure counts when we begin to serve: what fails from now on fails while this
 * daemon serves, what failed before is the downtime's. */
static void manager_mark_serving(Manager *m) {
	(void) manager_set_idle(m, false);
	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		struct perfrelay_counters sum;

		if (probes_read_counters(m->probes, id, &sum, NULL) >= 0)
			m->failures_at_start[id] = sum.failures;
	}
}

uint64_t manager_failures_at_start(const Manager *m, uint32_t producer) {
	return producer < PERFRELAY_MAX_PRODUCERS ? m->failures_at_start[producer] : 0;
}

uint64_t manager_crash_lost_at_start(const Manager *m, uint32_t producer) {
	return producer < PERFRELAY_MAX_PRODUCERS ? m->crash_lost_at_start[producer] : 0;
}

Ledger *manager_ledger(Manager *m) {
	return m->ledger;
}

static void manager_drop_stdout(Manager *m, int error) {
	log_warning_errno(error, "Standard output is gone (%m), no longer printing events");
	hub_client_detach(m->hub, m->stdout_client);
	hub_client_discard(m->stdout_client);
	hub_client_get_stats(m->stdout_client, &m->stdout_gone);
	m->stdout_client = hub_client_free(m->stdout_client);
	m->stdout_source = sd_event_source_disable_unref(m->stdout_source);
}

/* The --stdout client's consumer (HubClientOptions.flush). */
static void manager_flush_stdout(HubClient *c, void *userdata) {
	Manager *m = userdata;
	int r;

	r = hub_client_flush(c);
	if (r < 0) {
		manager_drop_stdout(m, r);
		return;
	}
	if (m->stdout_source)
		sd_event_source_set_enabled(m->stdout_source, r == 0 ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
}

static void flush_one(HubClient *c, void *userdata) {
	/* An overflowed client is closed even while it blocks: hub_prepare_sleep() does not let
	 * the loop sleep until it is gone. Each client's own consumer writes it out: the socket
	 * server, the bus monitors, standard output. */
	if (!hub_client_blocked(c) || hub_client_overflowed(c))
		hub_client_run_flush(c);
}

static void manager_flush(Manager *m) {
	do
		hub_foreach_client(m->hub, flush_one, m);
	while (hub_prepare_sleep(m->hub));
}

static int on_hub_notify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	manager_flush(userdata);
	return 0;
}

static void manager_flush_all(void *userdata) {
	manager_flush(userdata);
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

	if (r < 0)
		log_warning_errno(
			r,
			"No cgroup2 hierarchy (%m): events will carry no systemd unit and unit filters "
			"will match nothing");
	else
		log_debug("Resolving units from the cgroup2 hierarchy at %s", cgroup_fs_path(m->cgroups));
}

static int on_stdout_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	Manager *m = userdata;

	if (m->stdout_client)
		hub_client_run_flush(m->stdout_client);
	manager_flush(m);
	return 0;
}

static int manager_setup_stdout(Manager *m) {
	HubClientOptions o = {
		.format = HUB_FORMAT_JSON,
		.overflow = HUB_OVERFLOW_DROP,
		.queue_bytes = m->config->client_queue_bytes,
		.userdata = m,
		.flush = manager_flush_stdout,
	};
	int r, flags;

	flags = fcntl(STDOUT_FILENO, F_GETFL);
	if (flags < 0)
		return log_error_errno(-errno, "--stdout: standard output is not open: %m");
	if (fcntl(STDOUT_FILENO, F_SETFL, flags | O_NONBLOCK) < 0)
		return log_error_errno(-errno, "--stdout: cannot make standard output non-blocking: %m");

	r = hub_client_new(m->hub, STDOUT_FILENO, &o, &m->stdout_client);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the standard output client: %m");
	r = sd_event_add_io(m->event, &m->stdout_source, STDOUT_FILENO, EPOLLOUT, on_stdout_writable, m);
	if (r == -EPERM)
		m->stdout_source = NULL; /* a regular file: never blocks */
	else if (r < 0)
		return log_error_errno(r, "Failed to watch standard output: %m");
	else
		sd_event_source_set_enabled(m->stdout_source, SD_EVENT_OFF);
	return hub_client_attach(m->hub, m->stdout_client);
}

static void manager_hotplug_tick(Manager *m);

#define HEALTH_INTERVAL_USEC (1000ULL * 1000ULL)

/* STATUS=: rate and the accounting totals of the stats snapshot (lifetime figures of the
 * pinned maps: see stats.h). */
static void manager_notify_status(Manager *m, uint64_t rate, uint64_t ring_lost, bool alive) {
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;

	if (stats_snapshot(m, &s) < 0) {
		(void) sd_notifyf(
			false,
			"STATUS=%s: %zu readers, %" PRIu64 " events/s, %" PRIu64 " lost in rings%s",
			m->state == MANAGER_RUNNING ? "Running" : "Stopping",
			m->n_readers,
			rate,
			ring_lost,
			alive ? "" : "; a reader is stalled");
		return;
	}
	(void) sd_notifyf(
		false,
		"STATUS=%s: %zu readers, %" PRIu64 " events/s, %" PRIu64
		" lost in rings; producers: %" PRIu64 " failures while serving, %" PRIu64 " before, %" PRIu64
		" crash_lost, %" PRIu64 " seq_gaps; clients: %" PRIu64 " dropped%s",
		m->state == MANAGER_RUNNING ? "Running" : "Stopping",
		m->n_readers,
		rate,
		ring_lost,
		s->total.failures_serving,
		s->total.failures_downtime,
		s->total.crash_lost,
		s->total.seq_gaps,
		s->clients_dropped,
		alive ? "" : "; a reader is stalled");
}

/* Slack on top of two flush intervals before a quiet reader counts as stalled: one drain of
 * half a ring per CPU of the group, and the scheduler's delays on a loaded machine. */
#define READER_STALL_SLACK_USEC (1000ULL * 1000ULL)

/* A reader goes around its loop at least every FlushIntervalMs= (its longest epoll timeout) plus
 * one drain, and stamps the time each round. It is stalled when its last round is older than
 * twice the flush interval plus the slack: a limit in time, so that it holds whatever the health
 * tick is (shorter or longer than the flush interval, which a count of rounds per tick cannot
 * judge). */
static bool manager_readers_alive(Manager *m, uint64_t now) {
	uint64_t limit = 2ULL * m->config->flush_interval_ms * 1000ULL + READER_STALL_SLACK_USEC;
	bool alive = true;

	for (size_t i = 0; i < m->n_readers; i++) {
		uint64_t last = STAT_LOAD(reader_stats(m->readers[i])->alive_usec);

		if (now > last && now - last > limit) {
			if (!m->watchdog_withheld)
				log_error(
					"Reader %zu made no progress for %" PRIu64
					" ms: withholding WATCHDOG=1",
					i,
					(now - last) / 1000);
			alive = false;
		}
	}
	return alive;
}

static int on_health(sd_event_source *s, uint64_t usec, void *userdata) {
	Manager *m = userdata;
	uint64_t t = now_usec(CLOCK_MONOTONIC), events = 0, lost = 0, elapsed = t - m->health_last_usec;
	uint64_t interval = m->watchdog_usec ? MIN(m->watchdog_usec / 2, HEALTH_INTERVAL_USEC) :
					       HEALTH_INTERVAL_USEC;
	bool alive;

	for (size_t i = 0; i < m->n_readers; i++) {
		events += STAT_LOAD(reader_stats(m->readers[i])->events);
		for (size_t k = 0; k < reader_n_rings(m->readers[i]); k++)
			lost += STAT_LOAD(reader_cpu_stats(m->readers[i], k)->lost);
	}
	alive = manager_readers_alive(m, t);
	manager_hotplug_tick(m);

	if (m->watchdog_usec && alive)
		(void) sd_notify(false, "WATCHDOG=1");
	if (alive && m->watchdog_withheld)
		log_notice("Every reader makes progress again");
	m->watchdog_withheld = !alive;

	manager_notify_status(
		m, elapsed ? (events - m->health_last_events) * 1000000ULL / elapsed : 0, lost, alive);
	m->health_last_usec = t;
	m->health_last_events = events;
	return sd_event_source_set_time(s, usec + interval);
}

static int manager_setup_health(Manager *m) {
	uint64_t wd = 0;
	int r;

	/* sd_watchdog_enabled() checks $WATCHDOG_PID too; 0 when not watched. */
	if (sd_watchdog_enabled(false, &wd) > 0)
		m->watchdog_usec = wd;
	m->health_last_usec = now_usec(CLOCK_MONOTONIC);
	r = sd_event_add_time_relative(
		m->event,
		&m->health_source,
		CLOCK_MONOTONIC,
		m->watchdog_usec ? MIN(m->watchdog_usec / 2, HEALTH_INTERVAL_USEC) : HEALTH_INTERVAL_USEC,
		0,
		on_health,
		m);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the health timer: %m");
	return sd_event_source_set_enabled(m->health_source, SD_EVENT_ON);
}

#if PERFRELAY_FAULT_INJECTION
/* Test-only (built with -Dfault_injection=true): SIGUSR2 freezes reader 0, or thaws it, so a
 * test can prove that the watchdog notices a stalled reader. */
static int on_fault_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
	Manager *m = userdata;
	static int frozen;

	frozen = !frozen;
	log_warning("Fault injection: reader 0 %s", frozen ? "frozen" : "thawed");
	if (m->n_readers > 0)
		reader_set_frozen(m->readers[0], frozen);
	return 0;
}
#endif

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

static void manager_cpu_offline(Manager *m, unsigned cpu) {
	uint32_t key = cpu;
	Reader *rd = manager_reader_of(m, cpu);
	int r;

	if (!rd || !cpuset_contains(&m->cpus, cpu) || cpuset_contains(&m->cpus_parked, cpu))
		return;
	/* Slot first: from here on emits on that CPU fail and are counted, so that the drain
	 * that follows empties the ring for good. */
	if (bpf_map_delete_elem(probes_events_fd(m->probes), &key) < 0 && errno != ENOENT)
		log_warning_errno(-errno, "CPU %u went offline; failed to empty its slot: %m", cpu);
	r = reader_replace_ring(rd, cpu, NULL);
	if (r < 0)
		log_warning_errno(r, "CPU %u went offline; failed to hand its ring back: %m", cpu);
	cpuset_add(&m->cpus_parked, cpu);
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
	 * killed the perf event of its ring. */
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
}

static void on_cpu_hotplug(void *userdata, unsigned cpu, bool online) {
	if (online)
		manager_cpu_online(userdata, cpu);
	else
		manager_cpu_offline(userdata, cpu);
}

static void manager_hotplug_tick(Manager *m) {
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

static void manager_hotplug_setup(Manager *m) {
	int r = hotplug_watch_new(m->event, on_cpu_hotplug, m, &m->hotplug);

	if (r < 0)
		log_warning_errno(
			r,
			"Cannot watch CPU hotplug uevents (%m): a CPU taken offline and back "
			"within a second may stay without a ring");
}

/* Probes the kernel; refuses to go on without a required feature (main() exits with
 * PERFRELAY_EXIT_KERNEL then), and says what is off without an optional one. */
static int manager_probe_features(Manager *m) {
	Feature missing;
	int r;

	r = features_probe(m->config->pin_path, &m->features);
	if (r < 0)
		return log_error_errno(r, "Failed to probe the kernel's BPF features: %m");
	for (unsigned i = 0; i < _FEATURE_MAX; i++) {
		if (features_forced_off(m->features, i))
			log_warning(
				"Kernel feature %s forced off by $PERFRELAY_TEST_DISABLE_FEATURES (test-only)",
				feature_to_string(i));
		if (!feature_required(i) && !features_has(m->features, i))
			log_warning(
				"Kernel feature %s is unavailable (Linux %s has it): %s",
				feature_to_string(i),
				feature_since(i),
				feature_without(i));
	}
	missing = features_first_missing_required(m->features);
	if (missing != _FEATURE_MAX) {
		m->kernel_unsupported = true;
		log_error(
			"The running kernel lacks the required feature %s (Linux %s or newer has it): %s",
			feature_to_string(missing),
			feature_since(missing),
			feature_without(missing));
		return -EOPNOTSUPP;
	}
	return 0;
}

int manager_start(Manager *m) {
	const Config *c = m->config;
	_cleanup_free_ CpuSet *groups = NULL;
	size_t n_groups = 0;
	uint32_t map_id = 0;
	char events_pin[PATH_MAX], cpus[256];
	int r;

	r = pins_prepare(c->pin_path);
	if (r < 0)
		return r;
	r = manager_probe_features(m);
	if (r < 0)
		return r;
	r = probes_new(c->pin_path, c->replace_incompatible_pins, c->pending_syscalls, &m->probes);
	if (r < 0)
		return r;
	probes_set_pin_links(m->probes, features_has(m->features, FEATURE_LINK_PIN));

	r = manager_settle(m);
	if (r < 0)
		return r;

	r = manager_cpu_groups(m, &groups, &n_groups);
	if (r < 0)
		return r;
	manager_raise_fd_limit(m);
	manager_open_cgroups(m);
	r = hub_new(n_groups, &m->hub);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the hub: %m");
	r = sd_event_add_io(m->event, &m->notify_source, hub_notify_fd(m->hub), EPOLLIN, on_hub_notify, m);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the hub: %m");

	r = manager_open_rings(m, groups, n_groups);
	if (r < 0)
		return r;
	/* Slots of CPUs given no ring here (outside every group, offline) were emptied with the
	 * others by manager_settle(), and stay empty: emits there fail and are counted. Hotplug
	 * is watched from here on, before the socket exists (its events wait for the loop). */
	manager_hotplug_setup(m);
	if (m->o.stdout_events) {
		r = manager_setup_stdout(m);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < m->n_readers; i++) {
		r = reader_start(m->readers[i]);
		if (r < 0)
			return log_error_errno(r, "Failed to start reader thread %zu: %m", i);
	}
	manager_mark_serving(m);
	r = server_new(m->event, m->hub, m->config, manager_flush_all, m, &m->server);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the event socket: %m");

	/* Probes last: every ring is mapped and read before the first event is emitted. */
	r = probes_apply(m->probes, c->probes);
	if (r < 0)
		return r;

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
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(m->probes, i))
			log_info(
				"Probe %s attached%s",
				probe_to_string(i),
				probes_was_reused(m->probes, i) ? " (pinned links reused)" : "");

	/* Before READY=1, so that the name is on the bus when systemd says the service is up.
	 * Without a bus this logs a warning and leaves m->bus NULL. */
	r = bus_new(m, m->event, m->config, &m->bus);
	if (r < 0)
		return r;

	m->state = MANAGER_RUNNING;
	bus_emit_state_changed(m->bus);
	r = manager_setup_health(m);
	if (r < 0)
		return r;
	(void) sd_notify(false, "READY=1\nSTATUS=Running");
	return 0;
}

int manager_get_counters(Manager *m, bool with_failures, ManagerCounters *ret) {
	ManagerCounters c = {};
	BusStats bs;
	int r = 0;

	for (size_t i = 0; i < m->n_readers; i++) {
		const Reader *rd = m->readers[i];

		c.events_received += STAT_LOAD(reader_stats(rd)->events);
		for (size_t k = 0; k < reader_n_rings(rd); k++)
			c.events_lost += STAT_LOAD(reader_cpu_stats(rd, k)->lost);
	}
	if (m->server) {
		ServerStats ss;

		server_get_stats(m->server, &ss);
		c.clients = ss.clients;
		c.events_delivered += ss.gone_sent + ss.live_sent;
		c.client_drops += ss.gone_dropped + ss.live_dropped;
		c.events_offered += ss.gone_offered + ss.live_offered;
	}
	c.events_delivered += m->stdout_gone.sent;
	c.client_drops += m->stdout_gone.dropped;
	c.events_offered += m->stdout_gone.offered;
	if (m->stdout_client) {
		HubClientStats st;

		hub_client_get_stats(m->stdout_client, &st);
		c.events_delivered += st.sent;
		c.client_drops += st.dropped;
		c.events_offered += st.offered;
	}
	bus_get_stats(m->bus, &bs);
	c.events_delivered += bs.delivered;
	c.client_drops += bs.dropped;
	/* A monitor's hub queue is emptied into signals on every pass of the loop: what it was
	 * offered is what it sent or dropped. */
	c.events_offered += bs.delivered + bs.dropped;

	if (with_failures && m->probes) {
		struct perfrelay_counters sum;

		r = probes_read_all_counters(m->probes, &sum, NULL);
		if (r >= 0)
			c.producer_failures = sum.failures;
	}
	*ret = c;
	return r;
}

int manager_set_probe_enabled(Manager *m, unsigned probe, bool enabled) {
	int r;

	if (probe >= _PROBE_MAX)
		return -EINVAL;
	if (probes_is_enabled(m->probes, probe) == enabled)
		return 0;
	r = probes_set_enabled(m->probes, probe, enabled);
	/* Detaching can fail half way (a pin that cannot be removed): tell the bus either way. */
	bus_emit_probes_changed(m->bus);
	if (r < 0)
		return log_error_errno(
			r, "Failed to %s probe %s: %m", enabled ? "attach" : "detach", probe_to_string(probe));
	log_info("Probe %s %s", probe_to_string(probe), enabled ? "attached" : "detached");
	return 0;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Config *, config_free);

static uint32_t manager_probe_mask(const Manager *m) {
	uint32_t mask = 0;

	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(m->probes, i))
			mask |= 1u << i;
	return mask;
}

int manager_reload(Manager *m, char **ret_error) {
	_cleanup_(config_freep) Config *c = NULL;
	_cleanup_free_ char *error = NULL, *restart = NULL;
	uint32_t attached;
	Config *old;
	int r;

	log_info("Reloading configuration from %s and %s/", m->o.config_path, m->dropin_dir);
	r = config_new(&c);
	if (r < 0)
		return log_error_errno(r, "Failed to allocate a configuration: %m");
	r = config_load(c, m->o.config_path, m->dropin_dir, &error);
	if (r < 0) {
		if (!error) {
			errno = -r;
			if (asprintf(&error, "%s: %m", m->o.config_path) < 0)
				return log_oom();
		}
		log_error("Reload failed, keeping the previous configuration: %s", error);
		if (ret_error)
			*ret_error = TAKE_PTR(error);
		return r;
	}
	if (m->o.pin_path) {
		/* --pin-path wins over PinPath= as it did at start. */
		char *p = strdup(m->o.pin_path);

		if (!p)
			return -ENOMEM;
		free(c->pin_path);
		c->pin_path = p;
	}
	r = config_keep_restart_keys(c, m->config, &restart);
	if (r < 0)
		return log_error_errno(r, "Failed to compare the configurations: %m");

	old = m->config;
	m->config = TAKE_PTR(c);
	server_set_config(m->server, m->config);
	bus_set_config(m->bus, m->config);
	config_free(old);

	if (restart)
		log_warning(
			"Reload: changes to %s take effect only after a restart "
			"(systemctl restart perfrelay)",
			restart);

	attached = manager_probe_mask(m);
	r = probes_apply(m->probes, m->config->probes);
	if (manager_probe_mask(m) != attached)
		bus_emit_probes_changed(m->bus);
	if (r < 0)
		/* probes_apply() logged which probe; the rest is applied all the same. */
		return r;
	log_info("Reloaded configuration");
	return 0;
}

/* At exit, standard output gets everything it was offered (and no cut line), unless it does
 * not take it within a bounded time. */
static void manager_finish_stdout(Manager *m) {
	usec_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * USEC_PER_SEC;
	int r;

	if (!m->stdout_client)
		return;
	while ((r = hub_client_flush(m->stdout_client)) == 0) {
		struct pollfd p = { .fd = STDOUT_FILENO, .events = POLLOUT };
		usec_t t = now_usec(CLOCK_MONOTONIC);

		if (t >= deadline || poll(&p, 1, (int) ((deadline - t) / USEC_PER_MSEC) + 1) <= 0) {
			log_warning("Standard output did not take the last events within 5s, giving up");
			break;
		}
	}
	if (r < 0)
		log_warning_errno(r, "Failed to write the last events to standard output: %m");
	/* The readers have stopped: what is still queued is never written, and counts as
	 * dropped in the exit summary. */
	hub_client_detach(m->hub, m->stdout_client);
	hub_client_discard(m->stdout_client);
}

/* The figures a user needs to see that nothing was lost uncounted, logged at exit: the same
 * snapshot as GetStats() and perfrelayctl stats (docs/dbus.md says what each means). */
static void manager_log_stats(Manager *m) {
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	int r;

	r = stats_snapshot(m, &s);
	if (r < 0) {
		log_warning_errno(r, "Failed to take the exit statistics: %m");
		return;
	}
	for (size_t i = 0; i < s->n_readers; i++) {
		const ReaderSnapshot *rd = &s->readers[i];

		log_info(
			"Reader %u (CPUs %s): %" PRIu64 " events, %" PRIu64 " wakeups, %" PRIu64 " batches",
			rd->id,
			rd->cpus,
			rd->events,
			rd->wakeups,
			rd->batches);
		for (unsigned e = 1; e < _DECODE_ERROR_MAX; e++)
			if (rd->malformed_by_reason[e])
				log_info(
					"Reader %u: %" PRIu64 " records rejected: %s",
					rd->id,
					rd->malformed_by_reason[e],
					decode_error_to_string(e));
	}
	for (size_t i = 0; i < s->n_cpus; i++) {
		const CpuSnapshot *c = &s->cpus[i];

		log_info(
			"CPU %u: %" PRIu64 " received, %" PRIu64 " lost, %" PRIu64 " malformed, %" PRIu64
			" bytes",
			c->cpu,
			c->ring.received,
			c->ring.lost,
			c->ring.malformed,
			c->ring.bytes);
		if (c->ring.corrupt)
			log_warning(
				"CPU %u: ring framing broken %" PRIu64 " times, %" PRIu64 " bytes skipped",
				c->cpu,
				c->ring.corrupt,
				c->ring.corrupt_bytes);
	}
	for (size_t i = 0; i < s->n_producers; i++) {
		const ProducerSnapshot *p = &s->producers[i];

		log_info(
			"Producer %u: %" PRIu64 " attempts, %" PRIu64 " received, %" PRIu64
			" malformed, %" PRIu64 " failures (%" PRIu64 " before this daemon served), %" PRIu64
			" crash_lost, %" PRIu64 " seq_gaps; this daemon: %" PRIu64 " received, %" PRIu64
			" malformed",
			p->id,
			p->attempts,
			p->received,
			p->malformed,
			p->failures,
			p->failures_downtime,
			p->crash_lost,
			p->seq_gaps,
			p->received_session,
			p->malformed_session);
	}
	for (size_t i = 0; i < m->n_readers; i++) {
		CgroupCacheStats us;

		reader_unit_cache_stats(m->readers[i], &us);
		if (us.misses > 0)
			log_info(
				"Reader %u: units: %" PRIu64 " cache hits, %" PRIu64 " resolved, %" PRIu64
				" failed, %" PRIu64 " evicted",
				reader_id(m->readers[i]),
				us.hits,
				us.misses,
				us.failures,
				us.evictions);
	}
	if (m->stdout_client) {
		HubClientStats cs;

		hub_client_get_stats(m->stdout_client, &cs);
		log_info(
			"Standard output: %" PRIu64 " offered, %" PRIu64 " sent, %" PRIu64 " dropped",
			cs.offered,
			cs.sent,
			cs.dropped);
	}
	if (m->server) {
		ServerStats ss;
		uint64_t refused = 0;

		server_get_stats(m->server, &ss);
		for (unsigned e = 0; e < _PROTOCOL_ERROR_MAX; e++)
			refused += ss.refused[e];
		log_info(
			"Socket clients: %" PRIu64 " connections, %" PRIu64 " subscribed, %" PRIu64
			" refused with an error; %" PRIu64 " events offered, %" PRIu64 " sent, %" PRIu64
			" dropped; %" PRIu64 " passed fds closed",
			ss.accepted,
			ss.subscribed,
			refused,
			ss.gone_offered,
			ss.gone_sent,
			ss.gone_dropped,
			ss.fds_closed);
	}
	log_info(
		"All clients: %" PRIu64 " offered, %" PRIu64 " delivered, %" PRIu64 " dropped",
		s->clients_offered,
		s->clients_delivered,
		s->clients_dropped);
}

static int on_exit_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
	Manager *m = userdata;

	m->state = MANAGER_STOPPING;
	bus_emit_state_changed(m->bus);
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
		r = sd_event_add_signal(m->event, NULL, SIGUSR2, on_fault_signal, m);
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
	manager_finish_stdout(m);
	manager_log_stats(m);
	return 0;
}
