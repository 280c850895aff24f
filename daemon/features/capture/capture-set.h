/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The packet captures of a daemon (docs/capture.md): the active ones (at most MaxCaptures=),
 * the last CAPTURES_HISTORY ended ones with their final counters, and totals, for D-Bus and
 * GetStats(). Main thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "features/capture/capture.h"
#include "macro.h"

#define CAPTURES_HISTORY 32u

typedef struct CaptureSummary {
	uint32_t id;
	char unit[256];   /* "" when started by cgroup */
	char cgroup[256]; /* the cgroup's path below the cgroup2 root */
	uint64_t cgroup_id;
	uint32_t ifindex; /* an interface's capture; 0 for a unit's or cgroup's */
	uint32_t bytes, packets_per_second;
	CaptureDirection direction;
	bool active;
	CaptureStats stats; /* now, or when it ended */
} CaptureSummary;

typedef struct CaptureTotals {
	uint64_t started, stopped, refused; /* refused: MaxCaptures= reached */
	CaptureStats stats;                 /* over every capture this daemon ran */
} CaptureTotals;

/* What StartCapture() asks for (D-Bus options; NULL / 0: the default). */
typedef struct CaptureRequest {
	const char *unit;            /* a unit name, found in the cgroup tree */
	const char *cgroup;          /* or a cgroup path below the cgroup2 root */
	const char *container;       /* or a container's name, image or id (docs/containers.md) */
	uint32_t ifindex;            /* or an interface: every packet of it (tc) */
	const char *direction;       /* "ingress", "egress", "both" (default) */
	uint32_t bytes;              /* per packet; 0: CaptureBytes= */
	uint32_t packets_per_second; /* 0: CapturePacketsPerSecond= */
	/* Filled in by the bus, not by the requester: */
	const char *unit_cgroup; /* systemd's ControlGroup of `unit`; NULL: search the tree */
	bool may_capture_host;   /* root, or AllowHostCaptures= for ControlGroups= members */
} CaptureRequest;

typedef struct Captures Captures;

int captures_new(unsigned max, Captures **ret);
Captures *captures_free(Captures *l); /* detaches the active ones */
DEFINE_TRIVIAL_CLEANUP_FUNC(Captures *, captures_free);

/* The next capture id (never 0, never reused by this daemon). */
uint32_t captures_next_id(Captures *l);
bool captures_full(const Captures *l);
void captures_count_refused(Captures *l);
/* Takes c (consumed even on failure). */
int captures_add(Captures *l, Capture *c, const CaptureSummary *info);
/* Detaches capture id and keeps its final counters; -ENOENT if it is not active. */
int captures_stop(Captures *l, uint32_t id);
/* The capture's summary now (active or ended); -ENOENT if unknown. */
int captures_get(const Captures *l, uint32_t id, CaptureSummary *ret);
/* Every active and remembered capture (*ret malloc'd), and the totals. */
int captures_snapshot(const Captures *l, CaptureSummary **ret, size_t *ret_n, CaptureTotals *ret_totals);
