/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test of the settle (ledger.c) with counter pairs read half-updated: an emitter that
 * counts a failed attempt increments failures, then attempts, and a settle may read between
 * the two (docs/pipeline.md, "Settling"). Such a read must never turn into crash_lost that
 * nothing lost, and one whole read among the settle's must make it exact. And the end of a
 * downtime (ledger_end_downtime()) with an emitter failing at every step of it: no failure
 * of the serving daemon may hide among the downtime's. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel/ledger.h"
#include "macro.h"

#include "unit-test.h"

typedef struct perfrelay_counters Pair;

/* Producer 7's emitter, failing at every step of the end of a downtime: before the read,
 * between the read and the clear, and after the clear. */
typedef struct Emitter {
	bool idle;
	uint64_t failures;
	uint64_t failures_serving; /* made after the clear, with idle 0 */
	unsigned reads, clears;
} Emitter;

static void emitter_fail(Emitter *e) {
	e->failures++;
	if (!e->idle)
		e->failures_serving++;
}

static int emitter_read(void *userdata, uint32_t producer, uint64_t *ret) {
	Emitter *e = userdata;

	if (producer == 3)
		return -EIO; /* keeps its entry */
	if (producer != 7) {
		*ret = 0;
		return 0;
	}
	e->reads++;
	*ret = e->failures;
	emitter_fail(e);
	return 0;
}

static int emitter_clear(void *userdata) {
	Emitter *e = userdata;

	e->clears++;
	e->idle = false;
	emitter_fail(e);
	return 0;
}

static void test_end_downtime(void) {
	static const LedgerDowntimeOps ops = { .read_failures = emitter_read, .clear_idle = emitter_clear };
	Emitter e = { .idle = true, .failures = 40 };
	uint64_t at_start[PERFRELAY_MAX_PRODUCERS] = { [3] = 5 };
	uint64_t downtime;

	ASSERT(ledger_end_downtime(&ops, &e, at_start) == 0);
	ASSERT(e.reads == 1 && e.clears == 1 && !e.idle);
	emitter_fail(&e);
	/* 40 failed before the read, 1 between the read and the clear (idle still set), 2 after
	 * the clear: both of those are the serving daemon's, and the one of the downtime in the
	 * window counts as serving too (the split errs that way only). */
	ASSERT(e.failures == 43 && e.failures_serving == 2);
	ASSERT(at_start[7] == 40);
	downtime = MIN(at_start[7], e.failures); /* as stats.c splits them */
	ASSERT(e.failures - downtime >= e.failures_serving);
	ASSERT(at_start[3] == 5 && at_start[0] == 0);
}

static uint64_t settle(struct perfrelay_received *e, const Pair *reads, size_t n) {
	return ledger_settle_entry(e, ledger_accepted(reads, n));
}

int main(void) {
	/* 90 records received of 100 attempts and 10 failures: nothing lost. Every read caught
	 * an emitter between its two increments (failures 11, attempts still 100). */
	struct perfrelay_received e = { .received = 90 };
	Pair torn[LEDGER_SETTLE_READS] = { { 100, 11 }, { 100, 11 }, { 100, 11 }, { 100, 11 } };

	ASSERT(ledger_accepted(torn, LEDGER_SETTLE_READS) == 89);
	ASSERT(settle(&e, torn, LEDGER_SETTLE_READS) == 0 && e.crash_lost == 0);

	/* The same with emitters going on between the reads: still nothing. */
	Pair moving[LEDGER_SETTLE_READS] = { { 100, 11 }, { 101, 11 }, { 101, 12 }, { 102, 12 } };
	ASSERT(ledger_accepted(moving, LEDGER_SETTLE_READS) == 90);
	ASSERT(settle(&e, moving, LEDGER_SETTLE_READS) == 0 && e.crash_lost == 0);

	/* A dead daemon's rings took 5 that nobody read: 95 accepted, 90 seen. One read was torn
	 * (94), the next whole: exactly 5, and a second settle adds nothing. */
	struct perfrelay_received dead = { .received = 88, .malformed = 2 };
	Pair crash[LEDGER_SETTLE_READS] = { { 100, 6 }, { 101, 6 }, { 101, 7 }, { 102, 7 } };
	ASSERT(settle(&dead, crash, LEDGER_SETTLE_READS) == 5 && dead.crash_lost == 5);
	ASSERT(settle(&dead, crash, LEDGER_SETTLE_READS) == 0 && dead.crash_lost == 5);

	/* Records of an id whose counters never saw them (attempts below failures, or below
	 * what was received): nothing to settle, never a negative loss. */
	struct perfrelay_received forged = { .received = 50 };
	Pair odd[2] = { { 3, 7 }, { 10, 2 } };
	ASSERT(ledger_accepted(odd, 1) == 0);
	ASSERT(settle(&forged, odd, 2) == 0 && forged.crash_lost == 0);

	test_end_downtime();

	if (failures)
		return EXIT_FAILURE;
	printf("test-ledger: all passed\n");
	return EXIT_SUCCESS;
}
