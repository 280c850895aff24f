/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The assertions every unit test uses: report file:line and keep going, so one run lists every
 * failure; main() exits non-zero when `failures` is not 0. CHECK adds a printf-style message
 * (the case that failed). */
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

#define CHECK(expr, ...)                                                                             \
	do {                                                                                         \
		if (!(expr)) {                                                                       \
			fprintf(stderr, "%s:%d: assertion failed: %s: ", __FILE__, __LINE__, #expr); \
			fprintf(stderr, __VA_ARGS__);                                                \
			fputc('\n', stderr);                                                         \
			failures++;                                                                  \
		}                                                                                    \
	} while (0)
