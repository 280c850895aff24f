/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What perfrelay's own programs add to libperfrelay's API: its cleanup function, and how
 * perfrelayctl monitor --ancestor and perfrelay-export's Ancestors= read a process. Not
 * installed. */
#pragma once

#include <string.h>

#include "macro.h"
#include "perfrelay.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(perfrelay_client *, perfrelay_close);

/* Puts `who` in the subscription's ancestor list it names: an exec id (16 lower-case hex
 * digits, as events carry them), a unit (a name with a unit type's suffix; the daemon checks
 * the rest) or else a task name. The three lists must have room for one more. */
static inline void perfrelay_add_ancestor(
	struct perfrelay_subscription *sub,
	const char **comms,
	const char **exec_ids,
	const char **units,
	const char *who) {
	static const char *const suffixes[] = { ".service", ".scope",  ".socket", ".mount",     ".swap",
						".target",  ".device", ".timer",  ".automount", ".path" };
	size_t n = strlen(who);

	if (n == 16 && strspn(who, "0123456789abcdef") == 16) {
		exec_ids[sub->n_ancestor_exec_ids++] = who;
		return;
	}
	for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
		size_t k = strlen(suffixes[i]);

		if (n > k && memcmp(who + n - k, suffixes[i], k) == 0) {
			units[sub->n_ancestor_units++] = who;
			return;
		}
	}
	comms[sub->n_ancestor_comms++] = who;
}
