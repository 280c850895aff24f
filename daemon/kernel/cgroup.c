/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cgroup id → systemd unit: the cgroup2 mount, and the readers' caches in front of the cgroup
 * watch's index (cgroupwatch.h). */
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernel/cgroup.h"
#include "macro.h"
#include "base/stat.h"
#include "kernel/unitname.h"

/* A cgroup id that failed to resolve for a reason that may pass (no fd left, no memory) is
 * tried again after this many lookups rather than on every event. */
#define CGROUP_RETRY_LOOKUPS 4096u
/* Entries probed from an id's home slot before one is evicted. */
#define CGROUP_PROBE         8u

struct CgroupFs {
	char *path;
};

/* Mount points in mountinfo escape space, tab, newline and backslash as \ooo. */
static char *unescape_mountinfo(const char *s, size_t n) {
	char *r = malloc(n + 1), *p = r;

	if (!r)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
		    s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
			*p++ = (char) ((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
			i += 3;
		} else
			*p++ = s[i];
	}
	*p = '\0';
	return r;
}

int cgroup2_mount_from_mountinfo(const char *text, char **ret) {
	const char *line = text;

	while (line && *line) {
		const char *end = strchr(line, '\n'), *f[5], *sep;
		size_t len = end ? (size_t) (end - line) : strlen(line);
		char buf[4096];
		size_t n = 0;

		/* Fields: id parent maj:min root mount-point options [optional...] - fstype ... */
		if (len < sizeof(buf)) {
			memcpy(buf, line, len);
			buf[len] = '\0';
			sep = strstr(buf, " - ");
			if (sep && strncmp(sep + 3, "cgroup2 ", 8) == 0) {
				const char *p = buf;

				for (n = 0; n < 5 && p < sep; n++) {
					f[n] = p;
					p = strchr(p, ' ');
					if (!p)
						break;
					p++;
				}
				/* Only a mount of the hierarchy's root shows every cgroup's path. */
				if (n == 5 && strncmp(f[3], "/ ", 2) == 0) {
					size_t mlen = strcspn(f[4], " ");
					char *m = unescape_mountinfo(f[4], mlen);

					if (!m)
						return -ENOMEM;
					*ret = m;
					return 0;
				}
			}
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

int cgroup_fs_open(const char *mountinfo_path, CgroupFs **ret) {
	_cleanup_free_ char *text = NULL, *path = NULL;
	size_t size = 0, n = 0;
	FILE *f;
	int r;

	f = fopen(mountinfo_path, "re");
	if (!f)
		return negative_errno();
	/* /proc files report no size: read to EOF. */
	for (;;) {
		size_t k;

		if (n + 4096 + 1 > size) {
			char *t = realloc(text, size = size ? size * 2 : 16384);
			if (!t) {
				fclose(f);
				return -ENOMEM;
			}
			text = t;
		}
		k = fread(text + n, 1, size - n - 1, f);
		n += k;
		if (k == 0)
			break;
	}
	r = ferror(f) ? -EIO : 0;
	fclose(f);
	if (r < 0)
		return r;
	text[n] = '\0';

	r = cgroup2_mount_from_mountinfo(text, &path);
	if (r < 0)
		return r;
	CgroupFs *fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->path = TAKE_PTR(path);
	*ret = fs;
	return 0;
}

CgroupFs *cgroup_fs_free(CgroupFs *fs) {
	if (!fs)
		return NULL;
	free(fs->path);
	free(fs);
	return NULL;
}

const char *cgroup_fs_path(const CgroupFs *fs) {
	return fs->path;
}

/* The cache ------------------------------------------------------------------------------ */

typedef struct CgroupEntry {
	uint64_t id;          /* 0: free slot */
	char *unit;           /* NULL: no unit */
	Container *container; /* a reference; NULL: none */
	uint32_t retry;       /* lookups left before a failed resolution is tried again; 0: final */
} CgroupEntry;

struct CgroupCache {
	CgroupEntry *entries;
	uint64_t mask;
	CgroupResolveFn resolve;
	void *userdata;
	ContainerTable *containers;
	unsigned victim; /* round-robin eviction within the probe window */
	CgroupCacheStats stats;
};

int cgroup_cache_new(unsigned n_entries, CgroupResolveFn fn, void *userdata, CgroupCache **ret) {
	_cleanup_(cgroup_cache_freep) CgroupCache *c = NULL;
	uint64_t n = CGROUP_PROBE;

	while (n < n_entries)
		n *= 2;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->entries = calloc(n, sizeof(CgroupEntry));
	if (!c->entries)
		return -ENOMEM;
	c->mask = n - 1;
	c->resolve = fn;
	c->userdata = userdata;
	*ret = TAKE_PTR(c);
	return 0;
}

CgroupCache *cgroup_cache_free(CgroupCache *c) {
	if (!c)
		return NULL;
	for (uint64_t i = 0; c->entries && i <= c->mask; i++) {
		free(c->entries[i].unit);
		container_unref(c->entries[i].container);
	}
	free(c->entries);
	free(c);
	return NULL;
}

static inline uint64_t hash_id(uint64_t id) {
	/* Cgroup ids are mostly consecutive inode numbers: mix them (splitmix64's finalizer). */
	id ^= id >> 30;
	id *= UINT64_C(0xbf58476d1ce4e5b9);
	id ^= id >> 27;
	id *= UINT64_C(0x94d049bb133111eb);
	return id ^ (id >> 31);
}

static bool error_is_transient(ssize_t r) {
	return r == -EMFILE || r == -ENFILE || r == -ENOMEM || r == -EINTR || r == -EAGAIN;
}

void cgroup_cache_set_containers(CgroupCache *c, ContainerTable *t) {
	c->containers = t;
}

bool cgroup_cache_any_containers(const CgroupCache *c) {
	return container_table_any(c->containers);
}

static void cache_fill(CgroupCache *c, CgroupEntry *e, uint64_t id) {
	char unit[UNIT_NAME_MAX];
	ContainerRef ref = { .runtime = CONTAINER_NONE };
	ssize_t r;

	STAT_ADD(c->stats.misses, 1);
	free(e->unit);
	container_unref(e->container);
	*e = (CgroupEntry){ .id = id };
	r = c->resolve(c->userdata, id, unit, sizeof(unit), c->containers ? &ref : NULL);
	if (r >= 0 && ref.runtime != CONTAINER_NONE)
		e->container = container_table_get(c->containers, &ref); /* NULL: the table is full */
	if (r > 0)
		e->unit = strndup(unit, (size_t) r); /* NULL on ENOMEM: no unit, tried again later */
	if (r < 0)
		STAT_ADD(c->stats.failures, 1);
	if ((r > 0 && !e->unit) || error_is_transient(r))
		e->retry = CGROUP_RETRY_LOOKUPS;
}

const char *cgroup_cache_lookup(CgroupCache *c, uint64_t id) {
	return cgroup_cache_resolve(c, id, NULL);
}

const char *cgroup_cache_resolve(CgroupCache *c, uint64_t id, const Container **ret_container) {
	const Container *dummy;
	uint64_t home;
	CgroupEntry *e;

	if (!ret_container)
		ret_container = &dummy;
	*ret_container = NULL;
	if (id == 0)
		return NULL;
	home = hash_id(id);
	for (unsigned i = 0; i < CGROUP_PROBE; i++) {
		e = &c->entries[(home + i) & c->mask];
		if (e->id == id) {
			if (_unlikely_(e->retry > 0) && --e->retry == 0)
				cache_fill(c, e, id);
			else
				STAT_ADD(c->stats.hits, 1);
			*ret_container = e->container;
			return e->unit;
		}
		if (e->id == 0) {
			cache_fill(c, e, id);
			*ret_container = e->container;
			return e->unit;
		}
	}
	/* Slots are never emptied, so a lookup may stop at the first free one; when the window
	 * is full, replace one of its entries in turn. */
	e = &c->entries[(home + (c->victim++ % CGROUP_PROBE)) & c->mask];
	STAT_ADD(c->stats.evictions, 1);
	cache_fill(c, e, id);
	*ret_container = e->container;
	return e->unit;
}

void cgroup_cache_get_stats(const CgroupCache *c, CgroupCacheStats *ret) {
	*ret = (CgroupCacheStats){
		.hits = STAT_LOAD(c->stats.hits),
		.misses = STAT_LOAD(c->stats.misses),
		.failures = STAT_LOAD(c->stats.failures),
		.evictions = STAT_LOAD(c->stats.evictions),
	};
}
