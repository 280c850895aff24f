/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The table of features, in start-up order (feature.h says what each hook's place is). */
#include "feature-table.h"
#include "manager.h"
#include "macro.h"

const FeatureVtable *const feature_table[] = {
	/* setup(): before the readers start */
	&hotplug_feature,   /* CPUs that go offline and come back */
	&stdout_feature,    /* --stdout */
	&producers_feature, /* third-party producers found and described */
	&processes_feature, /* the process table seeded, ListProcesses() */
	&recorder_feature,  /* the flight recorder */
	/* start(): the probes first, then what needs them attached */
	&probes_feature,   /* Probes=, ListProbes(), SetProbeEnabled() */
	&counters_feature, /* perf counters per cgroup */
	&capture_feature,  /* packet captures */
};

const size_t feature_table_size = ELEMENTSOF(feature_table);
