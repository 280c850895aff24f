/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Built-in probes: skeleton lifecycle, pinned maps and pinned links. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "config.h"
#include "log.h"
#include "pins.h"
#include "probes.h"
#include "probes.skel.h"

#define MAX_PROGS_PER_PROBE 2

struct Probes {
	struct probes_bpf *skel;
	char *pin_path;
	unsigned n_cpus;
	/* Per probe and program: the link fd we hold (pinned), or -EBADF. */
	int link_fd[_PROBE_MAX][MAX_PROGS_PER_PROBE];
	bool enabled[_PROBE_MAX];
	bool reused[_PROBE_MAX];
	bool no_pin_links;          /* the kernel cannot pin these links (kernelfeatures.h: link_pin) */
};

static struct bpf_program *probe_prog(const Probes *p, unsigned probe, unsigned i) {
	static const char *const names[_PROBE_MAX][MAX_PROGS_PER_PROBE] = {
		[PROBE_EXEC] = { "handle_exec" },
		[PROBE_EXIT] = { "handle_exit" },
		[PROBE_FORK] = { "handle_fork" },
		[PROBE_OPEN] = { "handle_open_enter", "handle_open_exit" },
		[PROBE_CONNECT] = { "handle_connect_enter", "handle_connect_exit" },
	};

	if (!names[probe][i])
		return NULL;
	return bpf_object__find_program_by_name(p->skel->obj, names[probe][i]);
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

int probes_new(const char *pin_path, bool replace_incompatible, Probes **ret) {
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = pin_path);
	Probes *p;
	struct bpf_map *m;
	int r;

	libbpf_set_print(libbpf_print);

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		for (unsigned k = 0; k < MAX_PROGS_PER_PROBE; k++)
			p->link_fd[i][k] = -EBADF;
	p->pin_path = strdup(pin_path);
	if (!p->pin_path) {
		probes_free(p);
		return -ENOMEM;
	}

	r = libbpf_num_possible_cpus();
	if (r <= 0) {
		probes_free(p);
		return log_error_errno(r ?: -EINVAL, "Failed to read the number of possible CPUs: %m");
	}
	p->n_cpus = r;

	p->skel = probes_bpf__open_opts(&opts);
	if (!p->skel) {
		r = negative_errno();
		probes_free(p);
		return log_error_errno(r, "Failed to open the probes BPF object: %m");
	}

	/* The array must have one slot per possible CPU whoever creates it (us or, first, a
	 * third-party producer); set it before checking pins so the check compares it. */
	bpf_map__set_max_entries(p->skel->maps.events, p->n_cpus);

	bpf_object__for_each_map(m, p->skel->obj) {
		const char *path = bpf_map__pin_path(m);

		if (!path)
			continue;
		r = pins_check_map(path, m, replace_incompatible);
		if (r < 0) {
			probes_free(p);
			return r;
		}
	}

	/* Programs are loaded even when pinned links exist: attaching or replacing a probe later
	 * (Probes= on reload, SetProbeEnabled) needs them, and comparing tags needs them. */
	r = probes_bpf__load(p->skel);
	if (r < 0) {
		probes_free(p);
		return log_error_errno(r, "Failed to load the probes BPF object (maps pinned under %s): %m", pin_path);
	}
	*ret = p;
	return 0;
}

Probes *probes_free(Probes *p) {
	if (!p)
		return NULL;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		for (unsigned k = 0; k < MAX_PROGS_PER_PROBE; k++)
			safe_close(p->link_fd[i][k]);
	probes_bpf__destroy(p->skel);
	free(p->pin_path);
	free(p);
	return NULL;
}

int probes_events_fd(const Probes *p) { return bpf_map__fd(p->skel->maps.events); }
int probes_counters_fd(const Probes *p) { return bpf_map__fd(p->skel->maps.counters); }
unsigned probes_possible_cpus(const Probes *p) { return p->n_cpus; }
bool probes_is_enabled(const Probes *p, unsigned probe) { return probe < _PROBE_MAX && p->enabled[probe]; }
bool probes_was_reused(const Probes *p, unsigned probe) { return probe < _PROBE_MAX && p->reused[probe]; }

static int prog_tag(int prog_fd, uint8_t tag[BPF_TAG_SIZE]) {
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);

	if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) < 0)
		return negative_errno();
	memcpy(tag, info.tag, BPF_TAG_SIZE);
	return 0;
}

