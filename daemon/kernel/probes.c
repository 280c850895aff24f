/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Built-in probes: skeleton lifecycle, pinned maps and pinned links. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel/counter-names.h"
#include "kernel/grace.h"
#include "base/log.h"
#include "kernel/pins.h"
#include "kernel/probes.h"
#include "probes.skel.h"
#include "probes_compat.skel.h"
#include "skeleton-compat.h"
#include "time-util.h"

#define MAX_PROGS_PER_PROBE 3

struct Probes {
	struct probes_bpf *skel;
	char *pin_path;
	int lock_fd; /* the pin root, flock()ed for as long as we serve it */
	unsigned n_cpus;
	/* Per probe and program: the link fd we hold (pinned), or -EBADF. */
	int link_fd[_PROBE_MAX][MAX_PROGS_PER_PROBE];
	/* What each program attached now had run when this daemon attached or reused it, and what
	 * the programs detached since ran meanwhile (probes_read_run_stats()). */
	ProbeRunStats run_base[_PROBE_MAX][MAX_PROGS_PER_PROBE];
	ProbeRunStats run_done[_PROBE_MAX];
	struct perfrelay_demand *demand; /* the pinned "demand", mmapped */
	size_t demand_size;
	int stats_fd; /* BPF_ENABLE_STATS while held, or -EBADF */
	bool enabled[_PROBE_MAX];
	bool reused[_PROBE_MAX];
	bool counters_created; /* no "counters" pin existed: this load made it */
	bool received_created; /* no "received" pin existed: this load made it */
	bool no_pin_links;     /* the kernel cannot pin these links (kernel-features.h: link_pin) */
	/* The counters programs' links (docs/counters.md), attached while counters are on, and
	 * the counters they read (what counters_config says; 0: off). */
	int counters_link_fd[2];
	uint64_t exit_records_dropped; /* exit records left for a switch program that went */
	uint32_t counters_mask;
	/* Per possible CPU: the counters tick's link (its sampling event inside), or NULL. Not
	 * pinned: a tick needs the event, which only lives with this daemon. */
	struct bpf_link **tick_links;
};

/* The kernel's own "operation not supported" (include/linux/errno.h), which some BPF commands
 * return to userspace as it is; no userspace header names it. */
#define KERNEL_ENOTSUPP 524

/* The counters programs, in attach order: the reaper first, so that no process entry is made
 * that nothing removes. */
static const char *const counters_prog_names[2] = { "handle_counters_reap", "handle_switch" };
#define COUNTERS_SWITCH        1 /* the index of handle_switch */
/* How long turning counters off waits for the exit records left for the switch program. */
#define EXIT_PENDING_WAIT_USEC (1000 * 1000)

/* The programs of each probe, in attach order. For open and connect the reaper (thread exit)
 * and the syscall exit come before the syscall enter, so that no pending entry is made that
 * nothing would take out again. */
static const char *const probe_prog_names[_PROBE_MAX][MAX_PROGS_PER_PROBE] = {
	[PROBE_EXEC] = { "handle_exec" },
	[PROBE_EXIT] = { "handle_exit" },
	[PROBE_FORK] = { "handle_fork" },
	[PROBE_OPEN] = { "handle_open_reap", "handle_open_exit", "handle_open_enter" },
	[PROBE_CONNECT] = { "handle_connect_reap", "handle_connect_exit", "handle_connect_enter" },
};

static struct bpf_program *probe_prog(const Probes *p, unsigned probe, unsigned i) {
	if (!probe_prog_names[probe][i])
		return NULL;
	return bpf_object__find_program_by_name(p->skel->obj, probe_prog_names[probe][i]);
}

static bool is_probe_prog_name(const char *name) {
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		for (unsigned k = 0; k < MAX_PROGS_PER_PROBE; k++)
			if (probe_prog_names[i][k] && streq(probe_prog_names[i][k], name))
				return true;
	for (unsigned k = 0; k < ELEMENTSOF(counters_prog_names); k++)
		if (streq(counters_prog_names[k], name))
			return true;
	return false;
}

/* Maps only the probes use: an incompatible pin of one of them (PendingSyscalls= changed) is
 * replaced without asking, as nobody else reads them; at worst a few pending syscalls lose
 * their record. */
static bool is_private_map(const struct bpf_map *m) {
	const char *n = bpf_map__name(m);

	return streq(n, "open_args") || streq(n, "connect_args") || streq(n, "probes_scratch") ||
		streq(n, "path_scratch") || streq(n, "counters_last") || streq(n, "counters_procs") ||
		streq(n, "counters_cgroups") || streq(n, "counters_cgroups_users") ||
		streq(n, "counters_users_cgroup_ids") || streq(n, "exit_pending") || streq(n, "demand") ||
		streq(n, "throttle");
}

/* Links under links/ whose program this build does not have (a probe renamed or removed by an
 * upgrade) would stay attached forever, emitting with the old program: unpin them. */
static int probes_prune_stale_links(Probes *p) {
	_cleanup_free_ char *links = NULL;
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (asprintf(&links, "%s/links", p->pin_path) < 0)
		return -ENOMEM;
	d = opendir(links);
	if (!d)
		return errno == ENOENT ? 0 : log_error_errno(-errno, "Failed to open %s: %m", links);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || is_probe_prog_name(de->d_name))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
			r = log_error_errno(
				-errno, "Failed to remove the stale link %s/%s: %m", links, de->d_name);
			continue;
		}
		log_notice(
			"Removed the stale link %s/%s: this build has no program of that name",
			links,
			de->d_name);
	}
	closedir(d);
	return r;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
	char buf[1024];
	size_t n;

	if (level == LIBBPF_DEBUG && log_max_level < LOG_DEBUG)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	if (n > 0 && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	log_internal(level == LIBBPF_WARN ? LOG_WARNING : LOG_DEBUG, "libbpf: %s", buf);
	return 0;
}

