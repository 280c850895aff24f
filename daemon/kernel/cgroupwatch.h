/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The cgroup2 tree as the daemon knows it: every directory watched with inotify and indexed by
 * its inode (the cgroup id), which names a cgroup's path, unit and owner without a file handle;
 * and the units of cgroups that no longer exist, remembered when they go, so that a flight
 * recorder snapshot can name the unit of events whose cgroup was removed since (a unit that
 * failed). Bounded: at most CGROUP_WATCH_MAX_WATCHES directories (more are counted as
 * unwatched and name no unit), of which the directories users made in subtrees delegated to
 * them take at most CGROUP_WATCH_MAX_USERS_WATCHES, and those of one user
 * CGROUP_WATCH_MAX_USER_WATCHES: every watch is root's inotify budget (fs.inotify.
 * max_user_watches, shared with systemd), and a user's mkdir loop must not spend it nor crowd
 * out the system's units. An overflow of the inotify queue (lost IN_CREATE/IN_DELETE) is
 * answered by a rescan of the tree on the main thread, at most once a second. Removed cgroups are kept in
 * two queues, those root made (systemd's units) and those users made in subtrees delegated to them, so that
 * however many cgroups users make they push out only users' cgroups; each keeps CGROUP_WATCH_REMEMBER and forgets
 * its oldest only once the flight recorder can hold no record from before it went (cgroup_watch_set_window()),
 * growing meanwhile up to CGROUP_WATCH_REMEMBER_MAX (beyond, the oldest goes anyway, counted as evicted
 * young). Thread-safe: the main thread owns it, reader threads resolve ids through it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-event.h>

#include "macro.h"
#include "kernel/containerid.h"

#define CGROUP_WATCH_REMEMBER          4096u
#define CGROUP_WATCH_REMEMBER_MAX      65536u
#define CGROUP_WATCH_MAX_WATCHES       65536u
#define CGROUP_WATCH_MAX_USERS_WATCHES 16384u
#define CGROUP_WATCH_MAX_USER_WATCHES  1024u
/* Directories users made beyond their quota, told to the user function anyway (so that the
 * counters hold them to the users' share), at most this many: the oldest is taken back. */
#define CGROUP_WATCH_MAX_UNWATCHED_IDS 4096u

typedef struct CgroupWatch CgroupWatch;

typedef struct CgroupWatchStats {
	uint64_t watched;         /* directories (live cgroups) watched now */
	uint64_t remembered;      /* removed cgroups with a unit remembered */
	uint64_t kept;            /* of which remembered now */
	uint64_t evicted;         /* root-made ones forgotten for newer root-made ones */
	uint64_t evicted_users;   /* ones users made (delegated subtrees) forgotten for newer such */
	uint64_t evicted_young;   /* of the evicted, ones the recorder may still have events of */
	uint64_t missed;          /* directories that were gone before they could be looked at */
	uint64_t unwatched;       /* directories not watched: CGROUP_WATCH_MAX_WATCHES reached */
	uint64_t unwatched_users; /* users' directories not watched: their quota reached */
	uint64_t overflows;       /* inotify queue overflows (events lost) */
	uint64_t rescans;         /* rescans of the tree after them */
} CgroupWatchStats;

/* Watches the cgroup2 tree mounted at `root` (every directory), from `event` (NULL: only when
 * asked), and indexes and remembers the cgroups that exist now. */
int cgroup_watch_new(sd_event *event, const char *root, CgroupWatch **ret);
CgroupWatch *cgroup_watch_free(CgroupWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(CgroupWatch *, cgroup_watch_free);

/* Walks the tree again: watches directories made while events were lost, forgets those removed.
 * What the main thread runs after an overflow (without an event loop: the caller's). */
void cgroup_watch_rescan(CgroupWatch *w);

/* A live cgroup's unit: writes it to unit (NUL-terminated) and returns its length; 0 if the
 * cgroup belongs to no unit; -ESTALE if it is not a live cgroup the watch knows (removed, or
 * unwatched). Reads the pending inotify events first. Any thread. Signature of
 * CgroupResolveFn (cgroup.h), userdata = the CgroupWatch. */
ssize_t cgroup_watch_resolve(void *userdata, uint64_t id, char *unit, size_t size);
/* The same, and the cgroup's container (container_from_cgroup_path()) in *ret_container if it is
 * not NULL: a CgroupResolveFn (cgroup.h). */
ssize_t cgroup_watch_resolve_container(
	void *userdata, uint64_t id, char *unit, size_t size, ContainerRef *ret_container);
/* The same, and the user the cgroup belongs to (cgroup_path_owner(): (uid_t) -1 for the system). */
ssize_t cgroup_watch_resolve_owner(CgroupWatch *w, uint64_t id, char *unit, size_t size, uid_t *ret_owner);

/* Told, under the watch's lock (on the main thread or a reader's, whichever reads the inotify
 * events), of each cgroup a user made (its directory is not root's) as it appears (`added`) and
 * as it goes. */
typedef void (*CgroupWatchUserFn)(void *userdata, uint64_t id, bool added);
/* Sets it (NULL: none) and calls it at once for every such cgroup live now. */
void cgroup_watch_set_user_fn(CgroupWatch *w, CgroupWatchUserFn fn, void *userdata);

/* Who made live cgroup `id` (its directory's owner): a user for cgroups made in a subtree
 * delegated to them; 0 (root) for systemd's, and for cgroups the watch does not know. */
uid_t cgroup_watch_dir_owner(CgroupWatch *w, uint64_t id);

/* The unit cgroup `id` had when it was made (it may be gone since): as cgroup_watch_resolve(),
 * 0 if none is remembered. Reads the pending inotify events first. Any thread. */
ssize_t cgroup_watch_lookup(CgroupWatch *w, uint64_t id, char *unit, size_t size);
/* Cgroups removed before start_ns (CLOCK_MONOTONIC) have no record in the flight recorder any
 * more (recorder_window_start()); UINT64_MAX without a recorder. Until it is called, nothing
 * is known to be out of the window. */
void cgroup_watch_set_window(CgroupWatch *w, uint64_t start_ns);
void cgroup_watch_get_stats(CgroupWatch *w, CgroupWatchStats *ret);
/* The ids of the live cgroups that are the own directories of `units` (unit names: the
 * directory whose path names the unit and whose parent's does not; a user unit run by several
 * users' managers has one each), at most `max` into ids. Main thread (a walk of every watch). */
size_t cgroup_watch_unit_dirs(CgroupWatch *w, const char *const *units, size_t n_units, uint64_t *ids, size_t max);
