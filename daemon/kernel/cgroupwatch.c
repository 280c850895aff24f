/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The cgroup tree as the daemon knows it (cgroupwatch.h): every directory watched with inotify,
 * indexed by its inode (the cgroup id), so that a cgroup id names its path and unit without a
 * file handle (open_by_handle_at() and CAP_DAC_READ_SEARCH, which open any inode of a mounted
 * filesystem); and the units of cgroups remembered after they are removed. mkdir(2) on cgroup2
 * goes through vfs_mkdir(), which reports IN_CREATE|IN_ISDIR to a watch on the parent; systemd
 * makes a unit's cgroup before it moves the unit's first process in, so a cgroup is known (its
 * IN_CREATE is at least queued) before any of its tasks can emit an event. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel/cgroupwatch.h"
#include "time-util.h"
#include "kernel/unitname.h"

/* IN_DELETE on the parent: rmdir(2) of a cgroup reports no IN_DELETE_SELF or IN_IGNORED to the
 * cgroup's own watch (kernfs keeps the inode's link count), only IN_DELETE|IN_ISDIR to its
 * parent's. */
#define WATCH_MASK (IN_CREATE | IN_DELETE | IN_ONLYDIR | IN_DONT_FOLLOW)

/* One watched directory: a live cgroup. */
typedef struct Watch {
	int wd;
	uint64_t id;   /* its inode, the cgroup id; 0 when it could not be looked at */
	uid_t dir_uid; /* who made it: root (systemd), or a user in a subtree delegated to them */
	char *path;    /* relative to the root: "" or "/system.slice/..." */
} Watch;

typedef struct Remembered {
	uint64_t id;
	uint64_t removed_ns; /* CLOCK_MONOTONIC when the watch saw it go */
	uint64_t seq;        /* the order cgroups went in, across both rings */
	char *unit;
} Remembered;

/* Removed cgroups of one kind of owner, oldest first: a queue in a circular array that grows
 * from CGROUP_WATCH_REMEMBER to CGROUP_WATCH_REMEMBER_MAX while its oldest entry may still have
 * records in the flight recorder. */
typedef struct RememberRing {
	Remembered *entries;
	size_t head, n, capacity;
} RememberRing;

/* How many directories one user made are watched. */
typedef struct OwnerWatches {
	uid_t uid;
	unsigned n;
} OwnerWatches;

/* After an overflow, the main thread rescans at most this often. */
#define RESCAN_INTERVAL_USEC (1 * USEC_PER_SEC)

struct CgroupWatch {
	/* Everything below: the main thread (inotify, lookups) and the reader threads (a miss of
	 * their unit cache, cgroup_watch_resolve()). Held for one batch of inotify events or one
	 * lookup; readers take it only for a cgroup id they have not seen. */
	pthread_mutex_t lock;
	int fd;
	char *root;
	sd_event_source *source;
	void *by_wd, *by_id, *by_path; /* tsearch() trees of the same Watches */
	size_t n_watches;
	/* Directories root made (systemd's units) apart from those users made in subtrees
	 * delegated to them: a user who makes thousands of cgroups pushes out only users' cgroups,
	 * never the unit of a service that failed an hour ago. */
	RememberRing system, users;
	uint64_t seq;
	uint64_t window_start_ns;  /* removed before this, a cgroup has no record in the recorder */
	CgroupWatchUserFn user_fn; /* told of cgroups users make and remove */
	void *user_userdata;
	OwnerWatches *owners; /* users with directories watched (CGROUP_WATCH_MAX_USER_WATCHES) */
	size_t n_owners, n_users_watches;
	uint64_t *unwatched_ids; /* a ring of CGROUP_WATCH_MAX_UNWATCHED_IDS: users' directories
				  * beyond their quota, told to user_fn though not watched */
	size_t unwatched_head, n_unwatched;
	bool rescan_wanted;            /* an overflow lost events: the main thread rescans */
	sd_event_source *rescan_timer; /* the main thread's check, once a second */
	CgroupWatchStats stats;
};