static bool tracefs_mounted(void) {
	return access("/sys/kernel/tracing/events", F_OK) == 0 ||
		access("/sys/kernel/debug/tracing/events", F_OK) == 0;
}

/* The counter arrays, by PERFRELAY_COUNTER_* id. */
static struct bpf_map *counter_array(const Probes *p, unsigned id) {
	struct bpf_map *const maps[PERFRELAY_COUNTERS_MAX] = {
		[PERFRELAY_COUNTER_TASK_CLOCK] = p->skel->maps.counter_task_clock,
		[PERFRELAY_COUNTER_CONTEXT_SWITCHES] = p->skel->maps.counter_context_switches,
		[PERFRELAY_COUNTER_PAGE_FAULTS] = p->skel->maps.counter_page_faults,
		[PERFRELAY_COUNTER_CPU_MIGRATIONS] = p->skel->maps.counter_cpu_migrations,
		[PERFRELAY_COUNTER_CYCLES] = p->skel->maps.counter_cycles,
		[PERFRELAY_COUNTER_INSTRUCTIONS] = p->skel->maps.counter_instructions,
		[PERFRELAY_COUNTER_CACHE_MISSES] = p->skel->maps.counter_cache_misses,
		[PERFRELAY_COUNTER_BRANCH_MISSES] = p->skel->maps.counter_branch_misses,
	};

	return id < PERFRELAY_COUNTERS_MAX ? maps[id] : NULL;
}

/* Each counter array is pinned at <PinPath>/perf-counters/<name> (docs/counters.md). */
static int set_counter_pins(Probes *p) {
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++) {
		char path[PATH_MAX];
		int r;

		bpf_map__set_max_entries(counter_array(p, i), p->n_cpus);
		snprintf(path, sizeof(path), "%s/perf-counters/%s", p->pin_path, counter_to_string(i));
		r = bpf_map__set_pin_path(counter_array(p, i), path);
		if (r < 0)
			return log_error_errno(r, "Failed to set the pin path %s: %m", path);
	}
	return 0;
}

/* probes_open(): the object the kernel can load (kernel_features_need_compat()). */
SKELETON_OPEN_COMPAT(probes)

int probes_new(const char *pin_path, bool replace_incompatible, const ProbesLimits *limits, Probes **ret) {
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = pin_path);
	struct perfrelay_counters_config cfg = {};
	_cleanup_(probes_freep) Probes *p = NULL;
	struct bpf_map *m;
	int r;

	libbpf_set_print(libbpf_print);

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->lock_fd = -EBADF;
	p->stats_fd = -EBADF;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		for (unsigned k = 0; k < MAX_PROGS_PER_PROBE; k++)
			p->link_fd[i][k] = -EBADF;
	for (unsigned k = 0; k < ELEMENTSOF(p->counters_link_fd); k++)
		p->counters_link_fd[k] = -EBADF;
	p->pin_path = strdup(pin_path);
	if (!p->pin_path)
		return -ENOMEM;

	/* Before any pin is touched: two daemons on one pin root would take each other's slots. */
	r = pins_lock(pin_path);
	if (r == -EWOULDBLOCK)
		return log_error_errno(
			r,
			"Another perfrelayd serves %s; refusing to start a second one on the "
			"same PinPath=",
			pin_path);
	if (r < 0)
		return log_error_errno(r, "Failed to lock %s: %m", pin_path);
	p->lock_fd = r;

	r = libbpf_num_possible_cpus();
	if (r <= 0)
		return log_error_errno(r ?: -EINVAL, "Failed to read the number of possible CPUs: %m");
	p->n_cpus = r;

	p->skel = probes_open(&opts, limits->compat);
	if (!p->skel)
		return log_error_errno(negative_errno(), "Failed to open the probes BPF object: %m");

	/* The array must have one slot per possible CPU whoever creates it (us or, first, a
	 * third-party producer); set it before checking pins so the check compares it. */
	bpf_map__set_max_entries(p->skel->maps.events, p->n_cpus);
	bpf_map__set_max_entries(p->skel->maps.critical, p->n_cpus);
	bpf_map__set_max_entries(p->skel->maps.recorder, p->n_cpus);
	/* One struct perfrelay_received per (producer, possible CPU). */
	bpf_map__set_max_entries(p->skel->maps.received, PERFRELAY_MAX_PRODUCERS * p->n_cpus);
	bpf_map__set_max_entries(p->skel->maps.open_args, limits->pending_syscalls);
	bpf_map__set_max_entries(p->skel->maps.connect_args, limits->pending_syscalls);
	bpf_map__set_max_entries(p->skel->maps.counters_procs, limits->counters_max_processes);
	bpf_map__set_max_entries(p->skel->maps.counters_cgroups, limits->counters_max_cgroups);
	/* Every cgroup the watch can know (CGROUP_WATCH_MAX_WATCHES): one a user made but missing
	 * here would take a row outside the users' share. */
	bpf_map__set_max_entries(p->skel->maps.counters_users_cgroup_ids, 65536);
	r = set_counter_pins(p);
	if (r < 0)
		return r;

	bpf_object__for_each_map(m, p->skel->obj) {
		const char *path = bpf_map__pin_path(m);

		if (!path)
			continue;
		r = pins_check_map(path, m, replace_incompatible || is_private_map(m));
		if (r < 0)
			return r;
	}

	/* Whether the accounting pins exist before libbpf makes missing ones: the ledger's figures
	 * only mean something against the counters they were kept beside. */
	p->counters_created = access(bpf_map__pin_path(p->skel->maps.counters), F_OK) < 0;
	p->received_created = access(bpf_map__pin_path(p->skel->maps.received), F_OK) < 0;

	/* Programs are loaded even when pinned links exist: attaching or replacing a probe later
	 * (Probes= on reload, SetProbeEnabled) needs them, and comparing tags needs them. */
	r = probes_bpf__load(p->skel);
	if (r < 0)
		return log_error_errno(
			r, "Failed to load the probes BPF object (maps pinned under %s): %m", pin_path);
	r = probes_prune_stale_links(p);
	if (r < 0)
		return r;
	p->demand_size = ALIGN_TO(sizeof(struct perfrelay_demand), (size_t) sysconf(_SC_PAGESIZE));
	p->demand = mmap(
		NULL, p->demand_size, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(p->skel->maps.demand), 0);
	if (p->demand == MAP_FAILED) {
		p->demand = NULL;
		return log_error_errno(negative_errno(), "Failed to map %s/demand: %m", pin_path);
	}
	/* What pinned counters programs of an earlier daemon read now: kept until
	 * probes_set_counters(), so that attaching the exit probe first does not stop them. */
	if (bpf_map_lookup_elem(bpf_map__fd(p->skel->maps.counters_config), &(uint32_t){ 0 }, &cfg) == 0)
		p->counters_mask = cfg.mask;
	*ret = TAKE_PTR(p);
	return 0;
}

