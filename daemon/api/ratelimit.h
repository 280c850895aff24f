/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A token bucket by windows: at most `burst` takes in each window of `interval`, a new window
 * starting with the first use after the last one ended (like systemd's RateLimit). Pure: the
 * caller passes the time, so the unit test drives it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct RateLimit {
	uint64_t interval; /* window length, in the caller's time unit */
	uint64_t begin;    /* start of the current window; 0: none yet */
	uint64_t left;     /* takes left in it */
} RateLimit;

/* True if no window is running at `now` (none began, or the last one is over). */
bool ratelimit_window_over(const RateLimit *rl, uint64_t now);
/* Starts a window at `now` with `burst` takes. */
void ratelimit_start(RateLimit *rl, uint64_t now, uint64_t burst);
/* Takes one from the current window; false when none is left. */
bool ratelimit_take(RateLimit *rl);
/* When the current window ends (begin + interval), or 0 if none began. */
uint64_t ratelimit_end(const RateLimit *rl);
