/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A token bucket by windows (see ratelimit.h). */
#include "api/ratelimit.h"

bool ratelimit_window_over(const RateLimit *rl, uint64_t now) {
	return rl->begin == 0 || now >= rl->begin + rl->interval;
}

void ratelimit_start(RateLimit *rl, uint64_t now, uint64_t burst) {
	rl->begin = now;
	rl->left = burst;
}

bool ratelimit_take(RateLimit *rl) {
	if (rl->left == 0)
		return false;
	rl->left--;
	return true;
}

uint64_t ratelimit_end(const RateLimit *rl) {
	return rl->begin == 0 ? 0 : rl->begin + rl->interval;
}
