/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test of capture-set.c with a fake capture and a fake grace period: a run of the capture's
 * program that began before the detach goes on counting until the grace period is over, and
 * the final figures a stopped capture keeps are those after it (issue 24: read too early, they
 * missed the packets of that run, which still reached the file). */
#include <stdio.h>
#include <stdlib.h>

#include "features/capture/capture-set.h"
#include "kernel/grace.h"

#include "unit-test.h"

struct Capture {
	bool detached;
	bool in_flight; /* a run that began before the detach, still counting */
	CaptureStats stats;
};

static unsigned grace_periods;

/* The fake kernel: at the end of a grace period every run in flight has ended, one packet
 * later. */
static Capture *the_capture;

int grace_period(const char **ret_method) {
	grace_periods++;
	if (the_capture && the_capture->in_flight) {
		the_capture->stats.seen++;
		the_capture->stats.captured++;
		the_capture->in_flight = false;
	}
	if (ret_method)
		*ret_method = "fake";
	return 0;
}

void capture_detach(Capture *c) {
	c->detached = true;
}

Capture *capture_free(Capture *c) {
	if (c == the_capture)
		the_capture = NULL;
	free(c);
	return NULL;
}

int capture_get_stats(const Capture *c, CaptureStats *ret) {
	*ret = c->stats;
	return 0;
}

int main(void) {
	Captures *l;
	Capture *c = calloc(1, sizeof(*c));
	CaptureSummary info = { .id = 7 }, got;

	ASSERT(c && captures_new(4, &l) == 0);
	if (!c)
		return EXIT_FAILURE;
	*c = (Capture){ .in_flight = true, .stats = { .seen = 10, .captured = 9, .rate_dropped = 1 } };
	the_capture = c;
	ASSERT(captures_add(l, c, &info) == 0);
	ASSERT(captures_stop(l, 7) == 0);
	ASSERT(grace_periods == 1);
	ASSERT(captures_get(l, 7, &got) == 0);
	ASSERT(!got.active);
	/* The run in flight counted its packet before the figures were taken. */
	ASSERT(got.stats.seen == 11 && got.stats.captured == 10 && got.stats.rate_dropped == 1);
	ASSERT(got.stats.seen == got.stats.captured + got.stats.rate_dropped + got.stats.failed);
	captures_free(l);
	if (failures)
		return EXIT_FAILURE;
	printf("test-capture-set: all passed\n");
	return EXIT_SUCCESS;
}
