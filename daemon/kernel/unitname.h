/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* systemd unit names as perfrelay attributes events to them: which names are valid filter
 * values, and which unit owns a cgroup path (systemd's cg_path_get_unit() rule). Pure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* systemd's UNIT_NAME_MAX: a name and its NUL. */
#define UNIT_NAME_MAX 256u

/* True if s (len bytes) is a unit name an event can be attributed to: systemd's characters,
 * at most UNIT_NAME_MAX - 1 bytes, and a unit type other than .slice (slices contain units
 * but own no processes of their own in systemd's cgroup layout). */
bool unit_name_is_attributable(const char *s, size_t len);
/* Whether s (len bytes) ends in the suffix of such a unit type after a non-empty prefix,
 * whatever its characters: how perfrelayctl --ancestor and perfrelay-export's Ancestors= tell a
 * unit from a task name (the daemon then checks the whole name). */
bool unit_name_has_attributable_suffix(const char *s, size_t len);

/* The unit owning a cgroup path relative to the cgroup2 root ("/system.slice/sshd.service/x"):
 * leading slice components are skipped and the next component, unescaped, must be an
 * attributable unit name. Writes it NUL-terminated to buf and returns its length; returns 0
 * if the path belongs to no unit (the root, a slice, a cgroup not made by systemd), or
 * -ENOBUFS if size is too small. */
ssize_t unit_from_cgroup_path(const char *path, char *buf, size_t size);

/* The user a cgroup path belongs to: the UID of the first user-UID.slice or user@UID.service
 * component (a user's sessions and manager), or (uid_t) -1 for the system's. Pure. */
uid_t cgroup_path_owner(const char *path);
