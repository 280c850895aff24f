/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The names of the perf counters, as Counters= spells them (perf's event names) and as JSON
 * and the D-Bus interface key them. */
#include <errno.h>

#include "kernel/counter-names.h"
#include "string-table.h"

/* clang-format off */
static const char *const counter_table[PERFRELAY_COUNTERS_MAX] = {
	[PERFRELAY_COUNTER_TASK_CLOCK] = "task-clock",
	[PERFRELAY_COUNTER_CONTEXT_SWITCHES] = "context-switches",
	[PERFRELAY_COUNTER_PAGE_FAULTS] = "page-faults",
	[PERFRELAY_COUNTER_CPU_MIGRATIONS] = "cpu-migrations",
	[PERFRELAY_COUNTER_CYCLES] = "cycles",
	[PERFRELAY_COUNTER_INSTRUCTIONS] = "instructions",
	[PERFRELAY_COUNTER_CACHE_MISSES] = "cache-misses",
	[PERFRELAY_COUNTER_BRANCH_MISSES] = "branch-misses",
};

static const char *const counter_key_table[PERFRELAY_COUNTERS_MAX] = {
	[PERFRELAY_COUNTER_TASK_CLOCK] = "task_clock_ns",
	[PERFRELAY_COUNTER_CONTEXT_SWITCHES] = "context_switches",
	[PERFRELAY_COUNTER_PAGE_FAULTS] = "page_faults",
	[PERFRELAY_COUNTER_CPU_MIGRATIONS] = "cpu_migrations",
	[PERFRELAY_COUNTER_CYCLES] = "cycles",
	[PERFRELAY_COUNTER_INSTRUCTIONS] = "instructions",
	[PERFRELAY_COUNTER_CACHE_MISSES] = "cache_misses",
	[PERFRELAY_COUNTER_BRANCH_MISSES] = "branch_misses",
};
/* clang-format on */

DEFINE_STRING_TABLE_LOOKUP(counter, unsigned);
DEFINE_STRING_TABLE_LOOKUP(counter_key, unsigned);

bool counter_is_hardware(unsigned id) {
	return id >= PERFRELAY_COUNTER_CYCLES && id < PERFRELAY_COUNTERS_MAX;
}
