/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A reader thread: owns the rings of one CPU group, pinned to those CPUs, waits on them with
 * epoll, drains them in batches, decodes every record and hands events to the hub. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "kernel/cgroup.h"
#include "kernel/cgroupwatch.h"
#include "kernel/cpuset.h"
#include "macro.h"
#include "hub/hub.h"
#include "kernel/ledger.h"
#include "kernel/ring.h"
#include "core/reader-stats.h"
#include "decode/decoders.h"

typedef struct Reader Reader;

/* Cgroup ids -> units cached per reader thread. */
#define READER_UNIT_CACHE_ENTRIES         1024u
/* Ancestors' cgroups: few (an "ancestor" filter by unit looks them up). */
#define READER_LINEAGE_UNIT_CACHE_ENTRIES 64u
/* While records trickle into a ring (at a pace at which the kernel would not wake the reader,
 * by watermark or wakeup count, within READER_BUSY_FLUSH_MS, but of at least
 * READER_BUSY_MIN_RECORDS per READER_BUSY_FLUSH_MS), the reader looks at its rings again after
 * READER_BUSY_FLUSH_MS instead of waiting for that wakeup or for the idle FlushIntervalMs=: at
 * such rates a quarter ring takes long to fill (6 ms at 128k records/s with the default 64
 * pages), and its records would wait that long. It keeps doing so while such trickles come at
 * least every READER_BUSY_HOLD_MS (producers emit in bursts, and a look between two bursts
 * finds nothing), then goes back to the idle flush. Cost: at most 500 wakeups a second, each
 * for at least 128 records; rings that fill faster wake the reader by themselves and keep the
 * long timeout, whose sleeps are cheaper (on virtual machines a timeout shorter than the
 * scheduler tick reprograms the timer at every sleep, the dearer the shorter: hence 2 ms, not
 * 1); slower rings (below 64k records/s) are left to FlushIntervalMs=, where a wakeup of their
 * own would cost more than their records. */
#define READER_BUSY_FLUSH_MS              2u
#define READER_BUSY_MIN_RECORDS           128u
#define READER_BUSY_HOLD_MS               10u
/* A record of a third-party type without a decoder may be held in its ring while a scan for
 * its producer runs (decoders.h): the reader looks again every READER_HOLD_POLL_MS, and
 * publishes it as "unknown" after READER_HOLD_MAX_MS (counted: decoder_hold_expired). Records
 * behind it on its CPU wait with it; the ring's size bounds them, and what the kernel cannot
 * write meanwhile its producers count as failures. */
#define READER_HOLD_POLL_MS               1u
#define READER_HOLD_MAX_MS                1000u

/* Takes ownership of the rings (on success and on failure), one per CPU of `cpus` in their
 * order; a NULL ring parks a CPU that is offline: reader_replace_ring() gives it one later. `id` is the
 * reader's index in the hub. `cgroups` (NULL: events get no unit) and `ledger` must outlive the reader; the
 * reader continues the ledger's sequence-gap state of its CPUs, so it is made after ledger_settle(). */
int reader_new(
	unsigned id,
	const CpuSet *cpus,
	Ring **rings,
	size_t n_rings,
	Hub *hub,
	CgroupWatch *cgroups,
	Ledger *ledger,
	unsigned flush_interval_ms,
	Reader **ret);
Reader *reader_free(Reader *r); /* stops the thread first if it runs (bounded last drain) */
/* Events get the container of their cgroup from t (containers.h; NULL: none). Before the reader
 * starts. */
void reader_set_containers(Reader *r, ContainerTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(Reader *, reader_free);

/* ReaderPriority= (SCHED_FIFO) is bounded by the reader's own work: in each window of
 * READER_RT_WINDOW_USEC the thread runs at most ReaderPriorityBudget= percent of it (default 50)
 * at its real-time priority; past that it goes back to SCHED_OTHER at its nice value until the
 * window ends (counted: rt_demotions). A flood then takes at most half a CPU at a priority above
 * every normal task, and competes for the rest like any task. The check reads the thread's CPU
 * clock once per loop (a wakeup and its drain), never per record. */
#define READER_RT_WINDOW_USEC (100u * 1000u)

/* Gives thread `tid` a reader's scheduling: SCHED_FIFO at `priority` (1..99), or with 0 nice value
 * `nice` and EEVDF's short slice where the kernel has it. Returns 0, or 1 with the errno in
 * *ret_errno (left as it was; a refused priority falls back to the nice value). */
int reader_schedule(pid_t tid, int nice, unsigned priority, int *ret_errno);
/* Starts the thread with reader_schedule(). Returns 0, 1 if its scheduling could not be set
 * (the thread runs at the caller's nice value, or at `nice` without its priority: *ret_errno
 * says why), or a negative errno. */
int reader_start(Reader *r, int nice, unsigned priority, unsigned budget_percent, int *ret_errno);
/* Asks the thread to drain its rings a last time and exit, then joins it. With until_empty
 * (only once nothing can write into the rings: slots cleared and a grace period waited out)
 * the last drain goes on until the rings are empty; otherwise it is bounded. */
void reader_stop(Reader *r, bool until_empty);

unsigned reader_id(const Reader *r);
const CpuSet *reader_cpus(const Reader *r);
size_t reader_n_rings(const Reader *r);
/* NULL while slot i's CPU has been offline since the start (parked until it comes online). */
const Ring *reader_ring(const Reader *r, size_t i);
unsigned reader_slot_cpu(const Reader *r, size_t i);
/* Read with STAT_LOAD from any thread. */
const CpuStats *reader_cpu_stats(const Reader *r, size_t i);
const ReaderStats *reader_stats(const Reader *r);
void reader_unit_cache_stats(const Reader *r, CgroupCacheStats *ret);

/* CPU hotplug (main thread). Hands `ring` (NULL: the CPU went offline) for `cpu`, one of the
 * reader's CPUs, to the reader thread, which drains the CPU's current ring to empty, then reads
 * `ring` in its place; the CPU's counters carry on. Takes ownership of `ring` in every case.
 * -ENOENT if the reader has no ring for `cpu`. */
int reader_replace_ring(Reader *r, unsigned cpu, Ring *ring);
/* Frees the rings the thread let go since the last call (main thread: reader_ring() may have
 * returned them to it). */
void reader_free_retired_rings(Reader *r);

/* Test-only fault injection (compiled in with -Dfault_injection=true): the thread stops making
 * progress while frozen. */
/* Before reader_start(): the third-party decoders (decoders.h) the thread takes each batch. */
void reader_set_decoders(Reader *r, Decoders *d);
void reader_set_frozen(Reader *r, int frozen);