/* Whether the link pinned at path runs a program identical to prog. */
static bool link_runs_same_program(int link_fd, const struct bpf_program *prog) {
	struct bpf_link_info info = {};
	uint32_t len = sizeof(info);
	uint8_t a[BPF_TAG_SIZE], b[BPF_TAG_SIZE];
	_cleanup_close_ int fd = -EBADF;

	if (bpf_obj_get_info_by_fd(link_fd, &info, &len) < 0)
		return false;
	fd = bpf_prog_get_fd_by_id(info.prog_id);
	if (fd < 0)
		return false;
	return prog_tag(fd, a) == 0 && prog_tag(bpf_program__fd(prog), b) == 0 &&
	       memcmp(a, b, BPF_TAG_SIZE) == 0;
}

static int attach_prog(Probes *p, unsigned probe, unsigned i, const struct bpf_program *prog) {
	char path[PATH_MAX];
	_cleanup_close_ int old = -EBADF;
	struct bpf_link *link;
	int r;

	snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, bpf_program__name(prog));

	old = bpf_obj_get(path);
	if (old >= 0 && link_runs_same_program(old, prog)) {
		p->link_fd[probe][i] = TAKE_FD(old);
		return 1;
	}

	if (!tracefs_mounted())
		return log_error_errno(-ENOENT, "Probe %s: tracefs is not mounted (mount -t tracefs tracefs "
		                       "/sys/kernel/tracing)", probe_to_string(probe));
	link = bpf_program__attach(prog);
	if (!link)
		return log_error_errno(negative_errno(), "Probe %s: failed to attach %s: %m",
		                       probe_to_string(probe), bpf_program__name(prog));
	if (old >= 0) {
		/* A different program (an upgrade) holds the pin: the new one is attached already,
		 * so swapping the pin leaves no gap, at worst a few duplicate events. */
		log_notice("Probe %s: replacing the pinned link %s (program changed)", probe_to_string(probe), path);
		if (unlink(path) < 0 && errno != ENOENT) {
			r = log_error_errno(-errno, "Failed to remove pin %s: %m", path);
			bpf_link__destroy(link);
			return r;
		}
	}
	r = p->no_pin_links ? 0 : bpf_link__pin(link, path);
	if (r < 0) {
		bpf_link__destroy(link);
		return log_error_errno(r, "Probe %s: failed to pin link at %s: %m", probe_to_string(probe), path);
	}
	p->link_fd[probe][i] = fcntl(bpf_link__fd(link), F_DUPFD_CLOEXEC, 3);
	r = p->link_fd[probe][i] < 0 ? negative_errno() : 0;
	/* The pin and our duplicate keep the link alive; the libbpf object goes. Not disconnected
	 * first: for these links libbpf's "detach" only closes its own descriptors (the link's and,
	 * for tracepoints, the perf event's), and a disconnected link would leak them, so that the
	 * probe stayed attached after detach_probe() (SetProbeEnabled, Probes= on reload). */
	bpf_link__destroy(link);
	return r;
}

static int detach_probe(Probes *p, unsigned probe) {
	int r = 0;

	for (unsigned i = 0; i < MAX_PROGS_PER_PROBE; i++) {
		const struct bpf_program *prog = probe_prog(p, probe, i);
		char path[PATH_MAX];

		if (!prog)
			continue;
		snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, bpf_program__name(prog));
		if (unlink(path) < 0 && errno != ENOENT)
			r = log_error_errno(-errno, "Failed to remove pin %s: %m", path);
		/* With the pin gone, closing our fd detaches the program. */
		p->link_fd[probe][i] = safe_close(p->link_fd[probe][i]);
	}
	p->enabled[probe] = false;
	return r;
}

int probes_set_enabled(Probes *p, unsigned probe, bool enabled) {
	bool all_reused = true;
	int r;

	if (probe >= _PROBE_MAX)
		return -EINVAL;
	if (!enabled)
		return detach_probe(p, probe);
	if (p->enabled[probe])
		return 0;

	for (unsigned i = 0; i < MAX_PROGS_PER_PROBE; i++) {
		const struct bpf_program *prog = probe_prog(p, probe, i);

		if (!prog)
			continue;
		r = attach_prog(p, probe, i, prog);
		if (r < 0) {
			detach_probe(p, probe);
			return r;
		}
		all_reused &= r > 0;
	}
	p->enabled[probe] = true;
	p->reused[probe] = all_reused;
	return 0;
}

