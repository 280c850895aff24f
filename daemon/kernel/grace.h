/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Waiting out the BPF programs that may be running right now: once the array's slots are
 * cleared, an RCU grace period later no emitter can still write into the old rings. */
#pragma once

/* Blocks for one RCU grace period. Returns 0 and sets *ret_method (if given) to a static
 * name of the way it waited, or a negative errno when no way worked. */
int grace_period(const char **ret_method);
