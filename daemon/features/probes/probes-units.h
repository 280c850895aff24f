/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Who floods (docs/pipeline.md, "Attribution"): GetStats()' "units" from the pinned per (cgroup,
 * producer) counts every producer keeps in BPF, and the pruning of cgroups that are gone. */
#pragma once

#include <systemd/sd-bus.h>

#include "core/manager.h"

/* GetStats() lists at most this many cgroups: the top by attempts and the top by failures. */
#define UNITS_LISTED_MAX 32u
/* How often the entries of removed cgroups leave the map (their counts stay in "pruned"). */
#define UNITS_PRUNE_USEC (30u * 1000u * 1000u)

typedef struct UnitsPruned {
	uint64_t attempts, failures, entries;
	uint64_t throttled;
	uint64_t last_usec; /* CLOCK_MONOTONIC of the last pruning */
} UnitsPruned;

/* Orders UnitCount entries by (cgroup, producer): for qsort() and bsearch(). */
int unit_count_cmp(const void *a, const void *b);

/* Removes the entries of cgroups that are gone, adding their counts to *pruned. */
void units_prune(Manager *m, UnitsPruned *pruned);
/* GetStats()' "units" section. */
int units_stats_append(Manager *m, sd_bus_message *reply, const UnitsPruned *pruned);
