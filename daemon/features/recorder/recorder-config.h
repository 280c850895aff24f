/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The flight recorder's [Recorder] section (docs/config.md, docs/recorder.md). Pure: the configuration
 * parser (config.c) reads it as a ConfigPart. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct RecorderConfig {
	bool recorder;          /* Recorder=, default yes */
	unsigned pages_per_cpu; /* RecorderPagesPerCpu=, power of two 1..65536, default 256 */
	/* RecorderTypes=: the built-in types it records (bits PROBE_*, the probes' names), default
	 * exec exit fork connect; third-party producers' records always. */
	uint32_t types;
	/* SnapshotHistorySec=: a snapshot of a unit reaches this far back into the event history
	 * (docs/history.md) for what the rings no longer hold; 0: not at all. Default 300. */
	unsigned snapshot_history_sec;
} RecorderConfig;

extern const ConfigPart recorder_config;
