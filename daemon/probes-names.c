/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The names of the built-in probes, as Probes= and the D-Bus interface spell them. */
#include <errno.h>

#include "macro.h"
#include "probes.h"

/* clang-format off */
static const char *const probe_names[_PROBE_MAX] = {
	[PROBE_EXEC] = "exec",
	[PROBE_EXIT] = "exit",
	[PROBE_FORK] = "fork",
	[PROBE_OPEN] = "open",
	[PROBE_CONNECT] = "connect",
};
/* clang-format on */

const char *probe_to_string(unsigned probe) {
	if (probe >= _PROBE_MAX)
		return NULL;
	return probe_names[probe];
}

int probe_from_string(const char *s) {
	if (!s)
		return -EINVAL;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (streq(s, probe_names[i]))
			return (int) i;
	return -EINVAL;
}
