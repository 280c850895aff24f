/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The subscription request of libperfrelay (request-line.c); internal to the library. */
#pragma once

#include <stddef.h>

#include "lib/perfrelay.h"

/* -EINVAL for a subscription with an unknown format or overflow policy, or reserved fields set. */
int request_line_check(const struct perfrelay_subscription *sub);
/* The request line, '\n' included, in a string the caller frees. json-c does the escaping.
 * `containers` (perfrelay_client_set_containers()) go in as "container". */
int request_line_build(
	const struct perfrelay_subscription *sub,
	const char *const *containers,
	size_t n_containers,
	char **ret,
	size_t *ret_len);
