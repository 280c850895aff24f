/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of RecorderConfig (its header says what they are for). */
#include "macro.h"
#include "features/recorder/recorder-config.h"

static const RecorderConfig defaults = {
	.recorder = true,
	.pages_per_cpu = 256,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Recorder", "Recorder", VALUE_BOOL, CONFIG_FIELD(RecorderConfig, recorder), 0, 0, NULL, false },
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
