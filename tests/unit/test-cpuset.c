/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for cpuset.c: parsing, formatting and set operations on kernel CPU lists. */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernel/cpuset.h"


#include "unit-test.h"

/* Parses s and formats it back into buf. */
static int roundtrip(const char *s, char *buf, size_t size) {
	CpuSet set;
	int r;

	r = cpuset_parse(s, &set);
	if (r < 0)
		return r;
	return cpuset_format(&set, buf, size);
}

static void test_parse_format(void) {
	static const struct {
		const char *in, *out;
	} good[] = {
		{ "", "" },           { "\n", "" },           { "0", "0" },
		{ "0\n", "0" },       { "  0-3  \n", "0-3" }, { "0-3,8,10-11", "0-3,8,10-11" },
		{ "3,2,1,0", "0-3" }, { "0-1,1-2", "0-2" },   { "5-5", "5" },
		{ "0,2,4", "0,2,4" }, { "63-64", "63-64" },   { "007", "7" },
		{ "4095", "4095" },   { "0-4095", "0-4095" },
	};
	static const char *const bad[] = {
		"a",   "-1",  "1-",   "-",     ",",   "0,", ",0",  "0,,1",
		"3-1", "0 1", "0, 1", "1-2-3", "0x1", "+1", "1.5",
	};
	char buf[64];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int r = roundtrip(good[i].in, buf, sizeof(buf));
		ASSERT(r == 0);
		if (r == 0 && strcmp(buf, good[i].out) != 0) {
			fprintf(stderr,
				"%s:%d: \"%s\" formatted as \"%s\", want \"%s\"\n",
				__FILE__,
				__LINE__,
				good[i].in,
				buf,
				good[i].out);
			failures++;
		}
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = roundtrip(bad[i], buf, sizeof(buf));
		if (r != -EINVAL) {
			fprintf(stderr, "%s:%d: \"%s\" gave %d, want -EINVAL\n", __FILE__, __LINE__, bad[i], r);
			failures++;
		}
	}

	ASSERT(roundtrip("4096", buf, sizeof(buf)) == -ERANGE);
	ASSERT(roundtrip("0-4096", buf, sizeof(buf)) == -ERANGE);
	ASSERT(roundtrip("99999999999999999999999", buf, sizeof(buf)) == -ERANGE);
	ASSERT(cpuset_parse(NULL, &(CpuSet){}) == -EINVAL);
}

static void test_parse_leaves_ret_on_failure(void) {
	CpuSet set;

	ASSERT(cpuset_parse("1,2", &set) == 0);
	ASSERT(cpuset_parse("5,x", &set) == -EINVAL);
	ASSERT(cpuset_count(&set) == 2);
	ASSERT(cpuset_contains(&set, 1) && cpuset_contains(&set, 2) && !cpuset_contains(&set, 5));
}

static void test_format_bounds(void) {
	CpuSet set;
	char buf[8];

	ASSERT(cpuset_parse("0-3,8", &set) == 0);
	/* "0-3,8" needs 6 bytes with the NUL. */
	ASSERT(cpuset_format(&set, buf, 5) == -ENOBUFS);
	ASSERT(cpuset_format(&set, buf, 4) == -ENOBUFS);
	ASSERT(cpuset_format(&set, buf, 0) == -ENOBUFS);
	ASSERT(cpuset_format(&set, buf, 6) == 0 && strcmp(buf, "0-3,8") == 0);

	cpuset_clear(&set);
	ASSERT(cpuset_format(&set, buf, 1) == 0 && buf[0] == 0);

	/* Every other CPU up to the maximum: the longest list there is. */
	static char big[32768];
	cpuset_clear(&set);
	for (unsigned c = 0; c < PERFRELAY_MAX_CPUS; c += 2)
		ASSERT(cpuset_add(&set, c) == 0);
	ASSERT(cpuset_format(&set, big, sizeof(big)) == 0);
	CpuSet back;
	ASSERT(cpuset_parse(big, &back) == 0);
	ASSERT(memcmp(&set, &back, sizeof(set)) == 0);
	ASSERT(cpuset_count(&back) == PERFRELAY_MAX_CPUS / 2);
}

static void test_ops(void) {
	CpuSet a, b;

	cpuset_clear(&a);
	ASSERT(cpuset_is_empty(&a));
	ASSERT(cpuset_count(&a) == 0);
	ASSERT(cpuset_next(&a, 0) == -1);

	ASSERT(cpuset_add(&a, 0) == 0);
	ASSERT(cpuset_add(&a, 63) == 0);
	ASSERT(cpuset_add(&a, 64) == 0);
	ASSERT(cpuset_add(&a, PERFRELAY_MAX_CPUS - 1) == 0);
	ASSERT(cpuset_add(&a, PERFRELAY_MAX_CPUS) == -ERANGE);
	ASSERT(!cpuset_contains(&a, PERFRELAY_MAX_CPUS));
	ASSERT(!cpuset_is_empty(&a));
	ASSERT(cpuset_count(&a) == 4);
	ASSERT(cpuset_contains(&a, 63) && cpuset_contains(&a, 64) && !cpuset_contains(&a, 1));

	ASSERT(cpuset_next(&a, 0) == 0);
	ASSERT(cpuset_next(&a, 1) == 63);
	ASSERT(cpuset_next(&a, 64) == 64);
	ASSERT(cpuset_next(&a, 65) == (int) PERFRELAY_MAX_CPUS - 1);
	ASSERT(cpuset_next(&a, PERFRELAY_MAX_CPUS) == -1);
	ASSERT(cpuset_next(&a, 100000) == -1);

	unsigned n = 0;
	FOREACH_CPU(c, &a)
		n++;
	ASSERT(n == 4);

	ASSERT(cpuset_parse("1-62", &b) == 0);
	ASSERT(!cpuset_intersects(&a, &b));
	ASSERT(cpuset_add(&b, 64) == 0);
	ASSERT(cpuset_intersects(&a, &b));
	ASSERT(cpuset_intersects(&b, &a));

	cpuset_remove(&b, 64);
	ASSERT(!cpuset_contains(&b, 64));
	ASSERT(cpuset_contains(&b, 1) && cpuset_contains(&b, 62));
	cpuset_remove(&b, 64);                 /* absent: no-op */
	cpuset_remove(&b, PERFRELAY_MAX_CPUS); /* out of range: no-op */
	ASSERT(cpuset_count(&b) == 62);
}

int main(void) {
	test_parse_format();
	test_parse_leaves_ret_on_failure();
	test_format_bounds();
	test_ops();

	if (failures) {
		fprintf(stderr, "%d assertion(s) failed\n", failures);
		return 1;
	}
	return 0;
}