Probes *probes_free(Probes *p) {
	if (!p)
		return NULL;
	if (p->demand)
		munmap(p->demand, p->demand_size);
	safe_close(p->stats_fd);
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		for (unsigned k = 0; k < MAX_PROGS_PER_PROBE; k++)
			safe_close(p->link_fd[i][k]);
	for (unsigned k = 0; k < ELEMENTSOF(p->counters_link_fd); k++)
		safe_close(p->counters_link_fd[k]);
	for (unsigned c = 0; p->tick_links && c < p->n_cpus; c++)
		bpf_link__destroy(p->tick_links[c]);
	free(p->tick_links);
	probes_bpf__destroy(p->skel);
	safe_close(p->lock_fd);
	free(p->pin_path);
	free(p);
	return NULL;
}

int probes_events_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.events);
}
int probes_critical_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.critical);
}
int probes_counters_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.counters);
}
int probes_received_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.received);
}
int probes_idle_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.idle);
}
int probes_recorder_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.recorder);
}
int probes_recorder_on_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.recorder_on);
}
int probes_recorder_stats_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.recorder_stats);
}
bool probes_counters_created(const Probes *p) {
	return p->counters_created;
}
bool probes_received_created(const Probes *p) {
	return p->received_created;
}
unsigned probes_possible_cpus(const Probes *p) {
	return p->n_cpus;
}
bool probes_is_enabled(const Probes *p, unsigned probe) {
	return probe < _PROBE_MAX && p->enabled[probe];
}
bool probes_was_reused(const Probes *p, unsigned probe) {
	return probe < _PROBE_MAX && p->reused[probe];
}

#define PROG_MAPS_MAX 64u

typedef struct ProgIdentity {
	uint8_t tag[BPF_TAG_SIZE];
	uint32_t n_maps;
	uint32_t map_ids[PROG_MAPS_MAX]; /* sorted */
} ProgIdentity;

static int cmp_u32(const void *a, const void *b) {
	uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;

	return x < y ? -1 : x > y;
}

static int prog_identity(int prog_fd, ProgIdentity *ret) {
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);
	ProgIdentity id = {};

	info.nr_map_ids = PROG_MAPS_MAX;
	info.map_ids = (uint64_t) (uintptr_t) id.map_ids;
	if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) < 0)
		return negative_errno();
	if (info.nr_map_ids > PROG_MAPS_MAX)
		return -E2BIG;
	memcpy(id.tag, info.tag, BPF_TAG_SIZE);
	id.n_maps = info.nr_map_ids;
	qsort(id.map_ids, id.n_maps, sizeof(uint32_t), cmp_u32);
	*ret = id;
	return 0;
}

/* Whether the pinned link runs a program identical to prog that also uses the very same maps.
 * The tag alone is not enough: it hashes the instructions without the maps, so a link whose
 * program still counts into a "counters" or writes into an "events" that were replaced (or
 * re-created after a --cleanup that left the link) would look current and emit into maps that
 * nobody reads any more. (A program with a .rodata or .bss map never matches: those are
 * private to each load. The probes have none.) */
/* An fd of the program a link runs, or a negative errno. */
static int link_prog_fd(int link_fd) {
	struct bpf_link_info info = {};
	uint32_t len = sizeof(info);
	int fd;

	if (bpf_obj_get_info_by_fd(link_fd, &info, &len) < 0)
		return negative_errno();
	fd = bpf_prog_get_fd_by_id(info.prog_id);
	return fd < 0 ? negative_errno() : fd;
}

static bool link_runs_same_program(int link_fd, const struct bpf_program *prog) {
	_cleanup_close_ int fd = link_prog_fd(link_fd);
	ProgIdentity a, b;

	if (fd < 0)
		return false;
	if (prog_identity(fd, &a) < 0 || prog_identity(bpf_program__fd(prog), &b) < 0)
		return false;
	return memcmp(a.tag, b.tag, BPF_TAG_SIZE) == 0 && a.n_maps == b.n_maps &&
		memcmp(a.map_ids, b.map_ids, sizeof(uint32_t) * a.n_maps) == 0;
}

/* Attaches prog (or reuses its pinned link) for `what` (a probe's name, or "counters") and
 * stores the link fd we hold in *ret_fd. 1 if the pinned link was reused. */
