/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Kernel feature probing: one small test per kernel feature, run once at start (docs/kernels.md). */
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel/kernel-features.h"
#include "macro.h"
#include "kernel/ring.h"

struct KernelFeatures {
	bool has[_FEATURE_MAX];
	bool forced_off[_FEATURE_MAX];
};

static const struct {
	const char *name;
	bool required;
	const char *since;
	const char *without;
} feature_table[_FEATURE_MAX] = {
	[FEATURE_PERF_EVENT_ARRAY] = { "perf_event_array",
				       true,
				       "4.3",
				       "no perf event array: there is nothing to relay" },
	[FEATURE_PRESERVE_ELEMS] = { "preserve_elems",
				     true,
				     "5.10",
				     "the pinned array's contract (BPF_F_PRESERVE_ELEMS) cannot be kept for third-party producers" },
	[FEATURE_BTF] = { "btf",
			  true,
			  "5.4",
			  "no kernel BTF (/sys/kernel/btf/vmlinux): the CO-RE probes cannot be relocated" },
	[FEATURE_TRACEPOINT] = { "tracepoint",
				 true,
				 "4.7",
				 "tracepoint programs cannot be loaded: no built-in probe" },
	[FEATURE_PERF_EVENT_OUTPUT] = { "perf_event_output",
					true,
					"4.7",
					"tracepoint programs cannot call bpf_perf_event_output(): no built-in probe" },
	[FEATURE_KTIME_BOOT_NS] = { "ktime_get_boot_ns",
				    true,
				    "5.8",
				    "no bpf_ktime_get_boot_ns(): the record header's timestamp cannot be taken" },
	[FEATURE_TP_BTF] = { "tp_btf",
			     true,
			     "5.5",
			     "no BTF-typed tracepoints (tp_btf): the fork probe cannot be loaded" },
	[FEATURE_LINK_PIN] = { "link_pin",
			       false,
			       "5.15",
			       "probes are attached without pinned links: they detach while the daemon restarts, "
			       "and events of that gap are neither emitted nor counted" },
	[FEATURE_MMAPABLE] = { "mmapable",
			       false,
			       "5.5",
			       "no BPF_F_MMAPABLE arrays: persistent received totals (<PinPath>/received) are off" },
	[FEATURE_TASK_STORAGE] = { "task_storage",
				   false,
				   "5.11",
				   "no task storage maps: reported only, no built-in probe needs them" },
	[FEATURE_MEMBARRIER] = { "membarrier",
				 false,
				 "4.14",
				 "no private expedited membarrier: reported only, readers use ordinary barriers" },
	[FEATURE_BPF_EVENT] = { "bpf_event",
				false,
				"5.1",
				"program loads are not watched: a producer that loads after the start is found when "
				"its first records arrive (held up to a second while a scan runs), and one that "
				"unloads before that is published as \"unknown\"" },
	[FEATURE_FETCH_ATOMICS] = { "fetch_atomics",
				    false,
				    "5.12",
				    "the BPF objects' compat build is loaded: a record's seq is read back after its "
				    "atomic add, so a program interrupting an emitter on its CPU could give two "
				    "records the same seq (the counts stay exact)" },
	[FEATURE_ANCESTOR_CGROUP] = { "ancestor_cgroup",
				      false,
				      "5.12",
				      "the BPF objects' compat build is loaded: ExcludeUnits= filters the processes "
				      "of a unit's own cgroup, not of the cgroups below it" },
};

const char *kernel_feature_to_string(KernelFeature x) {
	return (unsigned) x < _FEATURE_MAX ? feature_table[x].name : NULL;
}

bool kernel_feature_required(KernelFeature x) {
	return (unsigned) x < _FEATURE_MAX && feature_table[x].required;
}

const char *kernel_feature_since(KernelFeature x) {
	return (unsigned) x < _FEATURE_MAX ? feature_table[x].since : NULL;
}

const char *kernel_feature_without(KernelFeature x) {
	return (unsigned) x < _FEATURE_MAX ? feature_table[x].without : NULL;
}

static int feature_from_string(const char *s, size_t n) {
	for (unsigned i = 0; i < _FEATURE_MAX; i++)
		if (strlen(feature_table[i].name) == n && strncmp(feature_table[i].name, s, n) == 0)
			return (int) i;
	return -EINVAL;
}

