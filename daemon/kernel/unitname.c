/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit name validation and the cgroup path → unit rule, following systemd's unit-name.c and
 * cgroup-util.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "macro.h"
#include "kernel/unitname.h"

/* Every unit type except "slice", which systemd's cg_path_get_unit() never returns. */
static const char *const attributable_suffixes[] = {
	".service",   ".socket", ".target", ".device", ".mount",
	".automount", ".swap",   ".timer",  ".path",   ".scope",
};

static bool unit_char_ok(char c) {
	/* systemd's VALID_CHARS plus '@' for template instances. */
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ':' ||
		c == '-' || c == '_' || c == '.' || c == '\\' || c == '@';
}

static bool has_suffix(const char *s, size_t len, const char *suffix) {
	size_t n = strlen(suffix);

	/* The prefix must not be empty: ".service" alone is no unit. */
	return len > n && memcmp(s + len - n, suffix, n) == 0;
}

bool unit_name_is_attributable(const char *s, size_t len) {
	if (len == 0 || len >= UNIT_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!unit_char_ok(s[i]))
			return false;
	/* An instance needs a template prefix: "@x.service" is not valid in systemd either. */
	if (s[0] == '@')
		return false;
	return unit_name_has_attributable_suffix(s, len);
}

bool unit_name_has_attributable_suffix(const char *s, size_t len) {
	for (size_t i = 0; i < ELEMENTSOF(attributable_suffixes); i++)
		if (has_suffix(s, len, attributable_suffixes[i]))
			return true;
	return false;
}

static bool is_slice(const char *s, size_t len) {
	if (!has_suffix(s, len, ".slice") || len >= UNIT_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!unit_char_ok(s[i]))
			return false;
	return true;
}

ssize_t unit_from_cgroup_path(const char *path, char *buf, size_t size) {
	const char *p = path;

	for (;;) {
		size_t n;

		p += strspn(p, "/");
		n = strcspn(p, "/");
		if (n == 0)
			return 0; /* the root, or only slices */
		if (is_slice(p, n)) {
			p += n;
			continue;
		}
		/* systemd prefixes names that could clash with cgroupfs' own files with '_'
		 * (cg_escape()); cg_unescape() strips it. */
		if (p[0] == '_') {
			p++;
			n--;
		}
		if (!unit_name_is_attributable(p, n))
			return 0;
		if (n + 1 > size)
			return -ENOBUFS;
		memcpy(buf, p, n);
		buf[n] = '\0';
		return (ssize_t) n;
	}
}

uid_t cgroup_path_owner(const char *path) {
	const char *p = path;

	for (;;) {
		char name[64];
		unsigned long uid;
		size_t n;
		int used = 0;

		p += strspn(p, "/");
		n = strcspn(p, "/");
		if (n == 0)
			return (uid_t) -1;
		if (n < sizeof(name)) {
			memcpy(name, p, n);
			name[n] = '\0';
			/* systemd's names for a user's slice and manager: user-UID.slice, user@UID.service. */
			if ((sscanf(name, "user-%lu.slice%n", &uid, &used) == 1 ||
			     sscanf(name, "user@%lu.service%n", &uid, &used) == 1) &&
			    (size_t) used == n && name[5] >= '0' && name[5] <= '9' && uid < (uid_t) -1)
				return (uid_t) uid;
		}
		p += n;
	}
}
