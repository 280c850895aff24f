/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for topology.c against fake sysfs trees: CPU lists, LLC groups and fallbacks. */

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"
#include "kernel/topology.h"


#include "unit-test.h"

static char root[] = "/tmp/test-topology-XXXXXX";
static char tree[512]; /* the current fake sysfs root, below root */

/* Creates every directory of path, like mkdir -p. */
static void mkdir_p(const char *path) {
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			(void) mkdir(buf, 0755);
			*p = '/';
		}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "mkdir %s: %m\n", buf);
		exit(1);
	}
}

/* Writes content to <tree>/devices/system/cpu/<relative path>, creating directories. */
_printf_(2, 3) static void put(const char *content, const char *fmt, ...) {
	char rel[256], path[1024];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	snprintf(path, sizeof(path), "%s/devices/system/cpu/%s", tree, rel);
	*strrchr(path, '/') = 0;
	mkdir_p(path);
	path[strlen(path)] = '/';
	f = fopen(path, "we");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %m\n", path);
		exit(1);
	}
}

static void new_tree(const char *name) {
	snprintf(tree, sizeof(tree), "%s/%s", root, name);
	mkdir_p(tree);
}

static void put_cache(unsigned cpu, unsigned index, const char *type, unsigned level, const char *shared) {
	char level_text[16];

	snprintf(level_text, sizeof(level_text), "%u\n", level);
	put(type, "cpu%u/cache/index%u/type", cpu, index);
	put(level_text, "cpu%u/cache/index%u/level", cpu, index);
	put(shared, "cpu%u/cache/index%u/shared_cpu_list", cpu, index);
}

static CpuSet set_of(const char *list) {
	CpuSet s;

	if (cpuset_parse(list, &s) < 0) {
		fprintf(stderr, "bad list in test: %s\n", list);
		exit(1);
	}
	return s;
}

/* Checks that groups are exactly the space-separated CPU lists in want, in order. */
static void check_groups_at(const char *file, int line, int n, const CpuSet *groups, const char *want) {
	_cleanup_free_ char *copy = strdup(want);
	char *save = NULL, got[256] = "";
	int i = 0;
	bool ok = n > 0;

	for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save), i++) {
		CpuSet s = set_of(w);
		if (i >= n || memcmp(&s, &groups[i], sizeof(s)) != 0)
			ok = false;
	}
	if (i != n)
		ok = false;
	if (!ok) {
		for (int j = 0; j < n; j++) {
			char buf[64];
			if (cpuset_format(&groups[j], buf, sizeof(buf)) < 0)
				strcpy(buf, "?");
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", j ? " " : "", buf);
		}
		fprintf(stderr, "%s:%d: got %d groups \"%s\", want \"%s\"\n", file, line, n, got, want);
		failures++;
	}
}
#define check_groups(n, groups, want) check_groups_at(__FILE__, __LINE__, n, groups, want)

/* 4 CPUs, two L3 caches: 0-1 and 2-3. Instruction caches are present at every level and one
 * claims (wrongly, at a higher level) to span all CPUs: it must not decide anything. */
static void make_llc_tree(void) {
	new_tree("llc");
	put("0-3\n", "online");
	put("0-7\n", "possible");
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		char self[8];

		snprintf(self, sizeof(self), "%u\n", cpu);
		put_cache(cpu, 0, "Data\n", 1, self);
		put_cache(cpu, 1, "Instruction\n", 1, self);
		put_cache(cpu, 2, "Unified\n", 2, self);
		put_cache(cpu, 3, "Unified\n", 3, cpu < 2 ? "0-1\n" : "2-3\n");
		put_cache(cpu, 4, "Instruction\n", 4, "0-3\n");
		/* The package fallback would give one group: seeing two proves caches won. */
		put("0-3\n", "cpu%u/topology/package_cpus_list", cpu);
	}
	/* Not a cache index: ignored. */
	put("x\n", "cpu0/cache/uevent");
}