static bool probe_map_create(enum bpf_map_type type, uint32_t value_size, uint32_t flags) {
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = flags);
	int fd = bpf_map_create(type, "perfrelay_probe", 4, value_size, 1, &opts);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Kernel BTF, checked without parsing it: libbpf's parse mallocs and frees the whole ~5 MiB blob,
 * and freeing a chunk that large raises glibc's dynamic mmap threshold, so that the client queues
 * allocated later come from the heap and are never returned to the system. The file is streamed
 * through a fixed buffer instead: the BTF magic, and for tp_btf the btf_trace_<tracepoint>
 * typedef name that tp_btf programs attach to (such names exist only as those typedefs). */
static bool probe_btf(bool *ret_tp_btf) {
	static const char needle[] = "btf_trace_sched_process_fork";
	const size_t n = sizeof(needle); /* with the NUL: the whole name, not a prefix */
	char buf[65536];
	size_t have = 0;
	ssize_t k;
	bool first = true;
	_cleanup_close_ int fd = -EBADF;

	*ret_tp_btf = false;
	fd = open("/sys/kernel/btf/vmlinux", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	while ((k = read(fd, buf + have, sizeof(buf) - have)) > 0) {
		have += (size_t) k;
		if (first) {
			if (have < 2)
				continue;
			if ((uint8_t) buf[0] != 0x9f ||
			    (uint8_t) buf[1] != 0xeb) /* BTF_MAGIC 0xeB9F, little endian */
				return false;
			first = false;
		}
		if (memmem(buf, have, needle, n)) {
			*ret_tp_btf = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_RAW_TRACEPOINT, NULL) == 1;
			break;
		}
		/* Keep the tail: the name may straddle two reads. */
		if (have >= n) {
			memmove(buf, buf + have - (n - 1), n - 1);
			have = n - 1;
		}
	}
	return !first;
}

