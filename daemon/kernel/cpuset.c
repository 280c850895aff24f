/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU sets: a fixed-size bitmap with parsing and formatting of kernel CPU lists ("0-3,8"). */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernel/cpuset.h"
#include "macro.h"

#define CPUSET_WORDS ELEMENTSOF(((CpuSet *) NULL)->bits)

void cpuset_clear(CpuSet *s) {
	memset(s, 0, sizeof(*s));
}

int cpuset_add(CpuSet *s, unsigned cpu) {
	if (cpu >= PERFRELAY_MAX_CPUS)
		return -ERANGE;
	s->bits[cpu / 64] |= UINT64_C(1) << (cpu % 64);
	return 0;
}

void cpuset_remove(CpuSet *s, unsigned cpu) {
	if (cpu < PERFRELAY_MAX_CPUS)
		s->bits[cpu / 64] &= ~(UINT64_C(1) << (cpu % 64));
}

bool cpuset_contains(const CpuSet *s, unsigned cpu) {
	if (cpu >= PERFRELAY_MAX_CPUS)
		return false;
	return s->bits[cpu / 64] & (UINT64_C(1) << (cpu % 64));
}

unsigned cpuset_count(const CpuSet *s) {
	unsigned n = 0;

	for (size_t i = 0; i < CPUSET_WORDS; i++)
		n += (unsigned) __builtin_popcountll(s->bits[i]);
	return n;
}

bool cpuset_is_empty(const CpuSet *s) {
	for (size_t i = 0; i < CPUSET_WORDS; i++)
		if (s->bits[i])
			return false;
	return true;
}

bool cpuset_intersects(const CpuSet *a, const CpuSet *b) {
	for (size_t i = 0; i < CPUSET_WORDS; i++)
		if (a->bits[i] & b->bits[i])
			return true;
	return false;
}

int cpuset_next(const CpuSet *s, unsigned from) {
	if (from >= PERFRELAY_MAX_CPUS)
		return -1;

	size_t i = from / 64;
	/* Mask off the bits below `from` in its word, then scan whole words. */
	uint64_t w = s->bits[i] & (~UINT64_C(0) << (from % 64));
	for (;;) {
		if (w)
			return (int) (i * 64 + (unsigned) __builtin_ctzll(w));
		if (++i >= CPUSET_WORDS)
			return -1;
		w = s->bits[i];
	}
}

static bool is_space(char c) {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Parses a decimal CPU number at *p (digits only: no sign, no hex), advancing *p. */
static int parse_cpu_number(const char **p, const char *end, unsigned *ret) {
	const char *q = *p;
	unsigned v = 0;

	if (q >= end || *q < '0' || *q > '9')
		return -EINVAL;
	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		/* Saturate instead of overflowing; anything this large is out of range anyway. */
		if (v < PERFRELAY_MAX_CPUS)
			v = v * 10 + (unsigned) (*q - '0');
	}
	if (v >= PERFRELAY_MAX_CPUS)
		return -ERANGE;
	*p = q;
	*ret = v;
	return 0;
}

int cpuset_parse(const char *s, CpuSet *ret) {
	CpuSet set;
	const char *p, *end;
	int r;

	if (!s || !ret)
		return -EINVAL;

	cpuset_clear(&set);

	p = s;
	end = s + strlen(s);
	while (p < end && is_space(*p))
		p++;
	while (end > p && is_space(end[-1]))
		end--;

	while (p < end) {
		unsigned a, b;

		r = parse_cpu_number(&p, end, &a);
		if (r < 0)
			return r;
		b = a;
		if (p < end && *p == '-') {
			p++;
			r = parse_cpu_number(&p, end, &b);
			if (r < 0)
				return r;
			if (b < a)
				return -EINVAL;
		}
		for (unsigned c = a; c <= b; c++)
			(void) cpuset_add(&set, c);

		if (p == end)
			break;
		/* Anything but a comma followed by another element is a syntax error, which also
		 * rejects a trailing comma. */
		if (*p != ',' || p + 1 == end)
			return -EINVAL;
		p++;
	}

	*ret = set;
	return 0;
}

int cpuset_format(const CpuSet *s, char *buf, size_t size) {
	size_t len = 0;

	if (!buf || size == 0)
		return -ENOBUFS;

	buf[0] = 0;
	for (int c = cpuset_next(s, 0); c >= 0;) {
		int last = c, next;
		int n;

		while ((next = cpuset_next(s, (unsigned) last + 1)) == last + 1)
			last = next;

		if (last == c)
			n = snprintf(buf + len, size - len, "%s%d", len > 0 ? "," : "", c);
		else
			n = snprintf(buf + len, size - len, "%s%d-%d", len > 0 ? "," : "", c, last);
		if (n < 0 || (size_t) n >= size - len) {
			buf[0] = 0;
			return -ENOBUFS;
		}
		len += (size_t) n;
		c = next;
	}
	return 0;
}
