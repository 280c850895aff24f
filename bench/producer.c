/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The benchmark producer's skeleton lifecycle: open against a pin root, set the rodata knobs,
 * load, attach; and the accounting counters it shares with perfrelayd. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bench.skel.h"
#include "bench_compat.skel.h"
#include "skeleton-compat.h"
#include "event.h"
#include "macro.h"
#include "producer.h"

struct BenchProducer {
	struct bench_bpf *skel;
	struct bpf_link *link;
	char *pin_root;
	unsigned n_cpus;
	struct perfrelay_counters *values; /* lookup buffer: one value per possible CPU */
};

BenchProducer *bench_producer_free(BenchProducer *p) {
	if (!p)
		return NULL;
	bpf_link__destroy(p->link);
	bench_bpf__destroy(p->skel);
	free(p->pin_root);
	free(p->values);
	free(p);
	return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(BenchProducer *, bench_producer_free);

/* bench_open(): the object as built, or its compat build for a kernel that refused the first
 * (as perfrelayd's probes, without probing first). */
SKELETON_OPEN_COMPAT(bench)

int bench_producer_new(const BenchProducerOptions *o, BenchProducer **ret, bool *ret_created_pins) {
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = o->pin_root);
	_cleanup_(bench_producer_freep) BenchProducer *p = NULL;
	char path[PATH_MAX];
	bool existed;
	int r;

	if (o->records_per_call < 1 || o->records_per_call > 256 ||
	    o->record_size < sizeof(struct perfrelay_bench) || o->record_size > 1024 ||
	    o->record_size % 8 != 0)
		return -EINVAL;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->pin_root = strdup(o->pin_root);
	if (!p->pin_root)
		return -ENOMEM;
	r = libbpf_num_possible_cpus();
	if (r <= 0)
		return r < 0 ? r : -EINVAL;
	p->n_cpus = (unsigned) r;
	p->values = calloc(p->n_cpus, sizeof(struct perfrelay_counters));
	if (!p->values)
		return -ENOMEM;

	snprintf(path, sizeof(path), "%s/events", o->pin_root);
	existed = access(path, F_OK) == 0;

	/* libbpf creates the pin root's missing files, not the root itself. */
	if (!existed && mkdir(o->pin_root, 0700) < 0 && errno != EEXIST)
		return negative_errno();
	for (bool compat = false;; compat = true) {
		p->skel = bench_open(&opts, compat);
		if (!p->skel)
			return negative_errno();
		/* Like perfrelayd: a pinned map is reused only if its definition matches, and the
		 * daemon makes "events" with one slot per possible CPU. */
		r = bpf_map__set_max_entries(p->skel->maps.events, p->n_cpus);
		if (r >= 0)
			r = bpf_map__set_max_entries(p->skel->maps.recorder, p->n_cpus);
		if (r < 0)
			return r;
		p->skel->rodata->target_tgid = o->target_tgid;
		p->skel->rodata->records_per_call = o->records_per_call;
		p->skel->rodata->payload_size = o->record_size;
		r = bench_bpf__load(p->skel);
		if (r != -EINVAL || compat)
			break;
		/* A kernel before 5.12 refuses the fetching atomic: the compat build, once. */
		bench_bpf__destroy(p->skel);
		p->skel = NULL;
	}
	if (r < 0)
		return r;
	p->link = bpf_program__attach(p->skel->progs.handle_getpgid);
	if (!p->link)
		return negative_errno();

	*ret_created_pins = !existed;
	*ret = TAKE_PTR(p);
	return 0;
}

int bench_producer_unpin(BenchProducer *p) {
	int r = 0;

	if (bpf_map__unpin(p->skel->maps.events, NULL) < 0)
		r = negative_errno();
	if (bpf_map__unpin(p->skel->maps.counters, NULL) < 0 && r == 0)
		r = negative_errno();
	/* producer.bpf.h's idle flag, flight recorder and unit maps, pinned beside the other two. */
	if (bpf_map__unpin(p->skel->maps.idle, NULL) < 0 && r == 0)
		r = negative_errno();
	if (bpf_map__unpin(p->skel->maps.recorder, NULL) < 0 && r == 0)
		r = negative_errno();
	if (bpf_map__unpin(p->skel->maps.recorder_on, NULL) < 0 && r == 0)
		r = negative_errno();
	if (bpf_map__unpin(p->skel->maps.recorder_stats, NULL) < 0 && r == 0)
		r = negative_errno();
	/* And its per-unit counts. */
	if (bpf_map__unpin(p->skel->maps.unit_counts, NULL) < 0 && r == 0)
		r = negative_errno();
	if (bpf_map__unpin(p->skel->maps.unit_counts_full, NULL) < 0 && r == 0)
		r = negative_errno();
	if (rmdir(p->pin_root) < 0 && errno != ENOTEMPTY && errno != ENOENT && r == 0)
		r = negative_errno();
	return r;
}

int bench_producer_events_fd(const BenchProducer *p) {
	return bpf_map__fd(p->skel->maps.events);
}

int bench_producer_counters(const BenchProducer *p, uint64_t *ret_attempts, uint64_t *ret_failures) {
	uint32_t key = PERFRELAY_PRODUCER_BENCH;
	uint64_t attempts = 0, failures = 0;

	/* A per-CPU array returns one value per possible CPU, each padded to 8 bytes (16 here). */
	if (bpf_map_lookup_elem(bpf_map__fd(p->skel->maps.counters), &key, p->values) < 0)
		return negative_errno();
	for (unsigned i = 0; i < p->n_cpus; i++) {
		attempts += p->values[i].attempts;
		failures += p->values[i].failures;
	}
	*ret_attempts = attempts;
	*ret_failures = failures;
	return 0;
}
