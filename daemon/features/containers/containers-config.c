/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of ContainersConfig (its header says what they are for). */
#include "macro.h"
#include "features/containers/containers-config.h"

static const ContainersConfig defaults = {
	.containers = true,
	.names = true,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Containers", "Containers", VALUE_BOOL, CONFIG_FIELD(ContainersConfig, containers), 0, 0, NULL, false },
	{ "Containers", "ContainerNames", VALUE_BOOL, CONFIG_FIELD(ContainersConfig, names), 0, 0, NULL, false },
};
/* clang-format on */

const ConfigPart containers_config = {
	.section = "Containers",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(ContainersConfig),
	.defaults = &defaults,
};
