/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The event history's [History] section (docs/config.md, docs/history.md). Pure: the configuration
 * parser (config.c) reads it as a ConfigPart. HistoryPath= is the core's (a path is not a part's
 * scalar): Config.history_path. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct HistoryConfig {
	bool history; /* History=, default yes */
	/* HistoryTypes=: the built-in types it records (bits PROBE_*, the probes' names), default
	 * exec exit fork connect (docs/history.md, "Sizing": open is the type a host makes most). */
	uint32_t types;
	bool record_bench;    /* HistoryRecordBench=, default no: the benchmark producer's records too */
	uint64_t max_use;     /* HistoryMaxUse=, bytes of segments, default 1G, at least 4M */
	unsigned max_age_sec; /* HistoryMaxAgeSec=, 0: no age limit (default) */
	unsigned sync_interval_sec; /* HistorySyncIntervalSec=, default 5 */
} HistoryConfig;

extern const ConfigPart history_config;