void probes_set_pin_links(Probes *p, bool pin) {
	p->no_pin_links = !pin;
}

int probes_apply(Probes *p, uint32_t mask) {
	int r = 0;

	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		bool want = mask & (1u << i);
		char path[PATH_MAX];

		/* A probe switched off while we were down still has its pins: remove them too. */
		if (!want && !p->enabled[i]) {
			const struct bpf_program *prog = probe_prog(p, i, 0);

			snprintf(path, sizeof(path), "%s/links/%s", p->pin_path, bpf_program__name(prog));
			if (access(path, F_OK) < 0)
				continue;
		}
		r = probes_set_enabled(p, i, want) ?: r;
	}
	return r;
}

uint32_t probe_producer(unsigned probe) {
	static const uint32_t producers[_PROBE_MAX] = {
		[PROBE_EXEC] = PERFRELAY_PRODUCER_EXEC,
		[PROBE_EXIT] = PERFRELAY_PRODUCER_EXIT,
		[PROBE_FORK] = PERFRELAY_PRODUCER_FORK,
		[PROBE_OPEN] = PERFRELAY_PRODUCER_OPEN,
		[PROBE_CONNECT] = PERFRELAY_PRODUCER_CONNECT,
	};

	return probe < _PROBE_MAX ? producers[probe] : 0;
}

/* Producer ids read per batch syscall: 64 ids of 16 bytes per possible CPU. */
#define COUNTERS_BATCH 64u

static void add_counters(const struct perfrelay_counters *v, unsigned n_cpus, struct perfrelay_counters *sum,
                         struct perfrelay_counters *per_cpu) {
	for (unsigned c = 0; c < n_cpus; c++) {
		sum->attempts += v[c].attempts;
		sum->failures += v[c].failures;
		if (per_cpu) {
			per_cpu[c].attempts += v[c].attempts;
			per_cpu[c].failures += v[c].failures;
		}
	}
}

int probes_read_all_counters(const Probes *p, struct perfrelay_counters *ret_sum,
                             struct perfrelay_counters *per_cpu) {
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	_cleanup_free_ struct perfrelay_counters *v = NULL, *cpus = NULL;
	struct perfrelay_counters sum = {};
	uint32_t keys[COUNTERS_BATCH], in = 0, out = 0;
	int fd = probes_counters_fd(p);
	bool first = true;

	v = calloc((size_t) COUNTERS_BATCH * p->n_cpus, sizeof(*v));
	cpus = per_cpu ? calloc(p->n_cpus, sizeof(*cpus)) : NULL;
	if (!v || (per_cpu && !cpus))
		return -ENOMEM;

	/* One syscall per 64 producer ids instead of one per id: the bus reads this every
	 * second. Kernels without batch operations on arrays (before 5.6) get the loop below. */
	for (;;) {
		uint32_t count = COUNTERS_BATCH;
		int r = bpf_map_lookup_batch(fd, first ? NULL : &in, &out, keys, v, &count, &opts);

		if (r < 0 && errno != ENOENT) {
			if (!first || (errno != EINVAL && errno != ENOTSUP && errno != EOPNOTSUPP))
				return negative_errno();
			break; /* no batch support: fall back */
		}
		for (uint32_t i = 0; i < count; i++)
			add_counters(v + (size_t) i * p->n_cpus, p->n_cpus, &sum, cpus);
		if (r < 0) { /* ENOENT: that was the last batch */
			if (per_cpu)
				memcpy(per_cpu, cpus, sizeof(*cpus) * p->n_cpus);
			*ret_sum = sum;
			return 0;
		}
		in = out;
		first = false;
	}

	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		if (bpf_map_lookup_elem(fd, &id, v) < 0)
			return negative_errno();
		add_counters(v, p->n_cpus, &sum, cpus);
	}
	if (per_cpu)
		memcpy(per_cpu, cpus, sizeof(*cpus) * p->n_cpus);
	*ret_sum = sum;
	return 0;
}

int probes_read_counters(const Probes *p, uint32_t producer, struct perfrelay_counters *ret_sum,
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
	for (unsigned i = 0; i < p->n_cpus; i++) {
		sum.attempts += v[i].attempts;
		sum.failures += v[i].failures;
	}
	if (per_cpu)
		memcpy(per_cpu, v, sizeof(*v) * p->n_cpus);
	*ret_sum = sum;
	return 0;
}
