/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The streams' word on what the kernel lost and what the throttle refused (docs/protocol.md,
 * "Lost"): once a second, the producers whose counted failures moved get a notice naming their
 * types, the count and the cgroups that lost most; a cgroup the throttle starts refusing, or
 * stops refusing, gets a throttle notice. Published from the probe feature's hub slot. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/manager.h"
#include "hub/hub.h"
#include "kernel/probes.h"

/* A kernel-loss notice names at most this many cgroups, those that lost most since the last
 * one; a throttle notice at most this many that started and as many that stopped (each named
 * cgroup takes up to ~600 bytes of JSON: all fit PERFRELAY_NOTICE_MAX). */
#define NOTICE_UNITS_MAX    4u
#define NOTICE_THROTTLE_MAX 8u

/* A cgroup's throttle bucket as the last tick saw it, and its episode (refusing records now). */
typedef struct NoticeThrottle {
	uint64_t cgroup_id;
	uint64_t throttled;
	uint64_t last; /* throttled at the look before */
	uint64_t base; /* throttled when the episode began */
	bool active;
} NoticeThrottle;

typedef struct Notices {
	bool ready;         /* the baseline was read */
	uint64_t *failures; /* per producer id, at the last tick */
	UnitCount *units;   /* "unit_counts" at the last read, by (cgroup, producer) */
	size_t n_units;
	NoticeThrottle *throttle; /* by cgroup */
	size_t n_throttle;
	uint64_t kernel, throttle_started, throttle_stopped; /* notices made */
	HubNoticeStats delivery;
} Notices;

/* The baseline: what was lost before now is no news. */
int notices_init(Manager *m, Notices *n);
void notices_done(Notices *n);
/* Once a second: publishes what changed since the last tick on hub slot `slot`. `throttle`:
 * MaxEventsPerUnitPerSec= is set (episodes still open are closed when it is not). */
void notices_tick(Manager *m, Notices *n, unsigned slot, bool throttle);
