/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The perf counters by name (docs/counters.md): the configuration's names (Counters=), the JSON
 * keys of "counters" events, and the default sets. Pure: the configuration parser, the encoder
 * and perfrelayctl use them. */
#pragma once

#include <stdbool.h>

#include "event.h"

#define COUNTERS_SOFTWARE                                                                    \
	((1u << PERFRELAY_COUNTER_TASK_CLOCK) | (1u << PERFRELAY_COUNTER_CONTEXT_SWITCHES) | \
	 (1u << PERFRELAY_COUNTER_PAGE_FAULTS) | (1u << PERFRELAY_COUNTER_CPU_MIGRATIONS))
#define COUNTERS_ALL ((1u << PERFRELAY_COUNTERS_MAX) - 1)
/* Counters= by default: the software counters, and cycles and instructions where a hardware
 * PMU has them (perfcount_open() skips what the machine lacks). */
#define COUNTERS_DEFAULT \
	(COUNTERS_SOFTWARE | (1u << PERFRELAY_COUNTER_CYCLES) | (1u << PERFRELAY_COUNTER_INSTRUCTIONS))

const char *counter_to_string(unsigned id); /* "task-clock", ... or NULL */
int counter_from_string(const char *s);     /* PERFRELAY_COUNTER_* or -EINVAL */
/* The key of a counter in JSON ("task_clock_ns", "context_switches", ...) and in
 * GetUnitCounters(). */
const char *counter_key_to_string(unsigned id);
int counter_key_from_string(const char *s);
bool counter_is_hardware(unsigned id);