static int attach_prog(Probes *p, const char *what, const struct bpf_program *prog, int *ret_fd) {
	char path[PATH_MAX];
	_cleanup_close_ int old = -EBADF;
	struct bpf_link *link;
	int r;

	snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, bpf_program__name(prog));

	old = bpf_obj_get(path);
	if (old >= 0 && link_runs_same_program(old, prog)) {
		*ret_fd = TAKE_FD(old);
		return 1;
	}

	if (!tracefs_mounted())
		return log_error_errno(
			-ENOENT,
			"Probe %s: tracefs is not mounted (mount -t tracefs tracefs "
			"/sys/kernel/tracing)",
			what);
	link = bpf_program__attach(prog);
	if (!link)
		return log_error_errno(
			negative_errno(), "Probe %s: failed to attach %s: %m", what, bpf_program__name(prog));
	if (old >= 0) {
		/* A different program (an upgrade) holds the pin: the new one is attached already,
		 * so swapping the pin leaves no gap, at worst a few duplicate events. */
		log_notice("Probe %s: replacing the pinned link %s (program or its maps changed)", what, path);
		if (unlink(path) < 0 && errno != ENOENT) {
			r = log_error_errno(-errno, "Failed to remove pin %s: %m", path);
			bpf_link__destroy(link);
			return r;
		}
	}
	r = p->no_pin_links ? 0 : bpf_link__pin(link, path);
	if (r < 0) {
		bpf_link__destroy(link);
		return log_error_errno(r, "Probe %s: failed to pin link at %s: %m", what, path);
	}
	*ret_fd = fcntl(bpf_link__fd(link), F_DUPFD_CLOEXEC, 3);
	r = *ret_fd < 0 ? negative_errno() : 0;
	/* The pin and our duplicate keep the link alive; the libbpf object goes. Not disconnected
	 * first: for these links libbpf's "detach" only closes its own descriptors (the link's and,
	 * for tracepoints, the perf event's), and a disconnected link would leak them, so that the
	 * probe stayed attached after detach_probe() (SetProbeEnabled, Probes= on reload). */
	bpf_link__destroy(link);
	return r;
}

/* What a program has run (counted while some process holds BPF_ENABLE_STATS). */
static int prog_run(int prog_fd, ProbeRunStats *ret) {
	struct bpf_prog_info prog = {};
	uint32_t len = sizeof(prog);

	if (bpf_obj_get_info_by_fd(prog_fd, &prog, &len) < 0)
		return negative_errno();
	*ret = (ProbeRunStats){ .run_ns = prog.run_time_ns, .runs = prog.run_cnt };
	return 0;
}

/* What a probe's i-th program has run: the program behind its link, which may be an earlier
 * daemon's (a pinned link reused). Without pinned links (link_pin) nothing is reused, and the
 * "link" of a tracepoint is its perf event (attached with an ioctl, no BPF link to ask): the
 * program is this daemon's own. */
static int probe_prog_run(const Probes *p, unsigned probe, unsigned i, ProbeRunStats *ret) {
	_cleanup_close_ int fd = -EBADF;

	if (p->no_pin_links)
		return prog_run(bpf_program__fd(probe_prog(p, probe, i)), ret);
	fd = link_prog_fd(p->link_fd[probe][i]);
	if (fd < 0)
		return fd;
	return prog_run(fd, ret);
}

static int detach_probe(Probes *p, unsigned probe) {
	int r = 0;

	/* In reverse attach order: the syscall enter goes first, so that no pending entry is made
	 * once its exit and reaper are gone. */
	for (unsigned i = MAX_PROGS_PER_PROBE; i-- > 0;) {
		const struct bpf_program *prog = probe_prog(p, probe, i);
		char path[PATH_MAX];

		if (!prog)
			continue;
		snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, bpf_program__name(prog));
		/* A pin an earlier daemon left (a probe off from the start): hold the link first.
		 * The last reference must go with our close(), which detaches at once; dropped by
		 * the unlink, it goes to a kernel worker (6.x), and the probe could still emit after
		 * READY=1. */
		if (p->link_fd[probe][i] < 0)
			p->link_fd[probe][i] = bpf_obj_get(path);
		else if (p->enabled[probe]) {
			ProbeRunStats now;

			/* What it ran under this daemon stays in the probe's figures. */
			if (probe_prog_run(p, probe, i, &now) >= 0) {
				p->run_done[probe].run_ns += now.run_ns - p->run_base[probe][i].run_ns;
				p->run_done[probe].runs += now.runs - p->run_base[probe][i].runs;
			}
		}
		if (unlink(path) < 0 && errno != ENOENT)
			r = log_error_errno(-errno, "Failed to remove pin %s: %m", path);
		/* With the pin gone, closing our fd detaches the program. */
		p->link_fd[probe][i] = safe_close(p->link_fd[probe][i]);
	}
	p->enabled[probe] = false;
	return r;
}

/* Tells the counters programs what to read (p->counters_mask) and who takes a process's
 * totals at exit (counters.bpf.h): the exit probe, and while the switch program is attached
 * too, at the process's last switch (PERFRELAY_EXIT_PROBE_DEFER). */
static int write_counters_config(Probes *p, bool exit_probe) {
	bool defer = exit_probe && p->counters_mask != 0 && p->counters_link_fd[COUNTERS_SWITCH] >= 0;
	struct perfrelay_counters_config cfg = {
		.mask = p->counters_mask,
		.exit_probe = (exit_probe ? PERFRELAY_EXIT_PROBE_ON : 0) |
			(defer ? PERFRELAY_EXIT_PROBE_DEFER : 0),
	};
	uint32_t key = 0;

	if (bpf_map_update_elem(bpf_map__fd(p->skel->maps.counters_config), &key, &cfg, BPF_ANY) < 0)
		return log_error_errno(negative_errno(), "Failed to write counters_config: %m");
	return 0;
}

