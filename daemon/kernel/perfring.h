/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Walking the records of a perf ring's data area between tail and head. Pure: works on any
 * memory, so the unit tests drive it with crafted rings (wrapping records, corruption). The
 * barriers around it live in ring.c, where the kernel shares the memory. */
#pragma once

#include <stdint.h>
#include <string.h>

#include <linux/perf_event.h>

/* A record can never be larger than perf_event_header.size allows. */
#define PERFRING_RECORD_MAX 65535u

typedef enum PerfringStatus {
	PERFRING_EMPTY = 0,    /* tail == head */
	PERFRING_RECORD = 1,   /* ret_rec and ret_size describe a whole record */
	PERFRING_CORRUPT = -1, /* header size < 8, not a multiple of 8, beyond head or larger than the
				* ring; or head more than the ring's size ahead of tail */
} PerfringStatus;

/* Copies n bytes starting at ring offset `pos` (taken modulo the power-of-two size), wrapping
 * at the end of the data area. */
static inline void perfring_copy(const uint8_t *data, uint64_t mask, uint64_t pos, void *dst, size_t n) {
	uint64_t off = pos & mask;
	uint64_t first = mask + 1 - off;

	if (n <= first)
		memcpy(dst, data + off, n);
	else {
		memcpy(dst, data + off, first);
		memcpy((uint8_t *) dst + first, data, n - first);
	}
}

/* Returns the record at `tail`. A record that wraps the end of the data area is copied into
 * `scratch` (PERFRING_RECORD_MAX bytes, 8-aligned) so the caller always sees contiguous bytes;
 * others are returned in place (zero copy). `data` is the data area, `mask` its size - 1. */
static inline PerfringStatus perfring_next(
	const uint8_t *data,
	uint64_t mask,
	uint64_t tail,
	uint64_t head,
	uint8_t *scratch,
	const uint8_t **ret_rec,
	uint32_t *ret_size) {
	struct perf_event_header h;
	uint64_t off;

	if (tail == head)
		return PERFRING_EMPTY;
	/* The kernel never publishes more than the ring holds (it does not overwrite unread
	 * data), and a record larger than the ring would make the copies below read past the
	 * data area: both can only be a broken ring. */
	if (head - tail < sizeof(h) || head - tail > mask + 1)
		return PERFRING_CORRUPT;

	perfring_copy(data, mask, tail, &h, sizeof(h));
	if (h.size < sizeof(h) || (h.size & 7) || h.size > head - tail || h.size > mask + 1)
		return PERFRING_CORRUPT;

	off = tail & mask;
	if (off + h.size <= mask + 1)
		*ret_rec = data + off;
	else {
		perfring_copy(data, mask, tail, scratch, h.size);
		*ret_rec = scratch;
	}
	*ret_size = h.size;
	return PERFRING_RECORD;
}
