/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's features (feature.h), one folder each under features/, and the table main()
 * gives the core. Adding a feature: its folder, its line in feature-table.c and meson.build. */
#pragma once

#include <stddef.h>

#include "feature.h"

extern const FeatureVtable hotplug_feature;   /* hotplug/ */
extern const FeatureVtable stdout_feature;    /* stdout/ */
extern const FeatureVtable producers_feature; /* producers/ */
extern const FeatureVtable processes_feature; /* processes/ */
extern const FeatureVtable recorder_feature;  /* recorder/ */
extern const FeatureVtable probes_feature;    /* probes/ */
extern const FeatureVtable counters_feature;  /* counters/ */
extern const FeatureVtable capture_feature;   /* capture/ */

extern const FeatureVtable *const feature_table[];
extern const size_t feature_table_size;
