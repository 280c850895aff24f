/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's statistics: the counters shared between reader threads (the only writers) and
 * the main thread, and the one snapshot of every counter (StatsSnapshot) that D-Bus
 * GetStats(), STATUS=, the exit summary and perfrelayctl stats all read.
 * Every reader counter is written by exactly one reader thread with relaxed atomic stores,
 * once per batch, and read by the main thread with relaxed atomic loads: values are exact and
 * never torn, but two counters read one after the other may come from different batches. */
#pragma once

#include <stdint.h>

#include "macro.h"

#include "decode.h"
#include "event.h"

#define STAT_LOAD(x)     __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STAT_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
/* Single writer: a relaxed load + store is an exact increment and avoids a locked add. */
#define STAT_ADD(x, v)   STAT_STORE(x, STAT_LOAD(x) + (v))

/* Per CPU ring; written by the reader thread that owns the ring. */
typedef struct CpuStats {
	uint64_t received;      /* valid perfrelay records */
	uint64_t bytes;         /* bytes of perf records consumed */
	uint64_t lost;          /* sum of PERF_RECORD_LOST counts (ring full in the kernel) */
	uint64_t malformed;     /* raw samples the decoder rejected */
	uint64_t other;         /* perf records of other types (skipped) */
	uint64_t corrupt;       /* times the ring's framing was broken and skipped to head */
	uint64_t corrupt_bytes; /* bytes skipped so, not in `bytes` */
} CpuStats;

/* Per reader thread; written by that thread. */
typedef struct ReaderStats {
	uint64_t wakeups;  /* epoll_wait returns with ring activity or timeouts that found data */
	uint64_t batches;  /* ring drains that consumed something */
	uint64_t events;   /* valid records, all CPUs of the group */
	uint64_t progress; /* bumped every loop iteration */
	uint64_t alive_usec; /* CLOCK_MONOTONIC µs of the latest loop iteration: the watchdog's proof of life */
	/* Per producer id: valid records received, and records rejected by the decoder whose
	 * header named this producer (garbage with an id out of range counts in malformed_by_reason only). */
	uint64_t received_by_producer[PERFRELAY_MAX_PRODUCERS];
	uint64_t malformed_by_producer[PERFRELAY_MAX_PRODUCERS];
	uint64_t malformed_by_reason[_DECODE_ERROR_MAX];
	uint64_t malformed_by_producer_reason[PERFRELAY_MAX_PRODUCERS][_DECODE_ERROR_MAX];
} ReaderStats;

typedef struct Manager Manager;

/* One producer id. "Lifetime" figures come from the pinned maps and span every daemon since
 * the pins were made; at a quiescent point (no emit in flight, rings drained)
 *   attempts = received + malformed + failures + crash_lost
 * holds exactly, and seq_gaps equals the part of failures + malformed + crash_lost that some
 * later record of the same (producer, CPU) proves. */
typedef struct ProducerSnapshot {
	uint32_t id;
	uint64_t attempts;            /* lifetime, the producer's pinned counters */
	uint64_t failures;            /* lifetime, the producer's pinned counters */
	uint64_t failures_downtime;   /* of failures: counted before this daemon began serving */
	uint64_t failures_serving;    /* of failures: counted while this daemon serves */
	uint64_t received;            /* lifetime, the pinned ledger */
	uint64_t malformed;           /* lifetime, the pinned ledger */
	uint64_t crash_lost;          /* lifetime, the pinned ledger */
	uint64_t crash_lost_at_start; /* of crash_lost: found by this daemon's start */
	uint64_t seq_gaps;            /* lifetime, the readers' sequence-gap detector */
	uint64_t received_session;    /* by this daemon */
	uint64_t malformed_session;   /* by this daemon */
	uint64_t malformed_by_reason[_DECODE_ERROR_MAX]; /* by this daemon */
} ProducerSnapshot;

typedef struct CpuSnapshot {
	unsigned cpu;
	unsigned reader;
	CpuStats ring;               /* this daemon's ring of the CPU */
	uint64_t attempts, failures; /* lifetime, summed over producers */
} CpuSnapshot;

typedef struct ReaderSnapshot {
	unsigned id;
	char cpus[256]; /* "0-3,8" */
	uint64_t events, wakeups, batches;
	uint64_t malformed_by_reason[_DECODE_ERROR_MAX];
} ReaderSnapshot;

/* A socket subscriber connected now (the ones gone are in the clients_* totals). */
typedef struct ClientSnapshot {
	uint64_t id; /* the hello line's client_id */
	uint32_t uid, pid;
	uint64_t offered, sent, dropped, queued_bytes; /* sent: HubClientStats.queued */
} ClientSnapshot;

typedef struct StatsSnapshot {
	ProducerSnapshot total;      /* every producer id (id = UINT32_MAX) */
	ProducerSnapshot *producers; /* ids with any activity, ascending */
	size_t n_producers;
	CpuSnapshot *cpus; /* CPUs with a ring, ascending */
	size_t n_cpus;
	ReaderSnapshot *readers;
	size_t n_readers;
	/* Clients of every kind (socket, standard output, bus monitors), gone ones included:
	 * offered = delivered + dropped for each. */
	uint64_t clients_connected;
	uint64_t clients_offered;
	uint64_t clients_delivered;
	uint64_t clients_dropped;
	ClientSnapshot *clients; /* socket subscribers connected now, oldest first */
	size_t n_clients;
	uint64_t ring_lost; /* PERF_RECORD_LOST counts of this daemon's rings */
} StatsSnapshot;

/* Main thread. Reads the pinned counters (one map lookup per producer id). */
int stats_snapshot(Manager *m, StatsSnapshot **ret);
StatsSnapshot *stats_snapshot_free(StatsSnapshot *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(StatsSnapshot *, stats_snapshot_free);
