/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of CountersConfig (its header says what they are for). */
#include "kernel/counter-names.h"
#include "macro.h"
#include "features/counters/counters-config.h"

static const CountersConfig defaults = {
	.counters = COUNTERS_DEFAULT,
	.interval_ms = 1000,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Counters", "Counters", VALUE_COUNTERS, CONFIG_FIELD(CountersConfig, counters), 0, 0, NULL, false },
	{ "Counters", "CountersIntervalMs", VALUE_UINT, CONFIG_FIELD(CountersConfig, interval_ms), 100, 3600000, NULL, false },
};
/* clang-format on */

const ConfigPart counters_config = {
	.section = "Counters",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(CountersConfig),
	.defaults = &defaults,
};
