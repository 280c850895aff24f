/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The load: one thread per producer CPU, pinned there, calling getpgid() (which fires the
 * benchmark producer) in a loop for a fixed time, evenly paced when a rate is given. */
#pragma once

#include <stdint.h>

#include "kernel/cpuset.h"

typedef struct LoadOptions {
	const CpuSet *cpus; /* one load thread per CPU */
	double calls_per_s; /* all threads together; 0 = as fast as they can */
	uint64_t duration_ns;
} LoadOptions;

typedef struct LoadResult {
	uint64_t calls;      /* getpgid() calls made, all threads */
	uint64_t elapsed_ns; /* from the common start to the last thread's end */
} LoadResult;

/* Runs the load to completion (blocks for the duration). */
int load_run(const LoadOptions *o, LoadResult *ret);

/* CLOCK_MONOTONIC and CLOCK_BOOTTIME in nanoseconds (vDSO, no syscall). */
uint64_t now_ns(void);
uint64_t boottime_ns(void);
