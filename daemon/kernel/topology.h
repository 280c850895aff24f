/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU topology from sysfs: online/possible CPUs and CPU groups that share a last-level cache. */
#pragma once

#include "kernel/cpuset.h"

/* sysfs_root is normally "/sys" (tests pass a fake tree). */
int topology_online_cpus(const char *sysfs_root, CpuSet *ret);
int topology_possible_cpu_count(const char *sysfs_root, unsigned *ret); /* highest possible + 1 */

/* Splits `cpus` into groups of CPUs sharing their highest-level cache (cache/indexN with the
 * largest level's shared_cpu_list). Falls back to one group per package, then to one group
 * per CPU if sysfs lacks cache information. Returns the number of groups (>0) and a malloc'd
 * array in *ret_groups. */
int topology_llc_groups(const char *sysfs_root, const CpuSet *cpus, CpuSet **ret_groups);

/* Splits `cpus` into consecutive groups of n CPUs (the last may be smaller). */
int topology_chunk_groups(const CpuSet *cpus, unsigned n, CpuSet **ret_groups);