static int cmp_wd(const void *a, const void *b) {
	const Watch *x = a, *y = b;

	return (x->wd > y->wd) - (x->wd < y->wd);
}

static int cmp_id(const void *a, const void *b) {
	const Watch *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static int cmp_path(const void *a, const void *b) {
	return strcmp(((const Watch *) a)->path, ((const Watch *) b)->path);
}

static Watch *find_wd(const CgroupWatch *w, int wd) {
	Watch key = { .wd = wd };
	Watch **p = tfind(&key, &w->by_wd, cmp_wd);

	return p ? *p : NULL;
}

static Watch *find_id(const CgroupWatch *w, uint64_t id) {
	Watch key = { .id = id };
	Watch **p = tfind(&key, &w->by_id, cmp_id);

	return p ? *p : NULL;
}

static OwnerWatches *owner_find(CgroupWatch *w, uid_t uid) {
	for (size_t i = 0; i < w->n_owners; i++)
		if (w->owners[i].uid == uid)
			return &w->owners[i];
	return NULL;
}

/* Whether one more directory of `uid` may be watched: root's always (the tree's own bound
 * aside); a user's within theirs and the users' together. */
static bool owner_has_room(CgroupWatch *w, uid_t uid) {
	const OwnerWatches *o;

	if (uid == 0)
		return true;
	o = owner_find(w, uid);
	return w->n_users_watches < CGROUP_WATCH_MAX_USERS_WATCHES &&
		(!o || o->n < CGROUP_WATCH_MAX_USER_WATCHES);
}

static bool owner_add(CgroupWatch *w, uid_t uid) {
	OwnerWatches *o;

	if (uid == 0)
		return true;
	o = owner_find(w, uid);
	if (!o) {
		OwnerWatches *a = reallocarray(w->owners, w->n_owners + 1, sizeof(*a));

		if (!a)
			return false;
		w->owners = a;
		o = &w->owners[w->n_owners++];
		*o = (OwnerWatches){ .uid = uid };
	}
	o->n++;
	w->n_users_watches++;
	return true;
}

static void owner_remove(CgroupWatch *w, uid_t uid) {
	OwnerWatches *o = uid != 0 ? owner_find(w, uid) : NULL;

	if (!o)
		return;
	w->n_users_watches--;
	if (--o->n == 0)
		*o = w->owners[--w->n_owners];
}

static bool ring_grow(RememberRing *ring) {
	size_t capacity = ring->capacity ? ring->capacity * 2 : 64;
	Remembered *e;

	if (ring->capacity >= CGROUP_WATCH_REMEMBER_MAX)
		return false;
	e = calloc(capacity, sizeof(*e));
	if (!e)
		return false;
	for (size_t i = 0; i < ring->n; i++)
		e[i] = ring->entries[(ring->head + i) % ring->capacity];
	free(ring->entries);
	*ring = (RememberRing){ .entries = e, .head = 0, .n = ring->n, .capacity = capacity };
	return true;
}

static void ring_pop(CgroupWatch *w, RememberRing *ring, bool young) {
	Remembered *oldest = &ring->entries[ring->head];

	free(oldest->unit);
	*oldest = (Remembered){};
	ring->head = (ring->head + 1) % ring->capacity;
	ring->n--;
	if (ring == &w->system)
		w->stats.evicted++;
	else
		w->stats.evicted_users++;
	if (young)
		w->stats.evicted_young++;
}

/* A cgroup went: its unit is kept for snapshots of the events it had, and for the counters'
 * last interval. Beyond CGROUP_WATCH_REMEMBER the oldest are forgotten once the flight recorder
 * can no longer hold records from before they went; while it can, the ring grows, and only at
 * CGROUP_WATCH_REMEMBER_MAX is the oldest forgotten anyway (counted as young). */
static void remember_removed(CgroupWatch *w, const Watch *x) {
	RememberRing *ring = x->dir_uid == 0 ? &w->system : &w->users;
	char unit[256];
	Remembered *r;

	if (x->id == 0 || unit_from_cgroup_path(x->path, unit, sizeof(unit)) <= 0)
		return;
	/* Back to the bound, as far as the recorder allows. */
	while (ring->n >= CGROUP_WATCH_REMEMBER && ring->entries[ring->head].removed_ns < w->window_start_ns)
		ring_pop(w, ring, false);
	if (ring->n == ring->capacity && !ring_grow(ring)) {
		if (ring->n == 0)
			return; /* out of memory */
		ring_pop(w, ring, true);
	}
	r = &ring->entries[(ring->head + ring->n) % ring->capacity];
	*r = (Remembered){
		.id = x->id, .removed_ns = now_nsec(CLOCK_MONOTONIC), .seq = ++w->seq, .unit = strdup(unit)
	};
	if (!r->unit)
		return;
	ring->n++;
	w->stats.remembered++;
}

/* Indexes a watched directory by its wd and its id; false if it is watched already (an
 * IN_CREATE and the listing of its parent both saw it). */
static bool add_watch(CgroupWatch *w, int wd, const char *rel, const struct stat *st) {
	Watch *x = calloc(1, sizeof(*x));
	Watch **p;

	if (!x)
		return false;
	*x = (Watch){
		.wd = wd,
		.id = st ? (uint64_t) st->st_ino : 0,
		.dir_uid = st ? st->st_uid : 0,
		.path = strdup(rel),
	};
	if (!x->path || !(p = tsearch(x, &w->by_wd, cmp_wd)) || *p != x) {
		free(x->path);
		free(x);
		return false;
	}
	p = tsearch(x, &w->by_path, cmp_path);
	if (!p || !owner_add(w, x->dir_uid)) {
		if (p)
			tdelete(x, &w->by_path, cmp_path);
		tdelete(x, &w->by_wd, cmp_wd);
		free(x->path);
		free(x);
		return false;
	}
	if (*p != x) {
		/* A directory of that name removed and made again, its IN_DELETE still queued: the
		 * path names the new one. */
		tdelete(*p, &w->by_path, cmp_path);
		(void) tsearch(x, &w->by_path, cmp_path);
	}
	/* An id already indexed belongs to a directory gone whose removal is still queued: the
	 * new one is the live one. */
	if (x->id != 0) {
		Watch *old = find_id(w, x->id);

		if (old) {
			tdelete(old, &w->by_id, cmp_id);
			old->id = 0;
		}
		(void) tsearch(x, &w->by_id, cmp_id);
	}
	if (x->id != 0 && x->dir_uid != 0 && w->user_fn)
		w->user_fn(w->user_userdata, x->id, true);
	w->n_watches++;
	return true;
}

typedef void (*TreeFn)(CgroupWatch *w, const char *rel, unsigned depth);

/* fn for every directory right below rel (whose path is full), one level deeper. */
static void each_child(CgroupWatch *w, const char *full, const char *rel, unsigned depth, TreeFn fn) {
	DIR *d = opendir(full);

	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		char sub[PATH_MAX];

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name) < (int) sizeof(sub))
			fn(w, sub, depth + 1);
	}
	closedir(d);
}