/* The pending map of a probe that makes its record at a syscall's exit, or -EBADF. */
static int probe_pending_fd(const Probes *p, unsigned probe) {
	switch (probe) {
	case PROBE_OPEN:
		return bpf_map__fd(p->skel->maps.open_args);
	case PROBE_CONNECT:
		return bpf_map__fd(p->skel->maps.connect_args);
	}
	return -EBADF;
}

/* Whether none of the probe's programs runs: no link held, none pinned. */
static bool probe_all_detached(const Probes *p, unsigned probe) {
	for (unsigned i = 0; i < MAX_PROGS_PER_PROBE; i++) {
		const struct bpf_program *prog = probe_prog(p, probe, i);
		char path[PATH_MAX];

		if (!prog)
			continue;
		if (p->link_fd[probe][i] >= 0)
			return false;
		snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, bpf_program__name(prog));
		if (access(path, F_OK) == 0 || errno != ENOENT)
			return false;
	}
	return true;
}

/* Before a detached probe is attached again: what its pending map still holds are syscalls that
 * entered while it was attached and returned while it was not (a thread blocked in openat() when
 * it was detached). Left there, the exit of a syscall that entered while the probe was off and
 * returns once it is on again would emit one of them with its own result. Each is removed and
 * counted as filtered for the probe (its syscall ended unobserved, like one that entered while
 * the probe was off: hits = filtered + attempts). Safe only because every program of the probe
 * is detached: nothing else writes the map or the producer's filtered count meanwhile. */
static void probe_sweep_pending(Probes *p, unsigned probe) {
	int fd = probe_pending_fd(p, probe), filtered_fd = bpf_map__fd(p->skel->maps.filtered);
	uint32_t producer = probe_producer(probe), max;
	_cleanup_free_ uint64_t *v = NULL;
	uint64_t key, n = 0;

	if (fd < 0 || !probe_all_detached(p, probe))
		return;
	max = bpf_map__max_entries(probe == PROBE_OPEN ? p->skel->maps.open_args : p->skel->maps.connect_args);
	while (n < max && bpf_map_get_next_key(fd, NULL, &key) == 0)
		if (bpf_map_delete_elem(fd, &key) == 0)
			n++;
	if (n == 0)
		return;
	v = calloc(p->n_cpus, sizeof(*v));
	if (!v || bpf_map_lookup_elem(filtered_fd, &producer, v) < 0) {
		log_warning(
			"Probe %s: failed to count %" PRIu64 " syscalls that ended while it was off",
			probe_to_string(probe),
			n);
		return;
	}
	v[0] += n;
	if (bpf_map_update_elem(filtered_fd, &producer, v, BPF_ANY) < 0)
		log_warning_errno(
			negative_errno(),
			"Probe %s: failed to count %" PRIu64 " syscalls that ended while it was off: %m",
			probe_to_string(probe),
			n);
	else
		log_debug(
			"Probe %s: %" PRIu64 " syscalls that ended while it was off, removed as filtered",
			probe_to_string(probe),
			n);
}

int probes_set_enabled(Probes *p, unsigned probe, bool enabled) {
	bool all_reused = true;
	int r;

	if (probe >= _PROBE_MAX)
		return -EINVAL;
	if (!enabled) {
		/* The reaper takes over the processes' counter totals before the exit probe goes. */
		if (probe == PROBE_EXIT)
			(void) write_counters_config(p, false);
		return detach_probe(p, probe);
	}
	if (p->enabled[probe])
		return 0;

	probe_sweep_pending(p, probe);
	for (unsigned i = 0; i < MAX_PROGS_PER_PROBE; i++) {
		const struct bpf_program *prog = probe_prog(p, probe, i);

		if (!prog)
			continue;
		r = attach_prog(p, probe_to_string(probe), prog, &p->link_fd[probe][i]);
		if (r < 0) {
			detach_probe(p, probe);
			return r;
		}
		all_reused &= r > 0;
		p->run_base[probe][i] = (ProbeRunStats){};
		(void) probe_prog_run(p, probe, i, &p->run_base[probe][i]);
	}
	p->enabled[probe] = true;
	p->reused[probe] = all_reused;
	if (probe == PROBE_EXIT)
		(void) write_counters_config(p, true);
	return 0;
}

static void detach_counters(Probes *p) {
	for (unsigned k = ELEMENTSOF(counters_prog_names); k-- > 0;) {
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, counters_prog_names[k]);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warning_errno(-errno, "Failed to remove pin %s: %m", path);
		p->counters_link_fd[k] = safe_close(p->counters_link_fd[k]);
	}
}

/* Empties the process table: entries of processes charged while counters were on would
 * otherwise stay until those processes exit, or forever if counters stay off. */
static void clear_counters_procs(Probes *p) {
	int fd = bpf_map__fd(p->skel->maps.counters_procs);
	uint32_t key;

	while (bpf_map_get_next_key(fd, NULL, &key) == 0)
		if (bpf_map_delete_elem(fd, &key) < 0)
			break;
}

/* The counters links an earlier daemon pinned, where this one holds none (a start with
 * Counters=none after a daemon that counted): held so that the switch program is known to run
 * while its exit records drain, and so that our close() after the unlink detaches at once, as
 * for a probe (detach_probe()). */
static void hold_pinned_counters_links(Probes *p) {
	for (unsigned k = 0; k < ELEMENTSOF(counters_prog_names); k++) {
		char path[PATH_MAX];
		int fd;

		if (p->counters_link_fd[k] >= 0)
			continue;
		snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, counters_prog_names[k]);
		fd = bpf_obj_get(path);
		p->counters_link_fd[k] = fd >= 0 ? fd : -EBADF;
	}
}

