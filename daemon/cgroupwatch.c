/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Remembers the units of cgroups as they are created (cgroupwatch.h). mkdir(2) on cgroup2 goes
 * through vfs_mkdir(), which reports IN_CREATE|IN_ISDIR to a watch on the parent; systemd makes
 * a unit's cgroup before it moves the unit's first process in, so the cgroup is normally looked
 * at (stat: its inode is the cgroup id) while it exists, and remembered after it is removed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroupwatch.h"
#include "unitname.h"

#define WATCH_MASK (IN_CREATE | IN_ONLYDIR | IN_DONT_FOLLOW)

typedef struct Watch {
	int wd;
	char *path; /* relative to the root: "" or "/system.slice/..." */
} Watch;

typedef struct Remembered {
	uint64_t id;
	uint64_t seq; /* the order cgroups were seen in, across both rings */
	char *unit;
} Remembered;

/* The cgroups of one kind of owner, oldest overwritten first. */
typedef struct RememberRing {
	Remembered entries[CGROUP_WATCH_REMEMBER];
	size_t next;
} RememberRing;

struct CgroupWatch {
	int fd;
	char *root;
	sd_event_source *source;
	Watch *watches;
	size_t n_watches;
	/* Directories root made (systemd's units) apart from those users made in subtrees
	 * delegated to them: a user who makes thousands of cgroups pushes out only users' cgroups,
	 * never the unit of a service that failed an hour ago. */
	RememberRing system, users;
	uint64_t seq;
	CgroupWatchStats stats;
};

static void remember(CgroupWatch *w, const char *rel) {
	char full[PATH_MAX], unit[256];
	struct stat st;
	RememberRing *ring;
	Remembered *r;
	ssize_t n;

	if (snprintf(full, sizeof(full), "%s%s", w->root, rel) >= (int) sizeof(full))
		return;
	if (stat(full, &st) < 0) {
		w->stats.missed++;
		return;
	}
	n = unit_from_cgroup_path(rel, unit, sizeof(unit));
	if (n <= 0)
		return;
	ring = st.st_uid == 0 ? &w->system : &w->users;
	r = &ring->entries[ring->next];
	if (r->unit) {
		if (ring == &w->system)
			w->stats.evicted++;
		else
			w->stats.evicted_users++;
	}
	free(r->unit);
	r->unit = strdup(unit);
	r->id = r->unit ? (uint64_t) st.st_ino : 0;
	r->seq = ++w->seq;
	ring->next = (ring->next + 1) % CGROUP_WATCH_REMEMBER;
	w->stats.remembered++;
}

/* Watches the directory rel and every directory below it, remembering each. */
static void watch_tree(CgroupWatch *w, const char *rel, unsigned depth) {
	char full[PATH_MAX];
	Watch *grown;
	DIR *d;
	int wd;

	if (depth > 32 || snprintf(full, sizeof(full), "%s%s", w->root, rel) >= (int) sizeof(full))
		return;
	if (w->n_watches >= CGROUP_WATCH_MAX_WATCHES) {
		w->stats.unwatched++;
		return;
	}
	/* Watch first, then list: a directory made in between is seen by one or the other. */
	wd = inotify_add_watch(w->fd, full, WATCH_MASK);
	if (wd < 0) {
		w->stats.missed++;
		return;
	}
	grown = reallocarray(w->watches, w->n_watches + 1, sizeof(Watch));
	if (!grown)
		return;
	w->watches = grown;
	w->watches[w->n_watches] = (Watch){ .wd = wd, .path = strdup(rel) };
	if (!w->watches[w->n_watches].path)
		return;
	w->n_watches++;
	remember(w, rel);

	d = opendir(full);
	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		char sub[PATH_MAX];

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name) < (int) sizeof(sub))
			watch_tree(w, sub, depth + 1);
	}
	closedir(d);
}

static void forget_watch(CgroupWatch *w, int wd) {
	for (size_t i = 0; i < w->n_watches; i++)
		if (w->watches[i].wd == wd) {
			free(w->watches[i].path);
			w->watches[i] = w->watches[--w->n_watches];
			return;
		}
}

static const char *watch_path(const CgroupWatch *w, int wd) {
	for (size_t i = 0; i < w->n_watches; i++)
		if (w->watches[i].wd == wd)
			return w->watches[i].path;
	return NULL;
}

static void read_events(CgroupWatch *w) {
	_Alignas(struct inotify_event) char buf[16384];
	ssize_t n;

	while ((n = read(w->fd, buf, sizeof(buf))) > 0)
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *e = (const struct inotify_event *) p;
			const char *parent;
			char rel[PATH_MAX];

			p += sizeof(*e) + e->len;
			if (e->mask & IN_IGNORED) {
				forget_watch(w, e->wd);
				continue;
			}
			if (e->mask & IN_Q_OVERFLOW) {
				w->stats.missed++;
				continue;
			}
			if (!(e->mask & IN_CREATE) || !(e->mask & IN_ISDIR) || e->len == 0)
				continue;
			parent = watch_path(w, e->wd);
			if (parent && snprintf(rel, sizeof(rel), "%s/%s", parent, e->name) < (int) sizeof(rel))
				watch_tree(w, rel, 0);
		}
}

static int on_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	read_events(userdata);
	return 0;
}

int cgroup_watch_new(sd_event *event, const char *root, CgroupWatch **ret) {
	_cleanup_(cgroup_watch_freep) CgroupWatch *w = calloc(1, sizeof(CgroupWatch));
	int r;

	if (!w)
		return -ENOMEM;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0)
		return -errno;
	w->root = strdup(root);
	if (!w->root)
		return -ENOMEM;
	watch_tree(w, "", 0);
	r = sd_event_add_io(event, &w->source, w->fd, EPOLLIN, on_inotify, w);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(w);
	return 0;
}

CgroupWatch *cgroup_watch_free(CgroupWatch *w) {
	if (!w)
		return NULL;
	sd_event_source_disable_unref(w->source);
	safe_close(w->fd);
	for (size_t i = 0; i < w->n_watches; i++)
		free(w->watches[i].path);
	free(w->watches);
	for (size_t i = 0; i < CGROUP_WATCH_REMEMBER; i++) {
		free(w->system.entries[i].unit);
		free(w->users.entries[i].unit);
	}
	free(w->root);
	free(w);
	return NULL;
}

static const Remembered *ring_find(const RememberRing *ring, uint64_t id) {
	for (size_t k = 0; k < CGROUP_WATCH_REMEMBER; k++) {
		const Remembered *r =
			&ring->entries[(ring->next + CGROUP_WATCH_REMEMBER - 1 - k) % CGROUP_WATCH_REMEMBER];

		if (r->id == id)
			return r;
	}
	return NULL;
}

const char *cgroup_watch_lookup(CgroupWatch *w, uint64_t id) {
	if (!w || id == 0)
		return NULL;
	read_events(w);
	/* The newest: an inode number reused by a later cgroup names the later one. */
	const Remembered *a = ring_find(&w->system, id), *b = ring_find(&w->users, id);
	if (a && b)
		return a->seq > b->seq ? a->unit : b->unit;
	return a ? a->unit : b ? b->unit : NULL;
}

void cgroup_watch_get_stats(const CgroupWatch *w, CgroupWatchStats *ret) {
	*ret = w ? w->stats : (CgroupWatchStats){};
}
