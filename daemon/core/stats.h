/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one snapshot of the core's counters (StatsSnapshot) that D-Bus GetStats() (the features add
 * their own sections), STATUS=, the exit summary and perfrelayctl stats all read, and the totals
 * the D-Bus properties show. Taken from the sources the manager names (StatsSources): this file
 * sees neither the manager nor the bus. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

#include "core/reader-stats.h"
#include "kernel/ledger.h"
#include "kernel/probes.h"
#include "core/reader.h"
#include "api/server.h"
#include "api/users.h"

/* The clients outside the event socket (standard output, bus monitors), as totals. */
typedef struct StatsClients {
	uint64_t offered, delivered, dropped;
} StatsClients;

/* Where the counters are, as the manager has them at the time of the call. */
typedef struct StatsSources {
	Probes *probes;
	Ledger *ledger;
	Reader *const *readers;
	size_t n_readers;
	Server *server; /* NULL: no socket */
	/* Per producer: its pinned failure count when this daemon began serving, and what the
	 * start found lost with the rings of a dead daemon ([PERFRELAY_MAX_PRODUCERS]). */
	const uint64_t *failures_at_start;
	const uint64_t *crash_lost_at_start;
	StatsClients others;
} StatsSources;

/* Totals over the whole daemon (D-Bus properties, perfrelayctl status). */
typedef struct StatsTotals {
	uint64_t events_received;   /* valid records the readers took from the rings */
	uint64_t events_delivered;  /* events written whole to a socket client or standard output, or
				     * sent as a bus Event signal */
	uint64_t events_lost;       /* PERF_RECORD_LOST counts: the kernel found a ring full */
	uint64_t producer_failures; /* bpf_perf_event_output() failures counted by the producers */
	uint64_t client_drops;      /* events a client was offered and did not get (queue full, bus rate,
				     * left in its queue when it went) */
	uint64_t events_offered;    /* events that matched a client: delivered + dropped + still queued */
	uint64_t clients;           /* socket subscribers connected now */
} StatsTotals;

/* Fills *ret. producer_failures is read from the pinned counters array only when
 * `with_failures` is set (a map read per call); if that read fails it is 0 and the error is
 * returned, with every other field filled. */
int stats_totals(const StatsSources *src, bool with_failures, StatsTotals *ret);

/* One producer id. "Lifetime" figures come from the pinned maps and span every daemon since
 * the pins were made; at a quiescent point (no emit in flight, rings drained)
 *   attempts = received + malformed + failures + crash_lost
 * holds exactly, and seq_gaps equals the part of failures + malformed + crash_lost that some
 * later record of the same (producer, CPU) proves. */
typedef struct ProducerSnapshot {
	uint32_t id;
	uint64_t attempts;            /* lifetime, the producer's pinned counters */
	uint64_t filtered;            /* lifetime, the pinned "filtered": hits = filtered + attempts */
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
	uint64_t btf_decoded, btf_short; /* third-party records: see ReaderStats */
	uint64_t decoder_holds, decoder_hold_expired;
	uint64_t rt_demotions; /* ReaderPriority='s budget spent (reader.h) */
	uint64_t malformed_by_reason[_DECODE_ERROR_MAX];
} ReaderSnapshot;

/* A socket subscriber connected now (the ones gone are in the clients_* totals). */
typedef struct ClientSnapshot {
	uint64_t id; /* the hello line's client_id */
	uint32_t uid, pid;
	bool shared;                                   /* reads a shared ring */
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
	UsersStats users; /* what the uids hold, socket and bus together (users.h) */
	/* The shared path (ServerStats.shared_*). */
	struct {
		uint64_t rings, bytes, clients, fallbacks, hostile, moved;
	} shared;
	uint64_t ring_lost; /* PERF_RECORD_LOST counts of this daemon's rings */
} StatsSnapshot;

/* Main thread. Reads the pinned counters (one map lookup per producer id). */
int stats_snapshot(const StatsSources *src, StatsSnapshot **ret);
StatsSnapshot *stats_snapshot_free(StatsSnapshot *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(StatsSnapshot *, stats_snapshot_free);