/* Turning counters off. The exit probe no longer leaves records for the switch program (the
 * config was written); the ones it left are emitted by that program as their processes finish
 * their teardown. While it runs, wait for those, a bounded time; then detach it and wait out
 * a run in flight (one grace period), so that a record is either emitted by it or removed
 * here and counted, never both. What is left (a process stuck in its exit for longer, or no
 * switch program to emit them) is removed and counted: none may stay behind, where a later
 * switch program would emit one for a thread that reuses its tid. */
static void counters_off(Probes *p) {
	int fd = bpf_map__fd(p->skel->maps.exit_pending);
	uint64_t until = now_usec(CLOCK_MONOTONIC) + EXIT_PENDING_WAIT_USEC;
	bool ran = p->counters_link_fd[COUNTERS_SWITCH] >= 0;
	uint32_t key;
	unsigned n = 0;

	while (ran && bpf_map_get_next_key(fd, NULL, &key) == 0 && now_usec(CLOCK_MONOTONIC) < until)
		usleep(10 * 1000);
	detach_counters(p);
	if (ran)
		(void) grace_period(NULL); /* cannot fail where the daemon started: it settled with it */
	while (bpf_map_get_next_key(fd, NULL, &key) == 0 && bpf_map_delete_elem(fd, &key) == 0)
		n++;
	clear_counters_procs(p);
	if (n == 0)
		return;
	p->exit_records_dropped += n;
	log_warning(
		"Counters off: %u exit events of processes still in their teardown %s were dropped "
		"(counted: exit_dropped in GetStats() counters)",
		n,
		ran ? "after a second" : "with no switch program to emit them");
}

uint64_t probes_exit_records_dropped(const Probes *p) {
	return p->exit_records_dropped;
}

int probes_set_counters(Probes *p, uint32_t mask) {
	int r;

	p->counters_mask = mask;
	if (mask == 0) {
		hold_pinned_counters_links(p);
		r = write_counters_config(p, p->enabled[PROBE_EXIT]);
		counters_off(p);
		return r;
	}
	r = write_counters_config(p, p->enabled[PROBE_EXIT]);
	if (r < 0)
		return r;
	for (unsigned k = 0; k < ELEMENTSOF(counters_prog_names); k++) {
		const struct bpf_program *prog = bpf_object__find_program_by_name(
			p->skel->obj, counters_prog_names[k]);

		if (p->counters_link_fd[k] >= 0)
			continue;
		r = prog ? attach_prog(p, "counters", prog, &p->counters_link_fd[k]) : -ENOENT;
		if (r < 0) {
			p->counters_mask = 0;
			(void) write_counters_config(p, p->enabled[PROBE_EXIT]);
			counters_off(p);
			return r;
		}
	}
	/* The switch program runs: the exit probe may leave its records for it. */
	return write_counters_config(p, p->enabled[PROBE_EXIT]);
}

int probes_counters_tick(Probes *p, unsigned cpu, uint64_t period_ns) {
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.sample_period = period_ns,
	};
	struct bpf_link *link;
	int fd;

	if (cpu >= p->n_cpus)
		return -ERANGE;
	if (!p->tick_links) {
		p->tick_links = calloc(p->n_cpus, sizeof(*p->tick_links));
		if (!p->tick_links)
			return -ENOMEM;
	}
	fd = (int) syscall(SYS_perf_event_open, &attr, -1, (int) cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	link = bpf_program__attach_perf_event(p->skel->progs.handle_counters_tick, fd);
	if (!link) {
		int r = negative_errno();

		close(fd);
		return r;
	}
	/* The link owns the event now; a CPU that went offline and back gets a new one. */
	bpf_link__destroy(p->tick_links[cpu]);
	p->tick_links[cpu] = link;
	return 0;
}

int probes_counter_array_fd(const Probes *p, unsigned id) {
	const struct bpf_map *m = counter_array(p, id);

	return m ? bpf_map__fd(m) : -EINVAL;
}
int probes_counters_cgroups_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.counters_cgroups);
}
int probes_counters_user_ids_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.counters_users_cgroup_ids);
}
int probes_counters_users_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.counters_cgroups_users);
}
int probes_counters_stats_fd(const Probes *p) {
	return bpf_map__fd(p->skel->maps.counters_stats);
}

void probes_set_pin_links(Probes *p, bool pin) {
	p->no_pin_links = !pin;
}

uint32_t probe_producer(unsigned probe) {
	static const uint32_t producers[_PROBE_MAX] = {
		[PROBE_EXEC] = PERFRELAY_PRODUCER_EXEC,       [PROBE_EXIT] = PERFRELAY_PRODUCER_EXIT,
		[PROBE_FORK] = PERFRELAY_PRODUCER_FORK,       [PROBE_OPEN] = PERFRELAY_PRODUCER_OPEN,
		[PROBE_CONNECT] = PERFRELAY_PRODUCER_CONNECT,
	};

	return probe < _PROBE_MAX ? producers[probe] : 0;
}

int probe_of_producer(uint32_t producer) {
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probe_producer(i) == producer)
			return (int) i;
	return -ENOENT;
}

/* Producer ids read per batch syscall: 64 ids of 16 bytes per possible CPU. */
#define COUNTERS_BATCH 64u

static void add_counters(
	const struct perfrelay_counters *v,
	unsigned n_cpus,
	struct perfrelay_counters *sum,
	struct perfrelay_counters *per_cpu,
	struct perfrelay_counters *one) {
	for (unsigned c = 0; c < n_cpus; c++) {
		sum->attempts += v[c].attempts;
		sum->failures += v[c].failures;
		if (one) {
			one->attempts += v[c].attempts;
			one->failures += v[c].failures;
		}
		if (per_cpu) {
			per_cpu[c].attempts += v[c].attempts;
			per_cpu[c].failures += v[c].failures;
		}
	}
}

/* Every producer id's per-CPU counters, summed: over all into *ret_sum, per CPU into per_cpu
 * (n_cpus entries, or NULL), per producer into per_producer (PERFRELAY_MAX_PRODUCERS entries, or
 * NULL). */
