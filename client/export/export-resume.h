/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's place in the daemon's history (docs/export.md, "Resuming"): the cursor of
 * the last event every target acknowledged or dropped for good, kept in CursorFile= so that after
 * a restart (its own, the daemon's, an outage) the export goes on right after it. The loop numbers
 * the events it offers (ExportEvent.seq) and marks a few of them with their cursor; the targets
 * say the oldest number they still hold; what is before it is done, and the newest mark before it
 * is written. Main thread only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "lib/perfrelay.h"

/* Marks kept between two saves: more, and the newest is replaced (a save then moves less far). */
#define EXPORT_RESUME_MARKS 1024u

/* The "lost" records of a history stream, by their reason (docs/history.md, "Gaps"). */
#define EXPORT_RESUME_REASONS(X)          \
	X(behind, "history-behind")       \
	X(disk, "history-disk")           \
	X(retention, "history-retention") \
	X(damaged, "history-damaged")

typedef struct ExportResumeMark {
	uint64_t seq;
	char cursor[PERFRELAY_CURSOR_MAX];
} ExportResumeMark;

typedef struct ExportResume {
	char *path; /* CursorFile= (not owned) */
	/* In the file: where the next start begins, a cursor or "since=<CLOCK_REALTIME ns>" (a
	 * first start's time, until its first cursor is saved). */
	char saved[PERFRELAY_CURSOR_MAX];
	char refused[160]; /* the daemon's reason when it refused the saved cursor */
	ExportResumeMark marks[EXPORT_RESUME_MARKS]; /* oldest first, from `first`, `n` of them */
	size_t first, n;
	uint64_t saves, save_errors;
	int last_error; /* errno of the last failed save, 0 */
			/* Events the history lost before they reached us (its "lost" records), by reason. */
#define EXPORT_RESUME_FIELD(name, text) uint64_t lost_##name;
	EXPORT_RESUME_REASONS(EXPORT_RESUME_FIELD)
#undef EXPORT_RESUME_FIELD
	uint64_t lost_other; /* a count without a reason we know, and notices of upstream loss */
} ExportResume;

/* Reads the saved cursor of path; a missing file is a first start, which begins now and writes
 * so ("since="). Errors name the file. */
int export_resume_load(ExportResume *r, const char *path, char **ret_error);

/* 1 and the time when r->saved is a "since=" one, else 0. */
int export_resume_since_ns(const ExportResume *r, uint64_t *ret);

/* Event seq (as offered) has this cursor: the place after it. */
void export_resume_mark(ExportResume *r, uint64_t seq, const char *cursor);

/* Every event numbered below `oldest_held` is acknowledged or dropped for good: writes the
 * newest mark before it to the file (atomically, synced), when it is not there yet. */
int export_resume_save(ExportResume *r, uint64_t oldest_held);

/* A history stream's "lost" record: count and the JSON behind it (its reason). */
void export_resume_lost(ExportResume *r, uint64_t count, const char *json, size_t len);