static void test_llc(void) {
	_cleanup_free_ CpuSet *groups = NULL;
	CpuSet online, subset;
	unsigned possible = 0;
	int n;

	make_llc_tree();

	ASSERT(topology_online_cpus(tree, &online) == 0);
	ASSERT(cpuset_count(&online) == 4 && cpuset_contains(&online, 3));
	ASSERT(topology_possible_cpu_count(tree, &possible) == 0);
	ASSERT(possible == 8);

	n = topology_llc_groups(tree, &online, &groups);
	ASSERT(n == 2);
	check_groups(n, groups, "0-1 2-3");

	/* Only the CPUs asked for end up in groups. */
	free(groups);
	groups = NULL;
	subset = set_of("0,2-3");
	n = topology_llc_groups(tree, &subset, &groups);
	check_groups(n, groups, "0 2-3");

	free(groups);
	groups = NULL;
	subset = set_of("3");
	n = topology_llc_groups(tree, &subset, &groups);
	check_groups(n, groups, "3");
}

/* Inconsistent sysfs (sharing that is not symmetric) still yields a partition: a CPU already
 * grouped is never put in a second group. */
static void test_llc_inconsistent(void) {
	_cleanup_free_ CpuSet *groups = NULL;
	CpuSet cpus = set_of("0-3");
	int n;

	new_tree("inconsistent");
	put_cache(0, 0, "Unified\n", 3, "0-1\n");
	put_cache(1, 0, "Unified\n", 3, "1-2\n");
	put_cache(2, 0, "Unified\n", 3, "1-3\n");
	put_cache(3, 0, "Unified\n", 3, "3\n");

	n = topology_llc_groups(tree, &cpus, &groups);
	check_groups(n, groups, "0-1 2-3");
}

static void test_package_fallback(void) {
	_cleanup_free_ CpuSet *groups = NULL;
	CpuSet cpus = set_of("0-3");
	int n;

	/* No cache directories at all: one group per package. */
	new_tree("package");
	for (unsigned cpu = 0; cpu < 4; cpu++)
		put(cpu < 2 ? "0-1\n" : "2-3\n", "cpu%u/topology/package_cpus_list", cpu);
	n = topology_llc_groups(tree, &cpus, &groups);
	ASSERT(n == 2);
	check_groups(n, groups, "0-1 2-3");

	/* Older kernels only have core_siblings_list. */
	free(groups);
	groups = NULL;
	new_tree("core-siblings");
	for (unsigned cpu = 0; cpu < 4; cpu++)
		put("0-3\n", "cpu%u/topology/core_siblings_list", cpu);
	n = topology_llc_groups(tree, &cpus, &groups);
	check_groups(n, groups, "0-3");

	/* Cache directories holding only instruction caches are no cache information. */
	free(groups);
	groups = NULL;
	new_tree("icache-only");
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		put_cache(cpu, 0, "Instruction\n", 1, "0-3\n");
		put(cpu % 2 ? "1,3\n" : "0,2\n", "cpu%u/topology/package_cpus_list", cpu);
	}
	n = topology_llc_groups(tree, &cpus, &groups);
	check_groups(n, groups, "0,2 1,3");

	/* CPU 2 without cache information: the whole grouping falls back, not just that CPU, so
	 * that one kind of grouping applies to every CPU. */
	free(groups);
	groups = NULL;
	new_tree("partial");
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		if (cpu != 2)
			put_cache(cpu, 0, "Unified\n", 3, cpu < 2 ? "0-1\n" : "2-3\n");
		put("0-3\n", "cpu%u/topology/package_cpus_list", cpu);
	}
	n = topology_llc_groups(tree, &cpus, &groups);
	check_groups(n, groups, "0-3");
}