/* A directory a user made beyond their quota: not watched (nor anything below it), but its id
 * goes to user_fn, so that the counters' programs, which look up a cgroup's ancestors too, hold
 * it and what is below it to the users' share. The oldest of a full ring is taken back. */
static void note_unwatched_user_dir(CgroupWatch *w, uint64_t id) {
	size_t slot;

	if (!w->unwatched_ids)
		w->unwatched_ids = calloc(CGROUP_WATCH_MAX_UNWATCHED_IDS, sizeof(uint64_t));
	if (!w->unwatched_ids || id == 0)
		return;
	for (size_t i = 0; i < w->n_unwatched; i++)
		if (w->unwatched_ids[(w->unwatched_head + i) % CGROUP_WATCH_MAX_UNWATCHED_IDS] == id)
			return; /* a rescan found it again */
	if (w->n_unwatched == CGROUP_WATCH_MAX_UNWATCHED_IDS) {
		if (w->user_fn)
			w->user_fn(w->user_userdata, w->unwatched_ids[w->unwatched_head], false);
		w->unwatched_head = (w->unwatched_head + 1) % CGROUP_WATCH_MAX_UNWATCHED_IDS;
		w->n_unwatched--;
	}
	slot = (w->unwatched_head + w->n_unwatched++) % CGROUP_WATCH_MAX_UNWATCHED_IDS;
	w->unwatched_ids[slot] = id;
	if (w->user_fn)
		w->user_fn(w->user_userdata, id, true);
}

