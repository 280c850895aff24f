/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The flight recorder (docs/recorder.md): one overwritable perf ring per CPU (written backward,
 * mapped read-only), put into the pinned "recorder" array, which producers write every record
 * into as well as into "events" while "recorder_on" is 1. Nobody reads the rings until a
 * snapshot pauses them, copies them and resumes them. Main thread only. */
#pragma once

#include <stdint.h>

#include "kernel/cpuset.h"
#include "macro.h"
#include "time-util.h"

typedef struct Recorder Recorder;

/* One CPU's ring as a snapshot copied it: `data` holds the ring's bytes from its newest record
 * on (data_head first), `size` bytes, the whole ring; records follow each other newest first
 * until one with a zero header (never written) or one that does not fit (overwritten in part). */
typedef struct RecorderCopy {
	unsigned cpu;
	uint8_t *data;
	uint64_t size;
	uint64_t pause_ns; /* how long the ring was paused for the copy */
	uint64_t written;  /* records this ring took since it was opened (recorder_stats) */
} RecorderCopy;

typedef struct RecorderStats {
	uint64_t written, paused, failed; /* the pinned recorder_stats, summed over CPUs */
	uint64_t snapshots;
	uint64_t pause_max_ns; /* the longest pause of one ring in any snapshot */
} RecorderStats;

/* Opens a ring of `pages` pages (a power of two) on every CPU of cpus, puts each into the
 * array behind array_fd and sets the flag behind on_fd to `types` (not 0: bits of
 * perfrelay_recorder_bit(), producer.bpf.h). stats_fd: the pinned per-CPU stats. */
int recorder_new(
	const CpuSet *cpus, unsigned pages, uint32_t types, int array_fd, int on_fd, int stats_fd, Recorder **ret);
/* Records `types` (as recorder_new()) from now on. Accepts NULL. */
int recorder_set_types(Recorder *r, uint32_t types);
/* A CPU came online (again): a new ring for it (an offline CPU's perf event is dead; what its
 * ring held is lost). Accepts NULL. */
int recorder_cpu_online(Recorder *r, unsigned cpu);
/* Clears the flag and takes the rings out of the array (producers stop recording). */
void recorder_stop(Recorder *r);
/* recorder_stop(), then unmaps and closes. Accepts NULL. */
Recorder *recorder_free(Recorder *r);
/* Without a recorder: turns the pinned "recorder_on" off and empties the pinned array's
 * n_cpus slots, which a daemon that was killed with its recorder on left behind (the array
 * keeps its rings, BPF_F_PRESERVE_ELEMS): emitters would go on writing into rings nobody
 * will read, at the cost of a second output per record. */
void recorder_clear(int array_fd, int on_fd, unsigned n_cpus);
DEFINE_TRIVIAL_CLEANUP_FUNC(Recorder *, recorder_free);

/* Pauses each ring, copies it and resumes it (one ring at a time: each CPU's producers are
 * held off only for the memcpy of its own ring). *ret: n_rings copies, freed with
 * recorder_copies_free(). */
int recorder_snapshot(Recorder *r, RecorderCopy **ret, size_t *ret_n);
void recorder_copies_free(RecorderCopy *c, size_t n);

/* Walks a copy's records newest first: fn(perf record, size) for each; stops at the first
 * that was never written or overwritten in part. Returns the records walked. */
size_t recorder_copy_walk(
	const RecorderCopy *c, void (*fn)(const uint8_t *rec, uint32_t size, void *userdata), void *userdata);

void recorder_get_stats(Recorder *r, RecorderStats *ret);

/* How far back the rings may still reach: a CLOCK_MONOTONIC time before which none of them holds
 * a record any more (each took enough records since to overwrite itself whole), or 0 when some
 * ring may still hold older ones (it has not wrapped within the samples kept). Samples each
 * CPU's written count at `now_ns`: call it now and then (RECORDER_WINDOW_PERIOD_USEC); the
 * answer is as old as the sample it rests on, never newer than the truth. */
#define RECORDER_WINDOW_SAMPLES     64u
#define RECORDER_WINDOW_PERIOD_USEC (10 * USEC_PER_SEC)
uint64_t recorder_window_start(Recorder *r, uint64_t now_ns);
unsigned recorder_pages(const Recorder *r);