static int tracepoint_id(const char *category, const char *name) {
	static const char *const roots[] = { "/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events" };
	char path[256];

	for (size_t i = 0; i < ELEMENTSOF(roots); i++) {
		FILE *f;
		int id;

		snprintf(path, sizeof(path), "%s/%s/%s/id", roots[i], category, name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (fscanf(f, "%d", &id) != 1)
			id = -1;
		fclose(f);
		if (id >= 0)
			return id;
	}
	return -ENOENT;
}

/* A tracepoint program attached through a BPF link (BPF_LINK_TYPE_PERF_EVENT, 5.15), which can
 * be pinned (every link can, since 5.7): what keeps the built-in probes attached across
 * restarts. Older kernels attach tracepoint programs with an ioctl, which gives no link to pin.
 * Not pinned to find out: a daemon killed between the pin and its unlink left a pin that was
 * none of perfrelay's (test_faults' random SIGKILL found it). */
static bool probe_link_pin(void) {
	static const struct bpf_insn insns[] = {
		{ .code = 0xb7, .dst_reg = 0, .imm = 0 }, /* r0 = 0 */
		{ .code = 0x95 },                         /* exit */
	};
	struct perf_event_attr attr = {
		.type = PERF_TYPE_TRACEPOINT,
		.size = sizeof(attr),
		.sample_period = 1,
		.wakeup_events = 1,
	};
	_cleanup_close_ int prog_fd = -EBADF, perf_fd = -EBADF, link_fd = -EBADF;
	int id;

	id = tracepoint_id("syscalls", "sys_enter_getpgid");
	if (id < 0)
		return false;
	attr.config = (uint64_t) id;
	prog_fd = bpf_prog_load(
		BPF_PROG_TYPE_TRACEPOINT, "perfrelay_probe", "GPL", insns, ELEMENTSOF(insns), NULL);
	if (prog_fd < 0)
		return false;
	perf_fd = (int) syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
	if (perf_fd < 0)
		return false;
	link_fd = bpf_link_create(prog_fd, perf_fd, BPF_PERF_EVENT, NULL);
	return link_fd >= 0;
}

/* Fetching atomics (BPF_FETCH, Linux 5.12): a fetch-add on the stack. Older verifiers refuse
 * the instruction wherever it is, even in code a constant makes dead. */
static bool probe_fetch_atomics(void) {
	static const struct bpf_insn insns[] = {
		{ .code = 0xb7, .dst_reg = 1, .imm = 0 },                 /* r1 = 0 */
		{ .code = 0x7b, .dst_reg = 10, .src_reg = 1, .off = -8 }, /* *(u64 *)(r10 - 8) = r1 */
		{ .code = 0xb7, .dst_reg = 2, .imm = 1 },                 /* r2 = 1 */
		{ .code = 0xdb,
		  .dst_reg = 10,
		  .src_reg = 2,
		  .off = -8,
		  .imm = 1 },                             /* r2 = atomic_fetch_add(r10 - 8, r2) */
		{ .code = 0xb7, .dst_reg = 0, .imm = 0 }, /* r0 = 0 */
		{ .code = 0x95 },                         /* exit */
	};
	_cleanup_close_ int fd = bpf_prog_load(
		BPF_PROG_TYPE_SOCKET_FILTER, "perfrelay_probe", "GPL", insns, ELEMENTSOF(insns), NULL);

	return fd >= 0;
}

/* perf_event_attr.bpf_event (Linux 5.1): program loads as PERF_RECORD_BPF_EVENT records in a
 * dummy event's ring, the producers feature's load watch. CPU 0: x86 cannot take it offline, and
 * the attribute is refused or taken for all. */
static bool probe_bpf_event(void) {
	_cleanup_(ring_freep) Ring *ring = NULL;

	return ring_open(0, &(const RingOptions){ .pages = 1, .bpf_events = true, .watermark = 1 }, &ring) >=
		0;
}

static bool probe_membarrier(void) {
	long r = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0);

	return r >= 0 && (r & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

int kernel_features_probe(KernelFeatures **ret) {
	KernelFeatures *f;
	const char *env;
	bool tp_btf;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;

	f->has[FEATURE_PERF_EVENT_ARRAY] = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_PERF_EVENT_ARRAY, NULL) == 1;
	f->has[FEATURE_PRESERVE_ELEMS] = probe_map_create(
		BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, BPF_F_PRESERVE_ELEMS);
	f->has[FEATURE_BTF] = probe_btf(&tp_btf);
	f->has[FEATURE_TP_BTF] = tp_btf;
	f->has[FEATURE_TRACEPOINT] = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_TRACEPOINT, NULL) == 1;
	f->has[FEATURE_PERF_EVENT_OUTPUT] =
		libbpf_probe_bpf_helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_perf_event_output, NULL) == 1;
	f->has[FEATURE_KTIME_BOOT_NS] =
		libbpf_probe_bpf_helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_ktime_get_boot_ns, NULL) == 1;
	f->has[FEATURE_LINK_PIN] = probe_link_pin();
	f->has[FEATURE_MMAPABLE] = probe_map_create(BPF_MAP_TYPE_ARRAY, 8, BPF_F_MMAPABLE);
	f->has[FEATURE_TASK_STORAGE] = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) == 1;
	f->has[FEATURE_MEMBARRIER] = probe_membarrier();
	f->has[FEATURE_BPF_EVENT] = probe_bpf_event();
	f->has[FEATURE_FETCH_ATOMICS] = probe_fetch_atomics();
	f->has[FEATURE_ANCESTOR_CGROUP] = libbpf_probe_bpf_helper(
						  BPF_PROG_TYPE_TRACEPOINT,
						  BPF_FUNC_get_current_ancestor_cgroup_id,
						  NULL) == 1;

	/* Test-only: lets the tests see the daemon on a kernel without a feature. Unknown names
	 * are ignored here; the manager warns about every forced feature. */
	env = secure_getenv("PERFRELAY_TEST_DISABLE_FEATURES");
	while (env && *env) {
		size_t n = strcspn(env, ",");
		int x = feature_from_string(env, n);

		if (x >= 0) {
			f->has[x] = false;
			f->forced_off[x] = true;
		}
		env += n;
		if (*env == ',')
			env++;
	}
	*ret = f;
	return 0;
}

KernelFeatures *kernel_features_free(KernelFeatures *f) {
	free(f);
	return NULL;
}

bool kernel_features_has(const KernelFeatures *f, KernelFeature x) {
	return f && (unsigned) x < _FEATURE_MAX && f->has[x];
}

bool kernel_features_need_compat(const KernelFeatures *f) {
	return !kernel_features_has(f, FEATURE_FETCH_ATOMICS) ||
		!kernel_features_has(f, FEATURE_ANCESTOR_CGROUP);
}

bool kernel_features_forced_off(const KernelFeatures *f, KernelFeature x) {
	return f && (unsigned) x < _FEATURE_MAX && f->forced_off[x];
}

KernelFeature kernel_features_first_missing_required(const KernelFeatures *f) {
	for (unsigned i = 0; i < _FEATURE_MAX; i++)
		if (feature_table[i].required && !f->has[i])
			return (KernelFeature) i;
	return _FEATURE_MAX;
}
