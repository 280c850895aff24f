/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The counters feature's keys of [Counters] (docs/config.md, docs/counters.md); the section's
 * CountersMaxProcesses= and CountersMaxCgroups= size the pinned tables of the core's probes (config.c).
 * Pure: the configuration parser (config.c) reads it as a ConfigPart. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct CountersConfig {
	uint32_t counters;    /* Counters= names, bits PERFRELAY_COUNTER_*; 0: none */
	unsigned interval_ms; /* CountersIntervalMs=, 100..3600000, default 1000 */
} CountersConfig;

extern const ConfigPart counters_config;
