/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The token bucket of BusEventsPerSecond=: burst per window, windows restart on use. */
#include <stdio.h>
#include <stdlib.h>

#include "api/ratelimit.h"

#include "unit-test.h"

int main(void) {
	RateLimit rl = { .interval = 1000 };
	unsigned taken = 0;

	ASSERT(ratelimit_window_over(&rl, 5)); /* none began */
	ASSERT(ratelimit_end(&rl) == 0);
	ratelimit_start(&rl, 5, 3);
	ASSERT(!ratelimit_window_over(&rl, 5) && !ratelimit_window_over(&rl, 1004));
	ASSERT(ratelimit_window_over(&rl, 1005)); /* [5, 1005) */
	ASSERT(ratelimit_end(&rl) == 1005);
	for (unsigned i = 0; i < 10; i++)
		taken += ratelimit_take(&rl);
	ASSERT(taken == 3);
	ASSERT(!ratelimit_take(&rl));
	/* A later window starts where it is used, not where the last one would have. */
	ratelimit_start(&rl, 5000, 1);
	ASSERT(ratelimit_take(&rl) && !ratelimit_take(&rl));
	ASSERT(ratelimit_end(&rl) == 6000);
	/* A zero burst takes nothing. */
	ratelimit_start(&rl, 7000, 0);
	ASSERT(!ratelimit_take(&rl));

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return EXIT_FAILURE;
	}
	printf("test-ratelimit: all passed\n");
	return EXIT_SUCCESS;
}
