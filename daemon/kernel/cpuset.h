/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU sets: parsing and formatting of kernel-style CPU lists ("0-3,8,10-11"). Pure logic. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PERFRELAY_MAX_CPUS 4096u /* bound on CPU numbers accepted from config and sysfs */

typedef struct CpuSet {
	uint64_t bits[PERFRELAY_MAX_CPUS / 64];
} CpuSet;

void cpuset_clear(CpuSet *s);
int cpuset_add(CpuSet *s, unsigned cpu);     /* -ERANGE if cpu >= PERFRELAY_MAX_CPUS */
void cpuset_remove(CpuSet *s, unsigned cpu); /* no-op if absent or out of range */
bool cpuset_contains(const CpuSet *s, unsigned cpu);
unsigned cpuset_count(const CpuSet *s);
bool cpuset_is_empty(const CpuSet *s);
bool cpuset_intersects(const CpuSet *a, const CpuSet *b);
/* Next CPU >= from in the set, or -1. */
int cpuset_next(const CpuSet *s, unsigned from);
/* Every CPU of the set, ascending: FOREACH_CPU(cpu, set) { ... } declares int cpu. */
#define FOREACH_CPU(cpu, set) \
	for (int cpu = cpuset_next((set), 0); cpu >= 0; cpu = cpuset_next((set), (unsigned) cpu + 1))

/* Parses a kernel CPU list: comma-separated numbers and ranges "a-b" (a <= b), optional
 * surrounding whitespace and a trailing newline (as sysfs writes it). An empty string is an
 * empty set. Returns -EINVAL on syntax errors, -ERANGE on numbers >= PERFRELAY_MAX_CPUS. */
int cpuset_parse(const char *s, CpuSet *ret);

/* Formats as a compact kernel CPU list ("0-3,8") into buf; returns -ENOBUFS if it does not fit. */
int cpuset_format(const CpuSet *s, char *buf, size_t size);
