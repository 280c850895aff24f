/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One packet capture: the capture BPF object's lifecycle (open with the pinned maps, set its
 * id, byte count and rate, load, attach to a cgroup) and its counters. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "features/capture/capture.h"
#include "capture.skel.h"
#include "capture_compat.skel.h"
#include "skeleton-compat.h"
#include "event.h"
#include "kernel/percpu.h"
#include "string-table.h"

struct Capture {
	struct capture_bpf *skel;
	struct bpf_link *links[2]; /* cgroup_skb ingress, egress */
	unsigned n_cpus;
	/* An interface's capture: its clsact hook and our filters on it (0: none). */
	int ifindex;
	struct bpf_tc_opts tc[2]; /* ingress, egress */
};

static const char *const capture_direction_table[] = {
	[CAPTURE_INGRESS] = "ingress",
	[CAPTURE_EGRESS] = "egress",
	[CAPTURE_BOTH] = "both",
};

DEFINE_STRING_TABLE_LOOKUP(capture_direction, CaptureDirection);

/* The clsact hook of the interface (made if missing; never removed: other filters may use it)
 * and our filter on each direction asked for. */
static int attach_tc(Capture *c, CaptureDirection direction) {
	static const enum bpf_tc_attach_point points[2] = { BPF_TC_INGRESS, BPF_TC_EGRESS };
	struct bpf_program *const progs[2] = { c->skel->progs.capture_tc_ingress,
					       c->skel->progs.capture_tc_egress };
	int r;

	for (unsigned i = 0; i < 2; i++) {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = c->ifindex, .attach_point = points[i]);

		if (!(direction & (i == 0 ? CAPTURE_INGRESS : CAPTURE_EGRESS)))
			continue;
		r = bpf_tc_hook_create(&hook);
		if (r < 0 && r != -EEXIST)
			return r;
		c->tc[i] = (struct bpf_tc_opts){ .sz = sizeof(struct bpf_tc_opts),
						 .prog_fd = bpf_program__fd(progs[i]) };
		r = bpf_tc_attach(&hook, &c->tc[i]);
		if (r < 0) {
			c->tc[i] = (struct bpf_tc_opts){};
			return r;
		}
	}
	return 0;
}

static void detach_tc(Capture *c) {
	static const enum bpf_tc_attach_point points[2] = { BPF_TC_INGRESS, BPF_TC_EGRESS };

	for (unsigned i = 0; i < 2; i++) {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = c->ifindex, .attach_point = points[i]);

		if (c->tc[i].sz == 0)
			continue;
		/* bpf_tc_detach() finds the filter by handle and priority alone. */
		c->tc[i].prog_fd = c->tc[i].prog_id = 0;
		c->tc[i].flags = 0;
		(void) bpf_tc_detach(&hook, &c->tc[i]);
		c->tc[i] = (struct bpf_tc_opts){};
	}
}

/* capture_open(): the object the kernel can load (kernel_features_need_compat()). */
SKELETON_OPEN_COMPAT(capture)

int capture_new(const CaptureOptions *o, Capture **ret, uint64_t *ret_cgroup_id) {
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = o->pin_path);
	_cleanup_(capture_freep) Capture *c = NULL;
	_cleanup_close_ int fd = -EBADF;
	struct stat st = {};
	int r;

	if (o->bytes == 0 || o->bytes > PERFRELAY_CAPTURE_BYTES_MAX || !(o->direction & CAPTURE_BOTH) ||
	    !!o->cgroup_path == (o->ifindex > 0))
		return -EINVAL;
	if (o->cgroup_path) {
		fd = open(o->cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0)
			return -errno;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->n_cpus = o->n_possible_cpus;
	c->skel = capture_open(&opts, o->compat);
	if (!c->skel)
		return -errno;
	/* As the probes do: the pinned arrays are reused only where the definitions match. */
	bpf_map__set_max_entries(c->skel->maps.events, o->n_possible_cpus);
	bpf_map__set_max_entries(c->skel->maps.recorder, o->n_possible_cpus);
	c->skel->rodata->capture_id = o->id;
	c->skel->rodata->capture_bytes = o->bytes;
	c->skel->rodata->packets_per_second = o->packets_per_second;
	r = capture_bpf__load(c->skel);
	if (r < 0)
		return r;
	if (o->ifindex > 0) {
		c->ifindex = o->ifindex;
		r = attach_tc(c, o->direction);
		if (r < 0)
			return r;
		*ret_cgroup_id = 0;
		*ret = TAKE_PTR(c);
		return 0;
	}
	if (o->direction & CAPTURE_INGRESS) {
		c->links[0] = bpf_program__attach_cgroup(c->skel->progs.capture_ingress, fd);
		if (!c->links[0])
			return -errno;
	}
	if (o->direction & CAPTURE_EGRESS) {
		c->links[1] = bpf_program__attach_cgroup(c->skel->progs.capture_egress, fd);
		if (!c->links[1])
			return -errno;
	}
	*ret_cgroup_id = (uint64_t) st.st_ino; /* cgroup2: the directory's inode is the cgroup id */
	*ret = TAKE_PTR(c);
	return 0;
}

void capture_detach(Capture *c) {
	for (unsigned i = 0; i < ELEMENTSOF(c->links); i++) {
		bpf_link__destroy(c->links[i]);
		c->links[i] = NULL;
	}
	if (c->ifindex > 0)
		detach_tc(c);
}

Capture *capture_free(Capture *c) {
	if (!c)
		return NULL;
	capture_detach(c);
	capture_bpf__destroy(c->skel);
	free(c);
	return NULL;
}

int capture_get_stats(const Capture *c, CaptureStats *ret) {
	/* CaptureStats is the program's struct capture_stats, field by field. */
	return PERCPU_SUM(bpf_map__fd(c->skel->maps.capture_stats), 0, c->n_cpus, ret);
}
