/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The batch format of perfrelay-export's JetStream messages (docs/export.md, "Batches"): frames
 * back to back, each a little-endian u32 length and a record exactly as the socket's binary
 * format carries it; a unit frame (PERFRELAY_TYPE_UNIT) right before a record gives that
 * record's systemd unit. Pure: writing and reading frames, no I/O, so it is unit-tested and
 * fuzzed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "unit-frame.h"

/* The value of a message's Perfrelay-Batch header: this format's version. */
#define EXPORT_BATCH_FORMAT "1"

/* A unit frame: length, struct perfrelay_unit, the name with its NUL (shared/unit-frame.h). */
#define EXPORT_UNIT_FRAME_MAX UNIT_FRAME_MAX
/* The most one record adds to a batch: its unit frame, its length and the record. */
#define EXPORT_FRAME_MAX      (EXPORT_UNIT_FRAME_MAX + sizeof(uint32_t) + PERFRELAY_RECORD_MAX)

/* The cgroup id a built-in record carries (exec, counters, packet), or 0. rec holds size bytes. */
uint64_t export_record_cgroup_id(const struct perfrelay_hdr *hdr, const void *rec, size_t size);

/* Writes the unit frame of the record (hdr, rec, size) into buf when it has a cgroup id and
 * unit is a name shorter than PERFRELAY_UNIT_NAME_MAX; returns its length, else 0. */
size_t export_unit_frame(
	const struct perfrelay_hdr *hdr,
	const void *rec,
	size_t size,
	const char *unit,
	uint8_t buf[static EXPORT_UNIT_FRAME_MAX]);

/* One record of a batch, as export_batch_next() hands it out. */
typedef struct ExportRecord {
	struct perfrelay_hdr hdr;           /* a copy: the batch's bytes need not be aligned */
	const uint8_t *rec;                 /* the whole record (header included), into the batch */
	size_t size;                        /* hdr.size, and a packet's bytes */
	char unit[PERFRELAY_UNIT_NAME_MAX]; /* "" when no unit frame came before it */
} ExportRecord;

/* Reads the record at *pos of a batch (data, len) and moves *pos past it (and its unit frame).
 * Returns 1 with *ret filled, 0 at the end, -EBADMSG for anything that is not a valid frame (a
 * length beyond the data, a record whose magic or size disagrees with its frame, a unit frame
 * without its NUL, a unit frame not followed by a record). */
int export_batch_next(const uint8_t *data, size_t len, size_t *pos, ExportRecord *ret);
