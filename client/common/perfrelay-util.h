/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What perfrelay's own programs add to libperfrelay's API: its cleanup function, and how
 * perfrelayctl monitor --ancestor and perfrelay-export's Ancestors= read a process. Not
 * installed. */
#pragma once

#include <string.h>

#include "macro.h"
#include "lib/perfrelay.h"
#include "kernel/unitname.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(perfrelay_client *, perfrelay_close);

/* Puts `who` in the subscription's ancestor list it names: an exec id (16 lower-case hex
 * digits, as events carry them), a unit (a name with a unit type's suffix, unitname.h; the
 * daemon checks the rest) or else a task name. The three lists must have room for one more. */
static inline void perfrelay_add_ancestor(
	struct perfrelay_subscription *sub,
	const char **comms,
	const char **exec_ids,
	const char **units,
	const char *who) {
	size_t n = strlen(who);

	if (n == 16 && strspn(who, "0123456789abcdef") == 16)
		exec_ids[sub->n_ancestor_exec_ids++] = who;
	else if (unit_name_has_attributable_suffix(who, n))
		units[sub->n_ancestor_units++] = who;
	else
		comms[sub->n_ancestor_comms++] = who;
}
