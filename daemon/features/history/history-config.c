/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of HistoryConfig (its header says what they are for). */
#include "macro.h"
#include "features/history/history-config.h"

static const HistoryConfig defaults = {
	.history = true,
	.types = (1u << PROBE_EXEC) | (1u << PROBE_EXIT) | (1u << PROBE_FORK) | (1u << PROBE_CONNECT),
	.max_use = 1024ull * 1024 * 1024,
	.max_age_sec = 0,
	.sync_interval_sec = 5,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "History", "History", VALUE_BOOL, CONFIG_FIELD(HistoryConfig, history), 0, 0, NULL, false },
	{ "History", "HistoryTypes", VALUE_PROBES, CONFIG_FIELD(HistoryConfig, types), 0, 0, NULL, false },
	{ "History", "HistoryRecordBench", VALUE_BOOL, CONFIG_FIELD(HistoryConfig, record_bench), 0, 0, NULL, false },
	{ "History", "HistoryMaxUse", VALUE_SIZE, CONFIG_FIELD(HistoryConfig, max_use), 4ull << 20, 1ull << 50, NULL, true },
	{ "History", "HistoryMaxAgeSec", VALUE_UINT, CONFIG_FIELD(HistoryConfig, max_age_sec), 0, 100u * 365 * 86400, NULL, true },
	{ "History", "HistorySyncIntervalSec", VALUE_UINT, CONFIG_FIELD(HistoryConfig, sync_interval_sec), 1, 3600, NULL, true },
};
/* clang-format on */

const ConfigPart history_config = {
	.section = "History",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(HistoryConfig),
	.defaults = &defaults,
};