static int read_counters_all(
	const Probes *p,
	struct perfrelay_counters *ret_sum,
	struct perfrelay_counters *per_cpu,
	struct perfrelay_counters *per_producer) {
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	_cleanup_free_ struct perfrelay_counters *v = NULL, *cpus = NULL;
	struct perfrelay_counters sum = {};
	uint32_t keys[COUNTERS_BATCH], in = 0, out = 0;
	int fd = probes_counters_fd(p);
	bool first = true, batched = true;

	v = calloc((size_t) COUNTERS_BATCH * p->n_cpus, sizeof(*v));
	cpus = per_cpu ? calloc(p->n_cpus, sizeof(*cpus)) : NULL;
	if (!v || (per_cpu && !cpus))
		return -ENOMEM;
	if (per_producer)
		memset(per_producer, 0, PERFRELAY_MAX_PRODUCERS * sizeof(*per_producer));

	/* One syscall per 64 producer ids instead of one per id: the bus reads this every
	 * second. Kernels without batch operations on per-CPU arrays get the loop below: 5.10
	 * answers with the kernel's own ENOTSUPP (524), which no userspace header names. */
	for (;;) {
		uint32_t count = COUNTERS_BATCH;
		int r = bpf_map_lookup_batch(fd, first ? NULL : &in, &out, keys, v, &count, &opts);

		if (r < 0 && errno != ENOENT) {
			if (!first ||
			    (errno != EINVAL && errno != ENOTSUP && errno != EOPNOTSUPP &&
			     errno != KERNEL_ENOTSUPP))
				return negative_errno();
			batched = false; /* no batch support: fall back */
			break;
		}
		for (uint32_t i = 0; i < count; i++)
			add_counters(
				v + (size_t) i * p->n_cpus,
				p->n_cpus,
				&sum,
				cpus,
				per_producer && keys[i] < PERFRELAY_MAX_PRODUCERS ? &per_producer[keys[i]] :
										    NULL);
		if (r < 0) /* ENOENT: that was the last batch */
			break;
		in = out;
		first = false;
	}
	for (uint32_t id = 0; !batched && id < PERFRELAY_MAX_PRODUCERS; id++) {
		if (bpf_map_lookup_elem(fd, &id, v) < 0)
			return negative_errno();
		add_counters(v, p->n_cpus, &sum, cpus, per_producer ? &per_producer[id] : NULL);
	}
	if (per_cpu)
		memcpy(per_cpu, cpus, sizeof(*cpus) * p->n_cpus);
	*ret_sum = sum;
	return 0;
}

int probes_read_all_counters(
	const Probes *p, struct perfrelay_counters *ret_sum, struct perfrelay_counters *per_cpu) {
	return read_counters_all(p, ret_sum, per_cpu, NULL);
}

int probes_read_every_producer(const Probes *p, struct perfrelay_counters *per_producer) {
	struct perfrelay_counters sum;

	return read_counters_all(p, &sum, NULL, per_producer);
}

int probes_read_counters(
	const Probes *p,
	uint32_t producer,
	struct perfrelay_counters *ret_sum,
	struct perfrelay_counters *per_cpu) {
	_cleanup_free_ struct perfrelay_counters *v = NULL;
	struct perfrelay_counters sum = {};

	if (producer >= PERFRELAY_MAX_PRODUCERS)
		return -ERANGE;
	v = calloc(p->n_cpus, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (bpf_map_lookup_elem(probes_counters_fd(p), &producer, v) < 0)
		return negative_errno();
	add_counters(v, p->n_cpus, &sum, NULL, NULL);
	if (per_cpu)
		memcpy(per_cpu, v, sizeof(*v) * p->n_cpus);
	*ret_sum = sum;
	return 0;
}

/* The entry of hash map `fd` after the key at `prev` (NULL: the first): its key into `key`
 * (which may be `prev`: the kernel reads the old key before it writes the next) and its value
 * into `value`. 1 if there is one, 0 after the last, or a negative errno. A key deleted between
 * the two calls is passed over. Only the main thread deletes entries of the maps walked here
 * (pruning), so a walk meets each key once; callers bound it by the map's size anyway. */
static int hash_next(int fd, const void *prev, void *key, void *value) {
	for (;;) {
		if (bpf_map_get_next_key(fd, prev, key) < 0)
			return errno == ENOENT ? 0 : negative_errno();
		if (bpf_map_lookup_elem(fd, key, value) == 0)
			return 1;
		if (errno != ENOENT)
			return negative_errno();
		prev = key;
	}
}

int probes_read_unit_counts(const Probes *p, UnitCount **ret, size_t *ret_n, struct perfrelay_counters *ret_full) {
	int fd = bpf_map__fd(p->skel->maps.unit_counts);
	_cleanup_free_ struct perfrelay_counters *v = calloc(p->n_cpus, sizeof(*v));
	_cleanup_free_ UnitCount *out = calloc(PERFRELAY_UNIT_COUNTS_MAX, sizeof(*out));
	struct perfrelay_unit_key key;
	struct perfrelay_counters full = {};
	uint32_t zero = 0;
	size_t n = 0;
	int r = 0;

	if (!v || !out)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(p->skel->maps.unit_counts_full), &zero, v) < 0)
		return negative_errno();
	add_counters(v, p->n_cpus, &full, NULL, NULL);
	for (const void *prev = NULL; n < PERFRELAY_UNIT_COUNTS_MAX && (r = hash_next(fd, prev, &key, v)) > 0;
	     prev = &key) {
		struct perfrelay_counters sum = {};

		add_counters(v, p->n_cpus, &sum, NULL, NULL);
		out[n++] = (UnitCount){ .cgroup_id = key.cgroup_id,
					.producer = key.producer,
					.attempts = sum.attempts,
					.failures = sum.failures };
	}
	if (r < 0)
		return r;
	*ret = TAKE_PTR(out);
	*ret_n = n;
	*ret_full = full;
	return 0;
}