/* Watches the directory rel and every directory below it, remembering each. */
static void watch_tree(CgroupWatch *w, const char *rel, unsigned depth) {
	char full[PATH_MAX];
	struct stat st;
	bool looked;
	int wd;

	if (depth > 32 || snprintf(full, sizeof(full), "%s%s", w->root, rel) >= (int) sizeof(full))
		return;
	if (w->n_watches >= CGROUP_WATCH_MAX_WATCHES) {
		w->stats.unwatched++;
		return;
	}
	/* Who made it, before it costs a watch: a user past their quota gets none (nor do the
	 * directories below it). */
	looked = stat(full, &st) >= 0;
	if (looked && !owner_has_room(w, st.st_uid)) {
		w->stats.unwatched_users++;
		note_unwatched_user_dir(w, (uint64_t) st.st_ino);
		return;
	}
	/* Watch first, then list: a directory made in between is seen by one or the other. */
	wd = inotify_add_watch(w->fd, full, WATCH_MASK);
	if (wd < 0) {
		w->stats.missed++;
		return;
	}
	if (!looked)
		w->stats.missed++;
	if (!add_watch(w, wd, rel, looked ? &st : NULL))
		return;

	each_child(w, full, rel, depth, watch_tree);
}

static void free_watch(void *p) {
	Watch *x = p;

	free(x->path);
	free(x);
}

/* The directory is gone: its cgroup lives on only in the remembered rings. */
static void forget(CgroupWatch *w, Watch *x) {
	Watch **p;

	tdelete(x, &w->by_wd, cmp_wd);
	p = tfind(x, &w->by_path, cmp_path);
	if (p && *p == x)
		tdelete(x, &w->by_path, cmp_path);
	if (x->id != 0 && find_id(w, x->id) == x) {
		tdelete(x, &w->by_id, cmp_id);
		if (x->dir_uid != 0 && w->user_fn)
			w->user_fn(w->user_userdata, x->id, false);
	}
	owner_remove(w, x->dir_uid);
	free_watch(x);
	w->n_watches--;
}

/* A directory that went without its watch being told (kernfs): the watch goes, the cgroup is
 * remembered. Its IN_IGNORED, if the kernel sends one, finds no watch by then. */
static void drop(CgroupWatch *w, Watch *x) {
	(void) inotify_rm_watch(w->fd, x->wd);
	remember_removed(w, x);
	forget(w, x);
}

static void forget_path(CgroupWatch *w, const char *rel) {
	Watch key = { .path = (char *) rel }, **p = tfind(&key, &w->by_path, cmp_path);

	if (p)
		drop(w, *p);
}

