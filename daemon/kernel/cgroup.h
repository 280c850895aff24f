/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit resolution for events that carry a cgroup v2 id: where the cgroup2 tree is mounted, and a
 * per-reader bounded cache in front of a resolver (the cgroup watch's index of the tree,
 * cgroupwatch.h: the id's path, and the path's systemd unit, unitname.h). A miss takes the
 * watch's lock once; hits cost a hash and a short probe. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "macro.h"
#include "kernel/containerid.h"
#include "kernel/containers.h"

/* The cgroup2 mount: opened once by the main thread, then only read (by every reader). */
typedef struct CgroupFs CgroupFs;

/* Finds the cgroup2 mount in mountinfo text (the format of /proc/self/mountinfo) and returns
 * its mount point, unescaped, in *ret (malloc'd). -ENOENT if there is none. Pure. */
int cgroup2_mount_from_mountinfo(const char *text, char **ret);

/* Opens the cgroup2 mount named by the mountinfo file (normally /proc/self/mountinfo). */
int cgroup_fs_open(const char *mountinfo_path, CgroupFs **ret);
CgroupFs *cgroup_fs_free(CgroupFs *fs);
const char *cgroup_fs_path(const CgroupFs *fs);

/* Resolves a cgroup id (cgroup_watch_resolve_container()): writes the unit to unit
 * (NUL-terminated) and returns its length; 0 if the cgroup belongs to no unit; negative errno if
 * it cannot be resolved (-ESTALE: the cgroup is gone). If ret_container is not NULL, fills it with
 * the cgroup's container (CONTAINER_NONE: none). Called by the reader that owns the cache. */
typedef ssize_t (*CgroupResolveFn)(
	void *userdata, uint64_t id, char *unit, size_t size, ContainerRef *ret_container);

/* A reader thread's own cache: no locks, the thread that looks up is the only user. */
typedef struct CgroupCache CgroupCache;

typedef struct CgroupCacheStats {
	uint64_t hits;
	uint64_t misses;    /* calls of the resolver */
	uint64_t failures;  /* resolver errors (the id is then cached as "no unit") */
	uint64_t evictions; /* entries replaced because their probe window was full */
} CgroupCacheStats;

/* n_entries is rounded up to a power of two (at least 8). */
int cgroup_cache_new(unsigned n_entries, CgroupResolveFn fn, void *userdata, CgroupCache **ret);
CgroupCache *cgroup_cache_free(CgroupCache *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(CgroupCache *, cgroup_cache_free);

/* The unit of cgroup `id`, or NULL if none (id 0 is "no cgroup": always NULL). The string
 * stays valid until the next lookup on this cache. Resolves on a miss; never allocates on a
 * hit. */
const char *cgroup_cache_lookup(CgroupCache *c, uint64_t id);

/* The cgroups' containers are entries of t (NULL: none, the default), one reference per cached
 * cgroup in a container. Set before the first lookup. */
void cgroup_cache_set_containers(CgroupCache *c, ContainerTable *t);

/* Whether the cache has a table of containers with any container in it now. */
bool cgroup_cache_any_containers(const CgroupCache *c);

/* As cgroup_cache_lookup(), and the cgroup's container in *ret_container (NULL: none, or no
 * table), valid as long as the unit is. */
const char *cgroup_cache_resolve(CgroupCache *c, uint64_t id, const Container **ret_container);

/* Counters: written by the owning thread, readable from any thread (relaxed atomics). */
void cgroup_cache_get_stats(const CgroupCache *c, CgroupCacheStats *ret);
