/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of ProbesConfig (its header says what they are for). */
#include "kernel/probes.h"
#include "macro.h"
#include "features/probes/probes-config.h"

static const ProbesConfig defaults = {
	.probes = PROBES_ALL,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Probes", "Probes", VALUE_PROBES, CONFIG_FIELD(ProbesConfig, probes), 0, 0, NULL, true },
};
/* clang-format on */

const ConfigPart probes_config = {
	.section = "Probes",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(ProbesConfig),
	.defaults = &defaults,
};