static void read_events(CgroupWatch *w) {
	_Alignas(struct inotify_event) char buf[16384];
	ssize_t n;

	while ((n = read(w->fd, buf, sizeof(buf))) > 0)
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *e = (const struct inotify_event *) p;
			const Watch *parent;
			char rel[PATH_MAX];

			p += sizeof(*e) + e->len;
			if (e->mask & IN_IGNORED) {
				Watch *x = find_wd(w, e->wd);

				/* Gone (other filesystems say so to the directory's own watch first). */
				if (x) {
					remember_removed(w, x);
					forget(w, x);
				}
				continue;
			}
			if (e->mask & IN_Q_OVERFLOW) {
				/* Events were lost: the main thread walks the tree again (a reader that
				 * read this must not: it only says so). */
				w->stats.missed++;
				w->stats.overflows++;
				w->rescan_wanted = true;
				continue;
			}
			if (!(e->mask & (IN_CREATE | IN_DELETE)) || !(e->mask & IN_ISDIR) || e->len == 0)
				continue;
			parent = find_wd(w, e->wd);
			if (!parent ||
			    snprintf(rel, sizeof(rel), "%s/%s", parent->path, e->name) >= (int) sizeof(rel))
				continue;
			if (e->mask & IN_CREATE)
				watch_tree(w, rel, 0);
			else
				forget_path(w, rel);
		}
}

static CgroupWatch *walk_watch; /* twalk() passes no userdata; only under the lock */
static Watch **walk_gone;
static size_t walk_n_gone, walk_n_alloc;

/* A watched directory that is no longer there, or is another directory now. */
static void collect_gone(const void *node, VISIT which, int depth) {
	Watch *x = *(Watch *const *) node;
	char full[PATH_MAX];
	struct stat st;

	if (which != postorder && which != leaf)
		return;
	if (snprintf(full, sizeof(full), "%s%s", walk_watch->root, x->path) >= (int) sizeof(full))
		return;
	if (stat(full, &st) < 0) {
		if (errno != ENOENT)
			return;
	} else if (x->id == 0 || (uint64_t) st.st_ino == x->id)
		return; /* still there */
	/* Gone, or another directory of that name now (scan_tree() watches that one). */
	if (walk_n_gone == walk_n_alloc) {
		size_t n = walk_n_alloc ? walk_n_alloc * 2 : 64;
		Watch **a = reallocarray(walk_gone, n, sizeof(*a));

		if (!a)
			return;
		walk_gone = a;
		walk_n_alloc = n;
	}
	walk_gone[walk_n_gone++] = x;
}

/* Watches what is not watched below rel (a watched directory's children are looked at; an
 * unwatched one is watched with its tree). */
static void scan_tree(CgroupWatch *w, const char *rel, unsigned depth) {
	Watch key = { .path = (char *) rel };
	char full[PATH_MAX];

	if (depth > 32 || snprintf(full, sizeof(full), "%s%s", w->root, rel) >= (int) sizeof(full))
		return;
	if (!tfind(&key, &w->by_path, cmp_path)) {
		watch_tree(w, rel, depth);
		return;
	}
	each_child(w, full, rel, depth, scan_tree);
}

void cgroup_watch_rescan(CgroupWatch *w) {
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	read_events(w);
	w->rescan_wanted = false;
	walk_watch = w;
	walk_n_gone = 0;
	twalk(w->by_path, collect_gone);
	for (size_t i = 0; i < walk_n_gone; i++)
		drop(w, walk_gone[i]);
	free(walk_gone);
	walk_gone = NULL;
	walk_n_gone = walk_n_alloc = 0;
	walk_watch = NULL;
	scan_tree(w, "", 0);
	w->stats.rescans++;
	pthread_mutex_unlock(&w->lock);
}

/* The main thread's look, once a second, at whether an overflow asked for a rescan. */
static int on_rescan_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	CgroupWatch *w = userdata;
	bool wanted;

	pthread_mutex_lock(&w->lock);
	wanted = w->rescan_wanted;
	pthread_mutex_unlock(&w->lock);
	if (wanted)
		cgroup_watch_rescan(w);
	(void) sd_event_source_set_time(s, usec + RESCAN_INTERVAL_USEC);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

static int on_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	CgroupWatch *w = userdata;

	pthread_mutex_lock(&w->lock);
	read_events(w);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

