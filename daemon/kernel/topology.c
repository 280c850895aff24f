/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU topology from sysfs: which CPUs exist and how to group them for reader threads. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "kernel/topology.h"

/* A CPU list for PERFRELAY_MAX_CPUS CPUs written as "0,2,4,..." is under 20 KiB; sysfs
 * attribute files are at most one page anyway. */
#define SYSFS_FILE_MAX (64u * 1024u)

/* Real caches have levels 1 to 4; anything far above is garbage, not a bigger cache. */
#define CACHE_LEVEL_MAX 64u

/* Reads a small sysfs attribute into a NUL-terminated malloc'd string. */
static int read_attribute(const char *path, char **ret) {
	_cleanup_close_ int fd = -EBADF;
	_cleanup_free_ char *buf = NULL;
	size_t size = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return negative_errno();
	buf = malloc(SYSFS_FILE_MAX + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (size >= SYSFS_FILE_MAX)
			return -EFBIG;
		n = read(fd, buf + size, SYSFS_FILE_MAX - size);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return negative_errno();
		}
		if (n == 0)
			break;
		size += (size_t) n;
	}
	buf[size] = 0;
	if (strlen(buf) != size)
		return -EINVAL; /* an embedded NUL: not a text attribute */
	*ret = TAKE_PTR(buf);
	return 0;
}

_printf_(2, 3) static int read_attributef(char **ret, const char *fmt, ...) {
	_cleanup_free_ char *path = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&path, fmt, ap);
	va_end(ap);
	if (r < 0) {
		path = NULL; /* undefined after a failed vasprintf() */
		return -ENOMEM;
	}
	return read_attribute(path, ret);
}

static int read_cpu_list(const char *sysfs_root, const char *name, CpuSet *ret) {
	_cleanup_free_ char *text = NULL;
	int r;

	r = read_attributef(&text, "%s/devices/system/cpu/%s", sysfs_root, name);
	if (r < 0)
		return r;
	return cpuset_parse(text, ret);
}

int topology_online_cpus(const char *sysfs_root, CpuSet *ret) {
	CpuSet set;
	int r;

	if (!sysfs_root || !ret)
		return -EINVAL;
	r = read_cpu_list(sysfs_root, "online", &set);
	if (r < 0)
		return r;
	if (cpuset_is_empty(&set))
		return -ENODATA;
	*ret = set;
	return 0;
}

int topology_possible_cpu_count(const char *sysfs_root, unsigned *ret) {
	CpuSet set;
	int last = -1;
	int r;

	if (!sysfs_root || !ret)
		return -EINVAL;
	r = read_cpu_list(sysfs_root, "possible", &set);
	if (r < 0)
		return r;
	FOREACH_CPU(c, &set)
		last = c;
	if (last < 0)
		return -ENODATA;
	*ret = (unsigned) last + 1;
	return 0;
}

/* Parses a whole attribute as an unsigned decimal number (a trailing newline allowed). */
static int parse_unsigned_attribute(const char *text, unsigned *ret) {
	char *end;
	unsigned long v;

	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno != 0 || v > UINT32_MAX)
		return -ERANGE;
	if (*end == '\n')
		end++;
	if (*end)
		return -EINVAL;
	*ret = (unsigned) v;
	return 0;
}

/* The CPUs sharing cpu's highest-level data or unified cache: records are data, so an
 * instruction cache never decides a group. -ENOENT if sysfs describes no such cache. */
static int cpu_llc_set(const char *sysfs_root, unsigned cpu, CpuSet *ret) {
	_cleanup_free_ char *dir = NULL;
	DIR *d;
	struct dirent *de;
	CpuSet best;
	int best_level = -1;
	int r = 0;

	cpuset_clear(&best);
	if (asprintf(&dir, "%s/devices/system/cpu/cpu%u/cache", sysfs_root, cpu) < 0) {
		dir = NULL;
		return -ENOMEM;
	}
	d = opendir(dir);
	if (!d)
		return negative_errno();

	while ((errno = 0, de = readdir(d))) {
		_cleanup_free_ char *type = NULL, *level_text = NULL, *list = NULL;
		unsigned index, level;
		CpuSet set;
		int n = 0;

		if (sscanf(de->d_name, "index%u%n", &index, &n) != 1 || de->d_name[n] != 0)
			continue;

		r = read_attributef(&type, "%s/%s/type", dir, de->d_name);
		if (r == -ENOMEM)
			break;
		if (r < 0 ||
		    !(streq(type, "Data\n") || streq(type, "Unified\n") || streq(type, "Data") ||
		      streq(type, "Unified"))) {
			r = 0;
			continue;
		}
		r = read_attributef(&level_text, "%s/%s/level", dir, de->d_name);
		if (r == -ENOMEM)
			break;
		if (r < 0 || parse_unsigned_attribute(level_text, &level) < 0 || level > CACHE_LEVEL_MAX) {
			r = 0;
			continue;
		}
		if ((int) level <= best_level)
			continue;
		r = read_attributef(&list, "%s/%s/shared_cpu_list", dir, de->d_name);
		if (r == -ENOMEM)
			break;
		if (r < 0 || cpuset_parse(list, &set) < 0) {
			r = 0;
			continue;
		}
		best = set;
		best_level = (int) level;
	}
	if (r == 0 && errno != 0)
		r = negative_errno();
	closedir(d);
	if (r < 0)
		return r;
	if (best_level < 0)
		return -ENOENT;
	*ret = best;
	return 0;
}

