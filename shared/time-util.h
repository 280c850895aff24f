/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Time units and clock reads, one definition for the daemon, the clients and the tests. */
#pragma once

#include <stdint.h>
#include <time.h>

typedef uint64_t usec_t;

#define NSEC_PER_SEC  1000000000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_USEC 1000ULL
#define USEC_PER_SEC  1000000ULL
#define USEC_PER_MSEC 1000ULL
#define MSEC_PER_SEC  1000ULL

static inline uint64_t timespec_nsec(const struct timespec *ts) {
	return (uint64_t) ts->tv_sec * NSEC_PER_SEC + (uint64_t) ts->tv_nsec;
}

/* The clock's time now; clock_gettime() cannot fail for the clocks perfrelay uses. */
static inline uint64_t now_nsec(clockid_t clock) {
	struct timespec ts;

	clock_gettime(clock, &ts);
	return timespec_nsec(&ts);
}

static inline usec_t now_usec(clockid_t clock) {
	return now_nsec(clock) / NSEC_PER_USEC;
}

static inline uint64_t now_msec(clockid_t clock) {
	return now_nsec(clock) / NSEC_PER_MSEC;
}
