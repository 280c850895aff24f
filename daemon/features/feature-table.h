/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's features (core/feature.h), one folder each under features/, and the table main()
 * gives the core. Adding a feature is its folder (with its meson.build) and its line in
 * FEATURE_LIST: the table, the build (features/meson.build reads this list), the configuration's
 * tests, the fuzzer and perfrelay-metrics follow from them (docs/architecture.md, "Adding a
 * feature"). */
#pragma once

#include <stddef.h>

#include "core/feature.h"

/* Every feature, in start-up order (feature.h says what each hook's place is): X(name) for the
 * folder features/<name>/ whose <name>-feature.c defines `const FeatureVtable <name>_feature`.
 * setup() runs before the readers start; start() runs the probes first, then what needs them
 * attached. */
/* clang-format off */
#define FEATURE_LIST(X) \
	X(hotplug)   /* CPUs that go offline and come back */ \
	X(stdout)    /* --stdout */ \
	X(producers) /* third-party producers found and described */ \
	X(processes) /* the process table seeded, ListProcesses() */ \
	X(containers) /* containers named from their runtimes' state */ \
	X(recorder)  /* the flight recorder */ \
	X(probes)    /* Probes=, ListProbes(), SetProbeEnabled() */ \
	X(counters)  /* perf counters per cgroup */ \
	X(capture)   /* packet captures */ \
	X(history)   /* the event history */
/* clang-format on */

#define FEATURE_DECLARE(name) extern const FeatureVtable name##_feature;
FEATURE_LIST(FEATURE_DECLARE)
#undef FEATURE_DECLARE

extern const FeatureVtable *const feature_table[];
extern const size_t feature_table_size;
