/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The probe feature's [Probes] keys (docs/config.md): which built-in probes may be attached,
 * whether only while a consumer wants their records, and what they never record; the section's
 * PendingSyscalls= sizes a map of the core's probes. Pure: the configuration parser (config.c)
 * reads it as a ConfigPart. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct ProbesConfig {
	uint32_t probes; /* Probes= list of names or "all", default all */
	/* OnDemand=, default yes: a probe of Probes= is attached only while a consumer wants its
	 * records (docs/pipeline.md, "Demand"); no: always. */
	bool on_demand;
	/* RunStats=, default yes: BPF_ENABLE_STATS while the daemon runs, for what each probe costs
	 * (every BPF program of the host is then timed: two clock reads per run). */
	bool run_stats;
	CommList exclude_comms;        /* ExcludeComms=: opens and connects of these processes */
	PathPatternList exclude_paths; /* ExcludePaths=: opens of these paths */
	UnitList exclude_units;        /* ExcludeUnits=: opens and connects of these units' processes */
	/* MaxEventsPerUnitPerSec=, 0 (default): off; else the open and connect records a cgroup's
	 * tasks may make per second (docs/pipeline.md, "Throttle"). */
	uint64_t max_events_per_unit_per_sec;
} ProbesConfig;

extern const ConfigPart probes_config;
