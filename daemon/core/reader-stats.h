/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The statistics of the reader threads (the only writers), read by the main thread with
 * base/stat.h's relaxed atomics: values are exact and never torn, but two counters read one
 * after the other may come from different batches. */
#pragma once

#include <stdint.h>

#include "decode/decode.h"
#include "event.h"
#include "base/stat.h"

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
	/* Third-party records published with named fields from their producer's BTF, and records
	 * of a declared type shorter than its struct (published as "unknown"). */
	uint64_t btf_decoded;
	uint64_t btf_short;
	/* Records held in their ring for a decoder not yet known (reader.h), and holds that ran
	 * out of time (the record was then published as "unknown"). */
	uint64_t decoder_holds;
	uint64_t decoder_hold_expired;
	/* ReaderPriority=: windows in which the thread used up its SCHED_FIFO budget and ran the
	 * rest at its nice value (reader.h, ReaderPriorityBudget=). */
	uint64_t rt_demotions;
} ReaderStats;