int cgroup_watch_new(sd_event *event, const char *root, CgroupWatch **ret) {
	_cleanup_(cgroup_watch_freep) CgroupWatch *w = calloc(1, sizeof(CgroupWatch));
	int r;

	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->lock, NULL);
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0)
		return -errno;
	w->root = strdup(root);
	if (!w->root)
		return -ENOMEM;
	watch_tree(w, "", 0);
	if (event) {
		r = sd_event_add_io(event, &w->source, w->fd, EPOLLIN, on_inotify, w);
		if (r < 0)
			return r;
		r = sd_event_add_time_relative(
			event,
			&w->rescan_timer,
			CLOCK_MONOTONIC,
			RESCAN_INTERVAL_USEC,
			USEC_PER_SEC / 10,
			on_rescan_timer,
			w);
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(w);
	return 0;
}

static void no_free(void *p) {
}

CgroupWatch *cgroup_watch_free(CgroupWatch *w) {
	if (!w)
		return NULL;
	sd_event_source_disable_unref(w->source);
	sd_event_source_disable_unref(w->rescan_timer);
	safe_close(w->fd);
	tdestroy(w->by_id, no_free); /* the same Watches as by_wd */
	tdestroy(w->by_path, no_free);
	tdestroy(w->by_wd, free_watch);
	for (size_t i = 0; i < w->system.capacity; i++)
		free(w->system.entries[i].unit);
	for (size_t i = 0; i < w->users.capacity; i++)
		free(w->users.entries[i].unit);
	free(w->system.entries);
	free(w->users.entries);
	free(w->owners);
	free(w->unwatched_ids);
	free(w->root);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
}

static ssize_t resolve(
	CgroupWatch *w, uint64_t id, char *unit, size_t size, uid_t *ret_owner, ContainerRef *ret_container) {
	const Watch *x;
	ssize_t n;

	if (ret_owner)
		*ret_owner = (uid_t) -1;
	if (ret_container)
		*ret_container = (ContainerRef){ .runtime = CONTAINER_NONE, .owner = (uid_t) -1 };
	pthread_mutex_lock(&w->lock);
	read_events(w); /* a cgroup made just now is in the queue */
	x = find_id(w, id);
	if (!x)
		n = -ESTALE; /* removed, or never seen (CGROUP_WATCH_MAX_WATCHES, an overflow) */
	else {
		if (ret_owner)
			*ret_owner = cgroup_path_owner(x->path);
		if (ret_container)
			(void) container_from_cgroup_path(x->path, ret_container);
		n = unit_from_cgroup_path(x->path, unit, size);
	}
	pthread_mutex_unlock(&w->lock);
	return n;
}

ssize_t cgroup_watch_resolve_owner(CgroupWatch *w, uint64_t id, char *unit, size_t size, uid_t *ret_owner) {
	return resolve(w, id, unit, size, ret_owner, NULL);
}

ssize_t cgroup_watch_resolve_container(
	void *userdata, uint64_t id, char *unit, size_t size, ContainerRef *ret_container) {
	return resolve(userdata, id, unit, size, NULL, ret_container);
}

static void tell_user_cgroup(const void *node, VISIT which, int depth) {
	const Watch *x = *(const Watch *const *) node;

	if ((which == postorder || which == leaf) && x->dir_uid != 0)
		walk_watch->user_fn(walk_watch->user_userdata, x->id, true);
}

void cgroup_watch_set_user_fn(CgroupWatch *w, CgroupWatchUserFn fn, void *userdata) {
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	read_events(w);
	w->user_fn = fn;
	w->user_userdata = userdata;
	if (fn) {
		walk_watch = w;
		twalk(w->by_id, tell_user_cgroup);
		walk_watch = NULL;
		for (size_t i = 0; i < w->n_unwatched; i++)
			fn(userdata,
			   w->unwatched_ids[(w->unwatched_head + i) % CGROUP_WATCH_MAX_UNWATCHED_IDS],
			   true);
	}
	pthread_mutex_unlock(&w->lock);
}

uid_t cgroup_watch_dir_owner(CgroupWatch *w, uint64_t id) {
	const Watch *x;
	uid_t uid;

	if (!w)
		return 0;
	pthread_mutex_lock(&w->lock);
	x = find_id(w, id);
	uid = x ? x->dir_uid : 0;
	pthread_mutex_unlock(&w->lock);
	return uid;
}