int probes_forget_unit_count(const Probes *p, uint64_t cgroup_id, uint32_t producer) {
	struct perfrelay_unit_key key = { .cgroup_id = cgroup_id, .producer = producer };

	if (bpf_map_delete_elem(bpf_map__fd(p->skel->maps.unit_counts), &key) < 0 && errno != ENOENT)
		return negative_errno();
	return 0;
}

int probes_read_filtered(const Probes *p, uint32_t producer, uint64_t *ret) {
	_cleanup_free_ uint64_t *v = NULL;
	uint64_t sum = 0;

	if (producer >= PERFRELAY_MAX_PRODUCERS)
		return -ERANGE;
	v = calloc(p->n_cpus, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(p->skel->maps.filtered), &producer, v) < 0)
		return negative_errno();
	for (unsigned i = 0; i < p->n_cpus; i++)
		sum += v[i];
	*ret = sum;
	return 0;
}

void probes_set_unwanted(Probes *p, uint64_t types) {
	/* Release: the exclusions written before are seen with it. A probe reads it with one
	 * plain load; the order against attaching or detaching comes from the bpf() syscalls
	 * that follow or precede it (demand.bpf.h). */
	__atomic_store_n(&p->demand->unwanted, types, __ATOMIC_RELEASE);
}

uint64_t probes_unwanted(const Probes *p) {
	return __atomic_load_n(&p->demand->unwanted, __ATOMIC_RELAXED);
}

void probes_set_exclusions(Probes *p, const CommList *comms, const PathPatternList *paths) {
	struct perfrelay_demand *d = p->demand;

	/* Counts to 0 first, entries next, counts last: a probe running meanwhile sees no
	 * exclusion, or only whole entries (a moment of a reload; documented in docs/config.md). */
	__atomic_store_n(&d->n_comms, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&d->n_paths, 0, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy(d->comms, comms->comms, sizeof(d->comms));
	memcpy(d->paths, paths->paths, sizeof(d->paths));
	__atomic_store_n(&d->n_comms, MIN(comms->n, PERFRELAY_DEMAND_COMMS), __ATOMIC_RELEASE);
	__atomic_store_n(&d->n_paths, MIN(paths->n, PERFRELAY_DEMAND_PATHS), __ATOMIC_RELEASE);
}

bool probes_set_excluded_cgroups(Probes *p, const uint64_t *ids, size_t n) {
	struct perfrelay_demand *d = p->demand;

	n = MIN(n, (size_t) PERFRELAY_DEMAND_UNIT_IDS);
	if (__atomic_load_n(&d->n_unit_ids, __ATOMIC_RELAXED) == n &&
	    memcmp(d->unit_ids, ids, n * sizeof(*ids)) == 0)
		return false;
	/* As probes_set_exclusions(): a probe running meanwhile sees none, or whole ids. */
	__atomic_store_n(&d->n_unit_ids, 0, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy(d->unit_ids, ids, n * sizeof(*ids));
	__atomic_store_n(&d->n_unit_ids, (uint32_t) n, __ATOMIC_RELEASE);
	return true;
}

void probes_set_unit_rate(Probes *p, uint64_t per_second) {
	/* One aligned store; a probe reads it with one load (demand.bpf.h). */
	__atomic_store_n(&p->demand->unit_rate, per_second, __ATOMIC_RELEASE);
}

int probes_read_throttled(const Probes *p, UnitThrottled **ret, size_t *ret_n) {
	int fd = bpf_map__fd(p->skel->maps.throttle);
	_cleanup_free_ UnitThrottled *out = calloc(PERFRELAY_THROTTLE_MAX, sizeof(*out));
	struct perfrelay_throttle v;
	uint64_t key;
	size_t n = 0;
	int r = 0;

	if (!out)
		return -ENOMEM;
	for (const void *prev = NULL; n < PERFRELAY_THROTTLE_MAX && (r = hash_next(fd, prev, &key, &v)) > 0;
	     prev = &key)
		out[n++] = (UnitThrottled){ .cgroup_id = key, .throttled = v.throttled };
	if (r < 0)
		return r;
	*ret = TAKE_PTR(out);
	*ret_n = n;
	return 0;
}

int probes_forget_throttle(const Probes *p, uint64_t cgroup_id) {
	if (bpf_map_delete_elem(bpf_map__fd(p->skel->maps.throttle), &cgroup_id) < 0 && errno != ENOENT)
		return negative_errno();
	return 0;
}

int probes_enable_run_stats(Probes *p) {
	int fd;

	if (p->stats_fd >= 0)
		return 0;
	fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (fd < 0)
		return negative_errno();
	p->stats_fd = fd;
	return 0;
}

bool probes_run_stats_enabled(const Probes *p) {
	return p->stats_fd >= 0;
}

int probes_read_run_stats(const Probes *p, unsigned probe, ProbeRunStats *ret) {
	ProbeRunStats sum;

	if (probe >= _PROBE_MAX)
		return -EINVAL;
	sum = p->run_done[probe];
	for (unsigned i = 0; p->enabled[probe] && i < MAX_PROGS_PER_PROBE; i++) {
		ProbeRunStats now;
		int r;

		if (p->link_fd[probe][i] < 0)
			continue;
		r = probe_prog_run(p, probe, i, &now);
		if (r < 0)
			return r;
		sum.run_ns += now.run_ns - p->run_base[probe][i].run_ns;
		sum.runs += now.runs - p->run_base[probe][i].runs;
	}
	*ret = sum;
	return 0;
}
