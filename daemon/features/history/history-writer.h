/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The history's writer thread (docs/history.md): reads the binary frames the main thread writes
 * into a pipe (the history's hub client), cuts them into blocks, compresses each with zstd,
 * appends it to the current segment, and keeps the directory within HistoryMaxUse= and
 * HistoryMaxAgeSec= by removing whole segments. A block it cannot write (ENOSPC, EIO) is counted
 * and its events become a gap record at the head of the next block written. */
#pragma once

#include <stdint.h>

#include "features/history/history-store.h"

typedef struct HistoryWriter HistoryWriter;

typedef struct HistoryWriterStats {
	uint64_t received;     /* event records read from the pipe */
	uint64_t written;      /* of which are in a block on disk */
	uint64_t dropped_disk; /* of which a block that could not be written lost */
	uint64_t dropped_behind; /* events the gap records of the hub's queue counted (lost upstream of the pipe) */
	uint64_t gaps;           /* gap records written */
	/* Events of blocks that could not be written whose gap record waits for the next block:
	 * dropped_disk = the counts of the "history-disk" gap records written + this. */
	uint64_t disk_gap_pending;
	uint64_t blocks;       /* blocks written */
	uint64_t raw_bytes;    /* their frames' bytes before compression */
	uint64_t disk_bytes;   /* their bytes on disk, headers included */
	uint64_t write_errors; /* blocks that could not be written */
	uint64_t syncs;        /* fdatasync() calls */
	uint64_t rotations;    /* segments begun */
	uint64_t cpu_ns;       /* the thread's CPU time */
} HistoryWriterStats;

typedef struct HistoryLimits {
	uint64_t max_use;
	uint64_t max_age_sec; /* 0: none */
	uint64_t sync_interval_usec;
} HistoryLimits;

/* Starts the thread on the pipe's read end (taken). notify_fd (an eventfd, not taken) is
 * signalled after each block written and each segment removed. */
int history_writer_start(
	HistoryStore *store, int pipe_fd, int notify_fd, const HistoryLimits *l, HistoryWriter **ret);
/* A reload: the limits apply from the writer's next block on. */
void history_writer_set_limits(HistoryWriter *w, const HistoryLimits *l);
/* The pipe's write end must be closed first: the thread writes what is left, closes the
 * segment and ends; join waits for it (its figures stay readable), stop joins and frees. */
void history_writer_join(HistoryWriter *w);
HistoryWriter *history_writer_stop(HistoryWriter *w);
void history_writer_get_stats(HistoryWriter *w, HistoryWriterStats *ret);