ssize_t cgroup_watch_resolve(void *userdata, uint64_t id, char *unit, size_t size) {
	return cgroup_watch_resolve_owner(userdata, id, unit, size, NULL);
}

static const Remembered *ring_find(const RememberRing *ring, uint64_t id) {
	for (size_t k = ring->n; k > 0; k--) {
		const Remembered *r = &ring->entries[(ring->head + k - 1) % ring->capacity];

		if (r->id == id)
			return r;
	}
	return NULL;
}

void cgroup_watch_set_window(CgroupWatch *w, uint64_t start_ns) {
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->window_start_ns = start_ns;
	pthread_mutex_unlock(&w->lock);
}

ssize_t cgroup_watch_lookup(CgroupWatch *w, uint64_t id, char *unit, size_t size) {
	const Remembered *a, *b, *r;
	ssize_t n = 0;

	if (!w || id == 0)
		return 0;
	pthread_mutex_lock(&w->lock);
	read_events(w);
	/* The newest: an inode number reused by a later cgroup names the later one. */
	a = ring_find(&w->system, id);
	b = ring_find(&w->users, id);
	r = a && b ? (a->seq > b->seq ? a : b) : a ?: b;
	if (r) {
		n = (ssize_t) strlen(r->unit);
		if ((size_t) n + 1 > size)
			n = -ENOBUFS;
		else
			memcpy(unit, r->unit, (size_t) n + 1);
	}
	pthread_mutex_unlock(&w->lock);
	return n;
}

static const char *const *walk_units;
static size_t walk_n_units;
static uint64_t *walk_ids;
static size_t walk_n_ids, walk_max_ids;

/* A watched directory that is one of walk_units' own: its path names that unit, and its
 * parent's does not (the unit's subgroups are found by the probes below it). */
static void collect_unit_dir(const void *node, VISIT which, int depth) {
	const Watch *x = *(Watch *const *) node;
	char unit[256], parent_unit[256], parent[PATH_MAX];
	const char *slash;
	ssize_t n;

	if ((which != postorder && which != leaf) || x->id == 0 || walk_n_ids >= walk_max_ids)
		return;
	n = unit_from_cgroup_path(x->path, unit, sizeof(unit));
	if (n <= 0)
		return;
	for (size_t i = 0; i < walk_n_units; i++) {
		if (!streq(walk_units[i], unit))
			continue;
		slash = strrchr(x->path, '/');
		if (!slash || (size_t) (slash - x->path) >= sizeof(parent))
			return;
		memcpy(parent, x->path, (size_t) (slash - x->path));
		parent[slash - x->path] = 0;
		if (unit_from_cgroup_path(parent, parent_unit, sizeof(parent_unit)) > 0 &&
		    streq(parent_unit, unit))
			return;
		walk_ids[walk_n_ids++] = x->id;
		return;
	}
}

size_t cgroup_watch_unit_dirs(
	CgroupWatch *w, const char *const *units, size_t n_units, uint64_t *ids, size_t max) {
	size_t n;

	if (!w || n_units == 0 || max == 0)
		return 0;
	pthread_mutex_lock(&w->lock);
	read_events(w);
	walk_units = units;
	walk_n_units = n_units;
	walk_ids = ids;
	walk_n_ids = 0;
	walk_max_ids = max;
	twalk(w->by_id, collect_unit_dir);
	n = walk_n_ids;
	walk_units = NULL;
	walk_ids = NULL;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void cgroup_watch_get_stats(CgroupWatch *w, CgroupWatchStats *ret) {
	if (!w) {
		*ret = (CgroupWatchStats){};
		return;
	}
	pthread_mutex_lock(&w->lock);
	*ret = w->stats;
	ret->watched = w->n_watches;
	ret->kept = w->system.n + w->users.n;
	pthread_mutex_unlock(&w->lock);
}
