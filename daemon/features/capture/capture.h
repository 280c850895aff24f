/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One packet capture (docs/capture.md): an instance of the capture BPF object attached to a
 * cgroup's ingress and/or egress, writing packet records into the pinned "events" array, and
 * its counters. Links are not pinned: a capture ends with its Capture object (or the daemon).
 * Main thread only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

typedef struct Capture Capture;

typedef enum CaptureDirection {
	CAPTURE_INGRESS = 1,
	CAPTURE_EGRESS = 2,
	CAPTURE_BOTH = 3,
} CaptureDirection;

typedef struct CaptureOptions {
	uint32_t id;
	const char *pin_path;     /* the daemon's PinPath: the capture writes into its "events" */
	unsigned n_possible_cpus; /* the pinned arrays' size, for libbpf to reuse them */
	const char *cgroup_path;  /* the cgroup to attach to; or NULL and: */
	int ifindex;              /* the interface to attach to (tc clsact) */
	CaptureDirection direction;
	uint32_t bytes;              /* per packet, <= PERFRELAY_CAPTURE_BYTES_MAX */
	uint32_t packets_per_second; /* 0: no limit */
	bool compat;                 /* load the objects' compat build (kernel-features.h) */
} CaptureOptions;

/* What a capture did, summed over CPUs: seen = captured + rate_dropped + failed. */
typedef struct CaptureStats {
	uint64_t seen, captured, rate_dropped, failed;
} CaptureStats;

const char *capture_direction_to_string(CaptureDirection d);
int capture_direction_from_string(const char *s); /* CAPTURE_* or -EINVAL */

/* Loads the object and attaches it, to the cgroup (cgroup_skb) or the interface (tc);
 * *ret_cgroup_id is the cgroup's id (0 for an interface). Logs nothing: the caller names the
 * unit or interface in its error. */
int capture_new(const CaptureOptions *o, Capture **ret, uint64_t *ret_cgroup_id);
/* Detaches its programs: no packet is counted afterwards; the counters stay readable. */
void capture_detach(Capture *c);
Capture *capture_free(Capture *c); /* detaches */
DEFINE_TRIVIAL_CLEANUP_FUNC(Capture *, capture_free);
int capture_get_stats(const Capture *c, CaptureStats *ret);
