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

#include "cgroup.h"
#include "log.h"
#include "manager.h"
#include "pins.h"
#include "server.h"
#include "topology.h"

typedef uint64_t usec_t;
#define USEC_PER_SEC 1000000ULL
#define USEC_PER_MSEC 1000ULL

static usec_t now(clockid_t clock) {
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

struct Manager {
	ManagerOptions o;
	char *dropin_dir;
	Config *config;
	sd_event *event;
	Probes *probes;
	Hub *hub;
	Reader **readers;
	size_t n_readers;
	CpuSet cpus;                /* CPUs with a ring */
	CgroupFs *cgroups;          /* cgroup2 mount for unit names; NULL if there is none */
	Server *server;             /* the event socket and its subscribers */

	HubClient *stdout_client;
	sd_event_source *stdout_source; /* EPOLLOUT wait on fd 1, NULL for files */
	sd_event_source *notify_source;
};

int manager_new(const ManagerOptions *o, Manager **ret) {
	_cleanup_free_ char *error = NULL;
	Manager *m;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->o = *o;
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

const char *manager_pin_path(const Manager *m) { return m->config->pin_path; }

static void manager_stop_readers(Manager *m) {
	for (size_t i = 0; i < m->n_readers; i++)
		reader_stop(m->readers[i]);
}

Manager *manager_free(Manager *m) {
	if (!m)
		return NULL;
	manager_stop_readers(m);
	/* Subscribers leave the hub before it goes. */
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
	probes_free(m->probes);
	sd_event_unref(m->event);
	config_free(m->config);
	free(m->dropin_dir);
	free(m);
	return NULL;
}

/* The CPU groups the readers serve: from CpuGroups=, CpusPerReader= or the cache topology,
 * restricted to online CPUs (configured CPUs that are offline are skipped with a warning). */
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

			for (int cpu = cpuset_next(&c->cpu_groups[i], 0); cpu >= 0;
			     cpu = cpuset_next(&c->cpu_groups[i], cpu + 1)) {
				if (cpuset_contains(&online, cpu))
					cpuset_add(&g, cpu);
				else
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
		return 0;
	}
	if (c->cpus_per_reader > 0)
		r = topology_chunk_groups(&online, c->cpus_per_reader, ret);
	else
		r = topology_llc_groups("/sys", &online, ret);
	if (r < 0)
		return log_error_errno(r, "Failed to split CPUs into reader groups: %m");
	*ret_n = r;
	return 0;
}

static int manager_open_rings(Manager *m, const CpuSet *groups, size_t n_groups) {
	const Config *c = m->config;
	long page = sysconf(_SC_PAGESIZE);
	RingOptions ro = {
		.pages = c->pages_per_cpu,
		.watermark = c->watermark,
		.wakeup_events = c->wakeup_events,
	};
	int events_fd = probes_events_fd(m->probes);
	int r;

	/* Default wakeup: a quarter of the ring, so the reader is woken while three quarters are
	 * still free; the flush interval bounds the latency of anything below it. */
	if (ro.watermark == 0 && ro.wakeup_events == 0)
		ro.watermark = (uint32_t)((uint64_t)page * c->pages_per_cpu / 4);

	m->readers = calloc(n_groups, sizeof(Reader *));
	if (!m->readers)
		return -ENOMEM;

	for (size_t g = 0; g < n_groups; g++) {
		unsigned n = cpuset_count(&groups[g]), i = 0;
		Ring **rings = calloc(n, sizeof(Ring *));

		if (!rings)
			return -ENOMEM;
		for (int cpu = cpuset_next(&groups[g], 0); cpu >= 0; cpu = cpuset_next(&groups[g], cpu + 1)) {
			uint32_t key = cpu;
			int fd;

			r = ring_open(cpu, &ro, &rings[i]);
			if (r < 0) {
				for (unsigned k = 0; k < i; k++)
					ring_free(rings[k]);
				free(rings);
				return log_error_errno(r, "Failed to open the perf ring of CPU %d (%u pages): %m",
				                       cpu, ro.pages);
			}
			fd = ring_fd(rings[i]);
			i++;
			/* Replaces whatever ring a previous daemon left in the slot. */
			if (bpf_map_update_elem(events_fd, &key, &fd, BPF_ANY) < 0) {
				r = negative_errno();
				for (unsigned k = 0; k < i; k++)
					ring_free(rings[k]);
				free(rings);
				return log_error_errno(r, "Failed to store the ring of CPU %d in %s/events: %m",
				                       cpu, c->pin_path);
			}
			cpuset_add(&m->cpus, cpu);
		}
		r = reader_new(g, &groups[g], rings, n, m->hub, m->cgroups, c->flush_interval_ms, &m->readers[g]);
		if (r < 0)
			return log_error_errno(r, "Failed to set up reader %zu: %m", g);
		m->n_readers++;
	}
	return 0;
}

static void manager_unmap_rings(Manager *m) {
	int events_fd = m->probes ? probes_events_fd(m->probes) : -1;

	if (events_fd < 0)
		return;
	/* Release our perf events from the array: with BPF_F_PRESERVE_ELEMS they would otherwise
	 * stay referenced by the map until the next daemon replaces them. Emits fail (counted by
	 * the producers) until then either way. */
	for (int cpu = cpuset_next(&m->cpus, 0); cpu >= 0; cpu = cpuset_next(&m->cpus, cpu + 1)) {
		uint32_t key = cpu;
		bpf_map_delete_elem(events_fd, &key);
	}
}

static void manager_drop_stdout(Manager *m, int error) {
	log_warning_errno(error, "Standard output is gone (%m), no longer printing events");
	hub_client_detach(m->hub, m->stdout_client);
	m->stdout_client = hub_client_free(m->stdout_client);
	m->stdout_source = sd_event_source_disable_unref(m->stdout_source);
}

static void manager_flush_client(Manager *m, HubClient *c) {
	int r;

	if (c != m->stdout_client) {
		server_flush_client(m->server, c);
		return;
	}
	r = hub_client_flush(c);
	if (r < 0) {
		if (c == m->stdout_client)
			manager_drop_stdout(m, r);
		return;
	}
	if (c == m->stdout_client && m->stdout_source)
		sd_event_source_set_enabled(m->stdout_source, r == 0 ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
}

static void flush_one(HubClient *c, void *userdata) {
	/* An overflowed client is closed even while it blocks: hub_prepare_sleep() does not let
	 * the loop sleep until it is gone. */
	if (!hub_client_blocked(c) || hub_client_overflowed(c))
		manager_flush_client(userdata, c);
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
		log_debug("Failed to raise the file descriptor limit to %llu: %m", (unsigned long long) rl.rlim_max);
}

static void manager_open_cgroups(Manager *m) {
	int r = cgroup_fs_open("/proc/self/mountinfo", &m->cgroups);

	if (r < 0)
		log_warning_errno(r, "No cgroup2 hierarchy (%m): events will carry no systemd unit and unit filters "
		                  "will match nothing");
	else
		log_debug("Resolving units from the cgroup2 hierarchy at %s", cgroup_fs_path(m->cgroups));
}

static int on_stdout_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	Manager *m = userdata;

	if (m->stdout_client)
		manager_flush_client(m, m->stdout_client);
	manager_flush(m);
	return 0;
}

static int manager_setup_stdout(Manager *m) {
	HubClientOptions o = {
		.format = HUB_FORMAT_JSON,
		.overflow = HUB_OVERFLOW_DROP,
		.queue_bytes = m->config->client_queue_bytes,
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
	r = probes_new(c->pin_path, c->replace_incompatible_pins, &m->probes);
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
	r = server_new(m->event, m->hub, m->config, manager_flush_all, m, &m->server);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the event socket: %m");

	/* Probes last: every ring is mapped and read before the first event is emitted. */
	r = probes_apply(m->probes, c->probes);
	if (r < 0)
		return r;

	snprintf(events_pin, sizeof(events_pin), "%s/events", c->pin_path);
	(void)pins_get_map_id(events_pin, &map_id);
	if (cpuset_format(&m->cpus, cpus, sizeof(cpus)) < 0)
		strcpy(cpus, "?");
	log_info("Pinned perf event array at %s (map id %u, %u possible CPUs, BPF_F_PRESERVE_ELEMS)",
	         events_pin, map_id, probes_possible_cpus(m->probes));
	log_info("%zu reader thread%s serving %u CPUs (%s), %u pages per ring", m->n_readers,
	         m->n_readers == 1 ? "" : "s", cpuset_count(&m->cpus), cpus, c->pages_per_cpu);
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(m->probes, i))
			log_info("Probe %s attached%s", probe_to_string(i),
			         probes_was_reused(m->probes, i) ? " (pinned links reused)" : "");

	(void)sd_notify(false, "READY=1\nSTATUS=Running");
	return 0;
}

/* At exit, standard output gets everything it was offered (and no cut line), unless it does
 * not take it within a bounded time. */
static void manager_finish_stdout(Manager *m) {
	usec_t deadline = now(CLOCK_MONOTONIC) + 5 * USEC_PER_SEC;
	int r;

	if (!m->stdout_client)
		return;
	while ((r = hub_client_flush(m->stdout_client)) == 0) {
		struct pollfd p = { .fd = STDOUT_FILENO, .events = POLLOUT };
		usec_t t = now(CLOCK_MONOTONIC);

		if (t >= deadline || poll(&p, 1, (int)((deadline - t) / USEC_PER_MSEC) + 1) <= 0) {
			log_warning("Standard output did not take the last events within 5s, giving up");
			return;
		}
	}
	if (r < 0)
		log_warning_errno(r, "Failed to write the last events to standard output: %m");
}

/* The figures a user needs to see that nothing was lost uncounted, logged at exit. */
static void manager_log_stats(Manager *m) {
	for (size_t i = 0; i < m->n_readers; i++) {
		const Reader *r = m->readers[i];
		const ReaderStats *rs = reader_stats(r);
		char cpus[256];

		if (cpuset_format(reader_cpus(r), cpus, sizeof(cpus)) < 0)
			strcpy(cpus, "?");
		log_info("Reader %u (CPUs %s): %" PRIu64 " events, %" PRIu64 " wakeups, %" PRIu64 " batches",
		         reader_id(r), cpus, STAT_LOAD(rs->events), STAT_LOAD(rs->wakeups), STAT_LOAD(rs->batches));
		for (unsigned e = 1; e < _DECODE_ERROR_MAX; e++)
			if (STAT_LOAD(rs->malformed_by_reason[e]))
				log_info("Reader %u: %" PRIu64 " records rejected: %s", reader_id(r),
				         STAT_LOAD(rs->malformed_by_reason[e]), decode_error_to_string(e));
		for (size_t k = 0; k < reader_n_rings(r); k++) {
			const CpuStats *cs = reader_cpu_stats(r, k);

			log_info("CPU %u: %" PRIu64 " received, %" PRIu64 " lost, %" PRIu64 " malformed, %" PRIu64
			         " bytes", ring_cpu(reader_ring(r, k)), STAT_LOAD(cs->received), STAT_LOAD(cs->lost),
			         STAT_LOAD(cs->malformed), STAT_LOAD(cs->bytes));
		}
	}
	for (size_t i = 0; i < m->n_readers; i++) {
		CgroupCacheStats us;

		reader_unit_cache_stats(m->readers[i], &us);
		if (us.misses > 0)
			log_info("Reader %u: units: %" PRIu64 " cache hits, %" PRIu64 " resolved, %" PRIu64
			         " failed, %" PRIu64 " evicted", reader_id(m->readers[i]), us.hits, us.misses,
			         us.failures, us.evictions);
	}
	if (m->stdout_client) {
		HubClientStats cs;

		hub_client_get_stats(m->stdout_client, &cs);
		log_info("Standard output: %" PRIu64 " offered, %" PRIu64 " sent, %" PRIu64 " dropped",
		         cs.offered, cs.queued, cs.dropped);
	}
	if (m->server) {
		ServerStats ss;
		uint64_t refused = 0;

		server_get_stats(m->server, &ss);
		for (unsigned e = 0; e < _PROTOCOL_ERROR_MAX; e++)
			refused += ss.refused[e];
		log_info("Socket clients: %" PRIu64 " connections, %" PRIu64 " subscribed, %" PRIu64
		         " refused with an error; %" PRIu64 " events offered, %" PRIu64 " sent, %" PRIu64
		         " dropped; %" PRIu64 " passed fds closed",
		         ss.accepted, ss.subscribed, refused, ss.gone_offered, ss.gone_sent, ss.gone_dropped,
		         ss.fds_closed);
	}
}

int manager_run(Manager *m) {
	int r;

	r = sd_event_add_signal(m->event, NULL, SIGTERM, NULL, NULL);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGINT, NULL, NULL);
	if (r < 0)
		return log_error_errno(r, "Failed to watch signals: %m");

	r = sd_event_loop(m->event);
	if (r < 0)
		return log_error_errno(r, "Event loop failed: %m");

	(void)sd_notify(false, "STOPPING=1\nSTATUS=Draining rings");
	/* Readers drain what the kernel published before they stop; then the last output goes
	 * out. A blocked stdout is not waited for. */
	manager_stop_readers(m);
	manager_flush(m);
	if (m->server)
		server_shutdown(m->server);
	manager_finish_stdout(m);
	manager_unmap_rings(m);
	manager_log_stats(m);
	return 0;
}
