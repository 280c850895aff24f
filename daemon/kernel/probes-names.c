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

uint16_t probe_type(unsigned probe) {
	static const uint16_t types[_PROBE_MAX] = {
		[PROBE_EXEC] = PERFRELAY_TYPE_EXEC,       [PROBE_EXIT] = PERFRELAY_TYPE_EXIT,
		[PROBE_FORK] = PERFRELAY_TYPE_FORK,       [PROBE_OPEN] = PERFRELAY_TYPE_OPEN,
		[PROBE_CONNECT] = PERFRELAY_TYPE_CONNECT,
	};

	return probe < _PROBE_MAX ? types[probe] : 0;
}

uint64_t probes_type_mask(uint32_t probes) {
	uint64_t mask = 0;

	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes & (1u << i))
			mask |= UINT64_C(1) << probe_type(i);
	return mask;
}
