/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The units of cgroups that no longer exist: the cgroup2 tree watched with inotify, each new
 * cgroup's id (its inode) and unit remembered, so that a flight recorder snapshot can name the
 * unit of events whose cgroup was removed since (a unit that failed). Bounded: the most recent
 * CGROUP_WATCH_REMEMBER cgroups with a unit that root made (systemd's units), and as many that
 * users made in subtrees delegated to them, in a ring of their own: however many cgroups users
 * make, they push out only users' cgroups (counted); at most CGROUP_WATCH_MAX_WATCHES
 * directories. Main thread only. */
#pragma once

#include <stdint.h>

#include <systemd/sd-event.h>

#include "macro.h"

#define CGROUP_WATCH_REMEMBER    4096u
#define CGROUP_WATCH_MAX_WATCHES 16384u

typedef struct CgroupWatch CgroupWatch;

typedef struct CgroupWatchStats {
	uint64_t remembered;    /* cgroups with a unit seen (created, or found at start) */
	uint64_t evicted;       /* root-made ones forgotten for newer root-made ones */
	uint64_t evicted_users; /* ones users made (delegated subtrees) forgotten for newer such */
	uint64_t missed;        /* directories that were gone before they could be looked at */
	uint64_t unwatched;     /* directories not watched: CGROUP_WATCH_MAX_WATCHES reached */
} CgroupWatchStats;

/* Watches the cgroup2 tree mounted at `root` (every directory) from the event loop, and
 * remembers the cgroups that exist now. */
int cgroup_watch_new(sd_event *event, const char *root, CgroupWatch **ret);
CgroupWatch *cgroup_watch_free(CgroupWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(CgroupWatch *, cgroup_watch_free);

/* The unit of cgroup `id` as it was when the cgroup existed, or NULL. Reads the pending inotify
 * events first, so that a cgroup created just before the call is known. */
const char *cgroup_watch_lookup(CgroupWatch *w, uint64_t id);
void cgroup_watch_get_stats(const CgroupWatch *w, CgroupWatchStats *ret);
