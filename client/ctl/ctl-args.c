/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What every perfrelayctl verb uses (ctl.h): the program name in error messages, and the
 * parsers of spans, numbers and users in options. */
#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"

const char *program = "perfrelayctl";

int error_errno(int r, const char *fmt, ...) {
	va_list ap;

	fprintf(stderr, "%s: ", program);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (r < 0)
		fprintf(stderr, ": %s", strerror(-r));
	fputc('\n', stderr);
	return r < 0 ? r : -EINVAL;
}

int parse_span(const char *s, int64_t *ret_ns) {
	char *end;
	long long n;
	int64_t unit;

	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno || end == s || n < 0)
		return -EINVAL;
	switch (*end) {
	case 's':
		unit = 1;
		break;
	case 'm':
		unit = 60;
		break;
	case 'h':
		unit = 3600;
		break;
	case 'd':
		unit = 86400;
		break;
	default:
		return -EINVAL;
	}
	if (end[1] || n > INT64_MAX / 1000000000 / unit)
		return -EINVAL;
	*ret_ns = (int64_t) n * unit * 1000000000;
	return 0;
}

int parse_u32(const char *s, uint32_t *ret) {
	unsigned long v;
	char *end;

	if (!s[0] || s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > UINT32_MAX)
		return -ERANGE;
	*ret = (uint32_t) v;
	return 0;
}

/* A numeric UID or a user name. */
int parse_uid(const char *s, uint32_t *ret) {
	struct passwd pw, *found = NULL;
	char buf[4096];

	if (parse_u32(s, ret) == 0)
		return 0;
	if (getpwnam_r(s, &pw, buf, sizeof(buf), &found) != 0 || !found)
		return -ESRCH;
	*ret = found->pw_uid;
	return 0;
}
