/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pinned "received" map (struct perfrelay_received per producer and possible CPU),
 * mmapped: what every daemon's readers took from the rings, kept across daemons so that a
 * daemon starting after a crash can count what the dead one's rings took with them; and the
 * split of the producers' failures between a downtime and the daemon that ends it. */
#pragma once

#include <stdint.h>

#include "event.h"

typedef struct Ledger Ledger;

/* Maps the array behind map_fd, PERFRELAY_MAX_PRODUCERS * n_cpus entries. */
int ledger_open(int map_fd, unsigned n_cpus, Ledger **ret);
Ledger *ledger_free(Ledger *l);

/* The entry of (producer, cpu), producer < PERFRELAY_MAX_PRODUCERS, cpu < n_cpus. Each is
 * written by the one reader thread that owns the CPU's ring (relaxed atomic stores, once per
 * batch) and read by the main thread with STAT_LOAD. */
struct perfrelay_received *ledger_entry(Ledger *l, uint32_t producer, unsigned cpu);
unsigned ledger_n_cpus(const Ledger *l);

/* Crash accounting, while nothing can write into a ring (slots cleared, a grace period
 * waited out) and before new rings are installed: for every (producer, CPU) the records the
 * producer's pinned counters say the kernel accepted (attempts - failures) and no reader ever
 * read (received + malformed) nor was counted lost before (crash_lost) were in the rings of a
 * daemon that died; they are added to crash_lost. ret_lost[producer] (PERFRELAY_MAX_PRODUCERS
 * entries) gets what was added now. Returns the total added, or a negative errno. */
int64_t ledger_settle(Ledger *l, int counters_fd, uint64_t *ret_lost);

/* Reads of the counters a settle makes; the largest accepted count of them is taken. */
#define LEDGER_SETTLE_READS 4u
/* What the kernel accepted of one (producer, CPU), from n reads of its counters taken while
 * every emitter fails (docs/pipeline.md, "Settling"): a read made between an emitter's two
 * increments under-states it by one, so the largest is exact as soon as one read was not.
 * Reads with fewer attempts than failures (a producer that writes without perfrelay_emit())
 * count as 0. Pure. */
uint64_t ledger_accepted(const struct perfrelay_counters *reads, size_t n);
/* Adds to e's crash_lost what `accepted` says the rings took that no reader read; returns it. */
uint64_t ledger_settle_entry(struct perfrelay_received *e, uint64_t accepted);

/* The end of a downtime, once a daemon's rings are in the array and its readers run
 * (docs/pipeline.md, "Downtime is cheap"): read_failures() gives one producer's failures summed
 * over the CPUs, clear_idle() clears the pinned idle flag. */
typedef struct LedgerDowntimeOps {
	int (*read_failures)(void *userdata, uint32_t producer, uint64_t *ret);
	int (*clear_idle)(void *userdata);
} LedgerDowntimeOps;

/* Takes every producer's failures into failures_at_start[] (PERFRELAY_MAX_PRODUCERS entries)
 * and only then clears idle. In that order all that was taken failed while idle was set, so
 * every failure from the clear on (an emitter's still on the idle path included) counts as the
 * serving daemon's, failures_serving = failures - failures_at_start, and none hides among the
 * downtime's. The split errs one way only: a failure between the read and the clear belongs
 * to the downtime and counts as serving. A producer whose failures cannot be read keeps its
 * entry. Returns what clear_idle() returns. */
int ledger_end_downtime(const LedgerDowntimeOps *ops, void *userdata, uint64_t *failures_at_start);

/* A ledger made now beside counters that already count (the pin root of a version without
 * it, or a removed "received" pin): what the counters say the kernel accepted is taken as
 * received by the daemons before, and the sequence-gap detector starts after the last
 * attempt, so that old history is neither crash loss nor gaps. Returns the records adopted. */
int64_t ledger_adopt(Ledger *l, int counters_fd);

/* Zeroes the ledger: its counters were made now, so the old figures match nothing. */
void ledger_reset(Ledger *l);
