/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of RecorderConfig (its header says what they are for). */
#include "macro.h"
#include "features/recorder/recorder-config.h"

static const RecorderConfig defaults = {
	.recorder = true,
	.pages_per_cpu = 256,
	.types = (1u << PROBE_EXEC) | (1u << PROBE_EXIT) | (1u << PROBE_FORK) | (1u << PROBE_CONNECT),
	.snapshot_history_sec = 300,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Recorder", "Recorder", VALUE_BOOL, CONFIG_FIELD(RecorderConfig, recorder), 0, 0, NULL, false },
	{ "Recorder", "RecorderTypes", VALUE_PROBES, CONFIG_FIELD(RecorderConfig, types), 0, 0, NULL, true },
	{ "Recorder", "SnapshotHistorySec", VALUE_UINT, CONFIG_FIELD(RecorderConfig, snapshot_history_sec), 0, 86400, NULL, true },
	{ "Recorder", "RecorderPagesPerCpu", VALUE_POW2, CONFIG_FIELD(RecorderConfig, pages_per_cpu), 1, 65536, NULL, false },
};
/* clang-format on */

const ConfigPart recorder_config = {
	.section = "Recorder",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(RecorderConfig),
	.defaults = &defaults,
};
