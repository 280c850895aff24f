/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The names of the built-in probes, as Probes= and the D-Bus interface spell them. */
#include <errno.h>

#include "kernel/probes.h"
#include "string-table.h"

/* clang-format off */
static const char *const probe_table[_PROBE_MAX] = {
	[PROBE_EXEC] = "exec",
	[PROBE_EXIT] = "exit",
	[PROBE_FORK] = "fork",
	[PROBE_OPEN] = "open",
	[PROBE_CONNECT] = "connect",
};
/* clang-format on */

DEFINE_STRING_TABLE_LOOKUP(probe, unsigned);
