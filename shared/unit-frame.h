/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit frames (PERFRELAY_TYPE_UNIT, docs/protocol.md "Unit frames"), written by the daemon's hub
 * and by perfrelay-export's batches, read by libperfrelay and the batch reader: one statement
 * of their layout for all four. */
#pragma once

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "event.h"

/* A whole unit frame: its u32 length, struct perfrelay_unit, the name with its NUL. */
#define UNIT_FRAME_MAX (sizeof(uint32_t) + sizeof(struct perfrelay_unit) + PERFRELAY_UNIT_NAME_MAX)

/* Writes the unit frame that goes before the record with header `rec` (its producer, cpu, seq
 * and ts_ns) and cgroup id into buf; returns its length, or 0 when there is none to write (no
 * unit, no cgroup id, or a name too long to be a unit's: better none than a cut one). */
static inline size_t unit_frame_write(
	const struct perfrelay_hdr *rec,
	uint64_t cgroup_id,
	const char *unit,
	uint8_t buf[static UNIT_FRAME_MAX]) {
	struct perfrelay_unit u;
	size_t name_len;
	uint32_t le;

	if (!unit || cgroup_id == 0)
		return 0;
	name_len = strnlen(unit, PERFRELAY_UNIT_NAME_MAX);
	if (name_len == 0 || name_len >= PERFRELAY_UNIT_NAME_MAX)
		return 0;
	u = (struct perfrelay_unit){
		.hdr = {
			.magic = PERFRELAY_MAGIC,
			.version = PERFRELAY_VERSION,
			.type = PERFRELAY_TYPE_UNIT,
			.size = (uint16_t) (sizeof(u) + name_len + 1),
			.producer = rec->producer,
			.cpu = rec->cpu,
			.seq = rec->seq,
			.ts_ns = rec->ts_ns,
		},
		.cgroup_id = cgroup_id,
	};
	le = htole32(u.hdr.size);
	memcpy(buf, &le, sizeof(le));
	memcpy(buf + sizeof(le), &u, sizeof(u));
	memcpy(buf + sizeof(le) + sizeof(u), unit, name_len + 1);
	return sizeof(le) + u.hdr.size;
}

/* The name in a unit frame's payload (the len bytes after its header) into ret. False for a
 * payload that is not one: no name, no NUL within it, or too long. */
static inline bool unit_frame_name(const void *payload, size_t len, char ret[static PERFRELAY_UNIT_NAME_MAX]) {
	const size_t off = sizeof(struct perfrelay_unit) - sizeof(struct perfrelay_hdr);
	const char *name = (const char *) payload + off;
	size_t n;

	if (len <= off)
		return false;
	n = strnlen(name, len - off);
	if (n == 0 || n >= len - off || n >= PERFRELAY_UNIT_NAME_MAX)
		return false;
	memcpy(ret, name, n + 1);
	return true;
}
