/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sections of perfrelay.conf that features add: the ConfigPart of every feature with a
 * <name>-config.c, listed in feature-config-parts.c, which features/meson.build generates from
 * FEATURE_LIST. Pure: the configuration's unit tests and the fuzzer link it with the core's
 * parser, so that a new feature's section is tested without an edit of theirs. The daemon takes
 * the same parts from the features' vtables (FeatureVtable.config). */
#pragma once

#include <stddef.h>

#include "config/config.h"

extern const ConfigPart *const feature_config_parts[];
extern const size_t feature_config_parts_size;
