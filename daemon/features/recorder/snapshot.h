/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A flight recorder snapshot as JSON lines (docs/recorder.md): the records of the copied rings
 * decoded, filtered, merged by time oldest first and encoded in the socket's schema, then one
 * {"type":"snapshot",...} summary line. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "decode/producer-scan.h"
#include "hub/proctable.h"
#include "features/recorder/recorder.h"
#include "hub/request.h"

/* An event of the history's part, as its record's header names it. */
typedef struct SnapshotSeen {
	uint32_t producer, cpu;
	uint64_t seq;
} SnapshotSeen;

typedef struct SnapshotOptions {
	uint64_t since_ns, until_ns; /* bounds on the events' ts (CLOCK_BOOTTIME ns); 0: none */
	const Subscription *filter;  /* types, pid, uid, comm, unit (access ALL); NULL: everything */
	/* The unit of a cgroup id (NULL if none), and the decoder of a third-party type (NULL if
	 * none); both may be NULL. */
	const char *(*unit)(uint64_t cgroup_id, void *userdata);
	const ProducerType *(*decoder)(uint16_t type, void *userdata);
	void *userdata;
	/* The process table for "ancestor" filters (NULL: such a filter matches nothing). It is
	 * the table as it is now: an ancestor evicted since an old event is a miss. */
	ProcTable *procs;
	/* The history's part (docs/recorder.md, "History"): called before the recorder's events
	 * with the time (CLOCK_BOOTTIME ns) from which every CPU's ring holds all it recorded; it
	 * writes the history's lines of before that time to f, returns how many (or a negative
	 * errno) and, in *ret_seen (malloc'd, n in *ret_n_seen), the events among them: those the
	 * rings hold too are then left out of the recorder's part. NULL: none. */
	int64_t (*history)(
		FILE *f, uint64_t until_ts, void *userdata, SnapshotSeen **ret_seen, size_t *ret_n_seen);
} SnapshotOptions;


typedef struct SnapshotSummary {
	uint64_t events;    /* lines written, the summary not included */
	uint64_t records;   /* records found in the rings */
	uint64_t malformed; /* records the decoder rejected */
	uint64_t history;   /* lines of the history's part */
} SnapshotSummary;

/* Writes the snapshot of the n copies to f. Returns 0 or a negative errno (-ENOMEM, or the
 * write's error). */
int snapshot_write(const RecorderCopy *copies, size_t n, const SnapshotOptions *o, FILE *f, SnapshotSummary *ret);
