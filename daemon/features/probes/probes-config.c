/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of ProbesConfig (its header says what they are for). */
#include "kernel/probes.h"
#include "macro.h"
#include "features/probes/probes-config.h"

static const ProbesConfig defaults = {
	.probes = PROBES_ALL,
	.on_demand = true,
	.run_stats = true,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Probes", "Probes", VALUE_PROBES, CONFIG_FIELD(ProbesConfig, probes), 0, 0, NULL, true },
	{ "Probes", "OnDemand", VALUE_BOOL, CONFIG_FIELD(ProbesConfig, on_demand), 0, 0, NULL, true },
	{ "Probes", "RunStats", VALUE_BOOL, CONFIG_FIELD(ProbesConfig, run_stats), 0, 0, NULL, false },
	{ "Probes", "ExcludeComms", VALUE_COMMS, CONFIG_FIELD(ProbesConfig, exclude_comms), 0, 0, NULL, true },
	{ "Probes", "ExcludePaths", VALUE_PATTERNS, CONFIG_FIELD(ProbesConfig, exclude_paths), 0, 0, NULL, true },
	{ "Probes", "ExcludeUnits", VALUE_UNITS, CONFIG_FIELD(ProbesConfig, exclude_units), 0, 0, NULL, true },
	{ "Probes", "MaxEventsPerUnitPerSec", VALUE_UINT, CONFIG_FIELD(ProbesConfig, max_events_per_unit_per_sec), 0, 10000000, NULL, true },
};
/* clang-format on */

const ConfigPart probes_config = {
	.section = "Probes",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(ProbesConfig),
	.defaults = &defaults,
};