static int cpu_package_set(const char *sysfs_root, unsigned cpu, CpuSet *ret) {
	/* package_cpus_list is the current name (Linux 5.5+); core_siblings_list the old one. */
	static const char *const names[] = { "package_cpus_list", "core_siblings_list" };
	int r = -ENOENT;

	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		_cleanup_free_ char *text = NULL;

		r = read_attributef(
			&text, "%s/devices/system/cpu/cpu%u/topology/%s", sysfs_root, cpu, names[i]);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			continue;
		r = cpuset_parse(text, ret);
		if (r >= 0)
			return 0;
	}
	return r;
}

typedef int (*CpuSharingFunc)(const char *sysfs_root, unsigned cpu, CpuSet *ret);

/* Partitions cpus by what each CPU shares according to fn. Each CPU in ascending order that
 * is not yet in a group starts one with the CPUs it shares, restricted to cpus and to CPUs
 * not yet grouped: so the result is a partition even if sysfs is inconsistent. Fails if fn
 * fails for any CPU, so that one kind of grouping applies to all CPUs. */
static int group_by(const char *sysfs_root, const CpuSet *cpus, CpuSharingFunc fn, CpuSet **ret_groups) {
	_cleanup_free_ CpuSet *groups = NULL;
	CpuSet assigned;
	size_t n = 0;
	int r;

	groups = calloc(cpuset_count(cpus), sizeof(CpuSet));
	if (!groups)
		return -ENOMEM;
	cpuset_clear(&assigned);

	FOREACH_CPU(c, cpus) {
		CpuSet shared, *g;

		if (cpuset_contains(&assigned, (unsigned) c))
			continue;
		if (fn) {
			r = fn(sysfs_root, (unsigned) c, &shared);
			if (r < 0)
				return r;
		} else
			cpuset_clear(&shared);

		g = &groups[n++];
		cpuset_clear(g);
		(void) cpuset_add(g, (unsigned) c);
		for (size_t i = 0; i < ELEMENTSOF(shared.bits); i++) {
			g->bits[i] |= shared.bits[i] & cpus->bits[i] & ~assigned.bits[i];
			assigned.bits[i] |= g->bits[i];
		}
	}

	*ret_groups = TAKE_PTR(groups);
	return (int) n;
}

int topology_llc_groups(const char *sysfs_root, const CpuSet *cpus, CpuSet **ret_groups) {
	int r;

	if (!sysfs_root || !cpus || !ret_groups || cpuset_is_empty(cpus))
		return -EINVAL;

	/* Grouping only tunes performance: a sysfs that lacks or garbles cache or package
	 * information is a reason to fall back, never to fail. Only running out of memory is. */
	r = group_by(sysfs_root, cpus, cpu_llc_set, ret_groups);
	if (r >= 0 || r == -ENOMEM)
		return r;
	r = group_by(sysfs_root, cpus, cpu_package_set, ret_groups);
	if (r >= 0 || r == -ENOMEM)
		return r;
	return group_by(sysfs_root, cpus, NULL, ret_groups);
}

int topology_chunk_groups(const CpuSet *cpus, unsigned n, CpuSet **ret_groups) {
	CpuSet *groups;
	unsigned count, n_groups, i = 0;

	if (!cpus || !ret_groups || n == 0)
		return -EINVAL;
	count = cpuset_count(cpus);
	if (count == 0)
		return -EINVAL;

	n_groups = (count + n - 1) / n;
	groups = calloc(n_groups, sizeof(CpuSet));
	if (!groups)
		return -ENOMEM;
	for (int c = cpuset_next(cpus, 0); c >= 0; c = cpuset_next(cpus, (unsigned) c + 1), i++)
		(void) cpuset_add(&groups[i / n], (unsigned) c);

	*ret_groups = groups;
	return (int) n_groups;
}
