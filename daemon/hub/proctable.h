/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's table of processes (docs/events.md, "Process identity"): one entry per process
 * image, keyed by its exec_id, with its parent's exec_id, pid, comm and cgroup, fed by the
 * readers from exec, fork and exit events (and the ancestors an exec carries) and seeded at
 * start from the kernel's task list. It answers two questions: the lineage of an event (its
 * process's ancestors, for the "ancestor" filter) and the live processes (perfrelayctl tree).
 *
 * Bounded: a fixed array of buckets of PROC_BUCKET_SLOTS entries, sized at creation, placed by a
 * keyed hash (siphash.h); a full bucket replaces its oldest exited entry, else its oldest entry
 * (both counted). Concurrent
 * without a global lock: writers (the readers, one per CPU group) take the bucket's own spin
 * lock; lookups take none: each bucket has a sequence count, as the kernel's seqcount_t, and a
 * lookup that raced a writer reads the bucket again. Every shared field is read and written
 * with (relaxed) atomics, so a torn read is only ever retried, never used. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "decode/decode.h"
#include "macro.h"

#define PROC_BUCKET_SLOTS 4u
#define PROC_COMM_LEN     16u
/* Ancestors a lineage walks at most: deeper trees are cut (Lineage.complete stays false). */
#define LINEAGE_MAX       32u
#define PROC_UID_UNKNOWN  UINT32_MAX

typedef struct ProcTable ProcTable;

typedef struct ProcEntry {
	uint64_t exec_id;        /* never 0 */
	uint64_t parent_exec_id; /* 0: none, or not known */
	uint64_t cgroup_id;      /* 0: not known */
	uint32_t pid;            /* tgid */
	uint32_t uid;            /* real uid; PROC_UID_UNKNOWN for an exec's ancestors */
	bool exited;
	char comm[PROC_COMM_LEN]; /* NUL-terminated */
} ProcEntry;

typedef struct ProcTableStats {
	uint64_t capacity;     /* entries the table can hold */
	uint64_t bytes;        /* its memory */
	uint64_t entries;      /* held now */
	uint64_t live;         /* of which not exited */
	uint64_t inserted;     /* images added */
	uint64_t seeded;       /* of which from the kernel's task list at start */
	uint64_t exited;       /* exits noted */
	uint64_t evicted;      /* entries replaced for newer ones in a full bucket */
	uint64_t evicted_live; /* of which had not exited */
	uint64_t misses;       /* lineage walks that stopped at a process the table did not hold */
	uint64_t incomplete;   /* events an "ancestor" filter with "incomplete" took for that */
	uint64_t retries;      /* lookups that raced a writer and read the bucket again */
} ProcTableStats;

/* capacity is rounded up to a power-of-two number of buckets, within MIN..MAX. The buckets'
 * hash is keyed with a key drawn now (getrandom()): which exec ids share a bucket is known to no
 * one outside the daemon. */
int proc_table_new(size_t capacity, ProcTable **ret);
/* The bucket exec_id goes in (for tests). */
size_t proc_table_bucket_index(const ProcTable *t, uint64_t exec_id);
ProcTable *proc_table_free(ProcTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(ProcTable *, proc_table_free);

/* Adds or replaces the entry of e->exec_id. With `only_new`, an entry the table holds stays
 * as it is (what an exec's ancestors or a fork say is less than what the image's own exec or
 * the seed said). Returns whether the table had no entry of that image. Any thread. */
bool proc_table_put(ProcTable *t, const ProcEntry *e, bool only_new);
/* Marks the image exited (it stays, first in line for eviction); one the table does not hold
 * gets an exited entry of its own, so that its fork, read later from another CPU's ring, does
 * not add it as live. Any thread. */
void proc_table_exit(ProcTable *t, uint64_t exec_id);
/* The entry of exec_id: true and *ret filled, or false. Any thread, lock-free. */
bool proc_table_get(ProcTable *t, uint64_t exec_id, ProcEntry *ret);
/* What a decoded event tells the table: exec, fork (of a process, not a thread) and exit
 * events of schema 3 probes; anything else is ignored. A reader thread. */
void proc_table_note(ProcTable *t, const DecodedEvent *ev);
/* Counts an event that a filter matched for its incomplete lineage (any thread). */
void proc_table_count_incomplete(ProcTable *t);
/* Counts a seeded entry (proc_table_put() of the start's task list). */
void proc_table_count_seeded(ProcTable *t, uint64_t n);

/* Copies up to `max` live entries (a consistent view of each bucket, not of the whole table)
 * into out; returns how many. Main thread (ListProcesses). */
size_t proc_table_list(ProcTable *t, ProcEntry *out, size_t max);
void proc_table_get_stats(ProcTable *t, ProcTableStats *ret);

/* The ancestors of one event, walked when a filter first asks (lineage_walk()) and then kept
 * for every other client's filter of the same event. On the stack of the thread that
 * publishes the event. `unit_of` resolves an ancestor's cgroup to its unit (NULL: none); the
 * string need only stay valid until the next call. */
typedef const char *(*LineageUnitFn)(void *userdata, uint64_t cgroup_id);

typedef struct Lineage {
	ProcTable *table; /* NULL: no table, no ancestors */
	const DecodedEvent *ev;
	LineageUnitFn unit_of;
	void *unit_userdata;
	bool walked;
	bool complete; /* the walk reached a process without parent (else: a miss, or too deep) */
	/* Set by the last filter_match() that took the event only for its incomplete lineage
	 * ("incomplete": true); the hub clears it before each client's match. */
	bool incomplete_matched;
	unsigned n;
	ProcEntry a[LINEAGE_MAX]; /* the parent first */
} Lineage;

static inline void lineage_init(
	Lineage *l, ProcTable *table, const DecodedEvent *ev, LineageUnitFn unit_of, void *userdata) {
	l->table = table;
	l->ev = ev;
	l->unit_of = unit_of;
	l->unit_userdata = userdata;
	l->walked = false;
	l->complete = false;
	l->incomplete_matched = false;
	l->n = 0;
}

/* The same lineage for the next event (the table and resolver stay): two stores. */
static inline void lineage_reset(Lineage *l, const DecodedEvent *ev) {
	l->ev = ev;
	l->walked = false;
}

/* Whether proc_table_note() has anything to learn from the event: exec, fork and exit events
 * with process identity (a test of two fields, inline, for the readers' every event). */
static inline bool proc_table_wants(const DecodedEvent *ev) {
	return ev->has_exec_id &&
		(ev->hdr.type == PERFRELAY_TYPE_EXEC || ev->hdr.type == PERFRELAY_TYPE_FORK ||
		 ev->hdr.type == PERFRELAY_TYPE_EXIT);
}

/* Walks the event's ancestors, once: an exec's from its record (exact, as the kernel had them),
 * then the table's; any other event's from its parent_exec_id up through the table. An event
 * without process identity has none. A walk that stops at an image the table does not hold is
 * counted (ProcTableStats.misses). */
void lineage_walk(Lineage *l);