static void test_per_cpu_fallback(void) {
	_cleanup_free_ CpuSet *groups = NULL;
	CpuSet cpus = set_of("0-2,5");
	int n;

	new_tree("empty");
	n = topology_llc_groups(tree, &cpus, &groups);
	ASSERT(n == 4);
	check_groups(n, groups, "0 1 2 5");

	/* Garbage in sysfs is no reason to fail either. */
	free(groups);
	groups = NULL;
	new_tree("garbage");
	for (unsigned cpu = 0; cpu < 6; cpu++) {
		put_cache(cpu, 0, "Unified\n", 3, "zero-three\n");
		put("what\n", "cpu%u/topology/package_cpus_list", cpu);
	}
	n = topology_llc_groups(tree, &cpus, &groups);
	check_groups(n, groups, "0 1 2 5");

	/* Nothing to group is an error. */
	CpuSet none;
	cpuset_clear(&none);
	CpuSet *untouched = (CpuSet *) &none;
	ASSERT(topology_llc_groups(tree, &none, &untouched) == -EINVAL);
	ASSERT(untouched == &none);
}

static void test_cpu_lists(void) {
	CpuSet online;
	unsigned possible = 12345;

	new_tree("lists");
	/* Missing files are errors the caller can report. */
	ASSERT(topology_online_cpus(tree, &online) == -ENOENT);
	ASSERT(topology_possible_cpu_count(tree, &possible) == -ENOENT);
	ASSERT(possible == 12345);

	put("0,2-3,64\n", "online");
	put("0-127\n", "possible");
	ASSERT(topology_online_cpus(tree, &online) == 0);
	ASSERT(cpuset_count(&online) == 4 && cpuset_contains(&online, 64) && !cpuset_contains(&online, 1));
	ASSERT(topology_possible_cpu_count(tree, &possible) == 0 && possible == 128);

	put("0\n", "possible");
	ASSERT(topology_possible_cpu_count(tree, &possible) == 0 && possible == 1);

	put("0-3,x\n", "online");
	ASSERT(topology_online_cpus(tree, &online) == -EINVAL);
	ASSERT(cpuset_count(&online) == 4); /* untouched on failure */
	put("\n", "online");
	ASSERT(topology_online_cpus(tree, &online) < 0);
	put("0-9999\n", "possible");
	ASSERT(topology_possible_cpu_count(tree, &possible) == -ERANGE);
	ASSERT(possible == 1);
}

static void test_chunks(void) {
	_cleanup_free_ CpuSet *groups = NULL;
	CpuSet cpus = set_of("0-6,10");
	int n;

	n = topology_chunk_groups(&cpus, 3, &groups);
	ASSERT(n == 3);
	check_groups(n, groups, "0-2 3-5 6,10");

	free(groups);
	groups = NULL;
	n = topology_chunk_groups(&cpus, 1, &groups);
	check_groups(n, groups, "0 1 2 3 4 5 6 10");

	free(groups);
	groups = NULL;
	n = topology_chunk_groups(&cpus, 8, &groups);
	check_groups(n, groups, "0-6,10");

	free(groups);
	groups = NULL;
	n = topology_chunk_groups(&cpus, 100, &groups);
	check_groups(n, groups, "0-6,10");

	free(groups);
	groups = NULL;
	n = topology_chunk_groups(&cpus, 4, &groups);
	check_groups(n, groups, "0-3 4-6,10");

	CpuSet none;
	cpuset_clear(&none);
	CpuSet *untouched = &none;
	ASSERT(topology_chunk_groups(&cpus, 0, &untouched) == -EINVAL);
	ASSERT(topology_chunk_groups(&none, 2, &untouched) == -EINVAL);
	ASSERT(untouched == &none);
}

static int remove_entry(
	const char *path, _unused_ const struct stat *st, _unused_ int flag, _unused_ struct FTW *ftw) {
	return remove(path);
}

int main(void) {
	if (!mkdtemp(root)) {
		fprintf(stderr, "mkdtemp: %m\n");
		return 1;
	}

	test_llc();
	test_llc_inconsistent();
	test_package_fallback();
	test_per_cpu_fallback();
	test_cpu_lists();
	test_chunks();

	nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);

	if (failures) {
		fprintf(stderr, "%d assertion(s) failed\n", failures);
		return 1;
	}
	return 0;
}
