/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The assertion every unit test uses: report file:line:function and keep going, so one run
 * lists every failure; main() exits non-zero when `failures` is not 0. */
#pragma once

#include <stdio.h>

static int failures;

#define ASSERT(cond)                                                                                               \
	do {                                                                                                       \
		if (!(cond)) {                                                                                     \
			fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
			failures++;                                                                                \
		}                                                                                                  \
	} while (0)
