/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The probe feature's [Probes] key (docs/config.md): which built-in probes are attached; the section's PendingSyscalls=
 * sizes a map of the core's probes. Pure: the configuration parser (config.c) reads it as a ConfigPart. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct ProbesConfig {
	uint32_t probes; /* Probes= list of names or "all", default all */
} ProbesConfig;

extern const ConfigPart probes_config;
