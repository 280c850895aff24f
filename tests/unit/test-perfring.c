/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the ring walker on crafted rings: records that wrap the end, corruption, and
 * the decoding of what it returns (samples, PERF_RECORD_LOST). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/perf_event.h>

#include "decode/decode.h"
#include "event.h"
#include "kernel/perfring.h"

#include "unit-test.h"

#define RING 256u /* a tiny data area so records wrap */

static _Alignas(8) uint8_t ring[RING];
static _Alignas(8) uint8_t scratch[PERFRING_RECORD_MAX + 8];

/* Writes a PERF_RECORD_SAMPLE carrying a perfrelay record of `payload` bytes at position pos
 * (modulo RING), like the kernel does; returns the record's size. */
static uint32_t put_sample(uint64_t pos, uint16_t type, uint32_t producer, uint64_t seq, uint32_t payload) {
	uint8_t rec[512] = {};
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE };
	struct perfrelay_hdr ph = {
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = type,
		.size = sizeof(ph) + payload,
		.producer = producer,
		.seq = seq,
	};
	uint32_t raw = sizeof(ph) + payload;
	uint32_t raw_padded = ((raw + 4 + 7) & ~7u) - 4; /* the kernel pads size+raw to 8 bytes */

	h.size = sizeof(h) + 4 + raw_padded;
	memcpy(rec, &h, sizeof(h));
	memcpy(rec + 8, &raw_padded, 4);
	memcpy(rec + 12, &ph, sizeof(ph));
	for (uint32_t i = 0; i < payload; i++)
		rec[12 + sizeof(ph) + i] = (uint8_t) (seq + i);
	for (uint32_t i = 0; i < h.size; i++)
		ring[(pos + i) % RING] = rec[i];
	return h.size;
}

static uint32_t put_lost(uint64_t pos, uint64_t lost) {
	uint8_t rec[32] = {};
	struct perf_event_header h = { .type = PERF_RECORD_LOST, .size = 24 };
	uint64_t id = 7;

	memcpy(rec, &h, sizeof(h));
	memcpy(rec + 8, &id, 8);
	memcpy(rec + 16, &lost, 8);
	for (uint32_t i = 0; i < h.size; i++)
		ring[(pos + i) % RING] = rec[i];
	return h.size;
}

static void test_walk_with_wrap(void) {
	/* Start near the end so the first record straddles it; head and tail are free-running
	 * counters, as in the kernel, far beyond the ring size. */
	uint64_t start = 10 * RING + RING - 40, pos = start, tail;
	uint32_t sizes[4];
	const uint8_t *rec;
	uint32_t size;
	int wrapped = 0;

	sizes[0] = put_sample(pos, PERFRELAY_TYPE_BENCH, PERFRELAY_PRODUCER_BENCH, 1, 24);
	pos += sizes[0];
	sizes[1] = put_sample(pos, PERFRELAY_TYPE_BENCH, PERFRELAY_PRODUCER_BENCH, 2, 40);
	pos += sizes[1];
	sizes[2] = put_lost(pos, 12345);
	pos += sizes[2];
	sizes[3] = put_sample(pos, PERFRELAY_TYPE_BENCH, PERFRELAY_PRODUCER_BENCH, 3, 16);
	pos += sizes[3];

	tail = start;
	for (int i = 0; i < 4; i++) {
		PerfRecordView v;
		DecodedEvent ev;

		ASSERT(perfring_next(ring, RING - 1, tail, pos, scratch, &rec, &size) == PERFRING_RECORD);
		ASSERT(size == sizes[i]);
		wrapped += rec == scratch;
		decode_perf_record(rec, size, &v);
		if (i == 2) {
			ASSERT(v.kind == PERF_REC_LOST);
			ASSERT(v.lost == 12345);
		} else {
			ASSERT(v.kind == PERF_REC_SAMPLE);
			ASSERT(decode_event(v.raw, v.raw_size, &ev) == DECODE_OK);
			ASSERT(ev.hdr.seq == (uint64_t) (i < 2 ? i + 1 : 3));
			/* The payload bytes survive the copy across the end of the ring. */
			for (uint32_t k = 0; k < ev.payload_size - 8; k++)
				ASSERT(ev.payload[8 + k] == (uint8_t) (ev.hdr.seq + 8 + k));
		}
		tail += size;
	}
	ASSERT(wrapped == 1);
	ASSERT(perfring_next(ring, RING - 1, tail, pos, scratch, &rec, &size) == PERFRING_EMPTY);
}

static void test_corruption(void) {
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE };
	const uint8_t *rec;
	uint32_t size;

	/* Fewer than 8 bytes published. */
	ASSERT(perfring_next(ring, RING - 1, 0, 4, scratch, &rec, &size) == PERFRING_CORRUPT);
	/* Size below the header, not a multiple of 8, or beyond head. */
	h.size = 4;
	memcpy(ring, &h, sizeof(h));
	ASSERT(perfring_next(ring, RING - 1, 0, 64, scratch, &rec, &size) == PERFRING_CORRUPT);
	h.size = 20;
	memcpy(ring, &h, sizeof(h));
	ASSERT(perfring_next(ring, RING - 1, 0, 64, scratch, &rec, &size) == PERFRING_CORRUPT);
	h.size = 72;
	memcpy(ring, &h, sizeof(h));
	ASSERT(perfring_next(ring, RING - 1, 0, 64, scratch, &rec, &size) == PERFRING_CORRUPT);
	h.size = 64;
	memcpy(ring, &h, sizeof(h));
	ASSERT(perfring_next(ring, RING - 1, 0, 64, scratch, &rec, &size) == PERFRING_RECORD);
	ASSERT(size == 64 && rec == ring);
}

static void test_larger_than_ring(void) {
	/* A small ring (256 bytes, mask 255) inside the big buffer, with a head that claims more
	 * than it holds: a record that fits the header's size but not the ring would make the
	 * wrapping copy read past the data area. Rejected before any copy. */
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .size = 512 };
	const uint8_t *rec;
	uint32_t size;

	memset(ring, 0, RING);
	memcpy(ring + 128, &h, sizeof(h));
	ASSERT(perfring_next(ring, 255, 128, 128 + 512, scratch, &rec, &size) == PERFRING_CORRUPT);
	/* Even when head is within a ring of tail: the record is larger than the ring. */
	ASSERT(perfring_next(ring, 255, 128, 128 + 256, scratch, &rec, &size) == PERFRING_CORRUPT);
	/* A head more than a ring ahead is broken whatever the record says. */
	h.size = 64;
	memcpy(ring + 128, &h, sizeof(h));
	ASSERT(perfring_next(ring, 255, 128, 128 + 257, scratch, &rec, &size) == PERFRING_CORRUPT);
	/* The largest record the ring can hold, wrapping, is still read. */
	h.size = 256;
	memcpy(ring + 128, &h, sizeof(h));
	ASSERT(perfring_next(ring, 255, 128, 128 + 256, scratch, &rec, &size) == PERFRING_RECORD);
	ASSERT(size == 256 && rec == scratch);
}

static void test_truncated_sample(void) {
	/* A sample whose raw size claims more than the record holds is malformed, not read past. */
	uint8_t rec[24] = {};
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .size = 24 };
	uint32_t raw = 100;
	PerfRecordView v;

	memcpy(rec, &h, sizeof(h));
	memcpy(rec + 8, &raw, 4);
	decode_perf_record(rec, sizeof(rec), &v);
	ASSERT(v.kind == PERF_REC_MALFORMED);
}

int main(void) {
	test_walk_with_wrap();
	test_corruption();
	test_larger_than_ring();
	test_truncated_sample();
	if (failures)
		fprintf(stderr, "%d assertion(s) failed\n", failures);
	return failures ? 1 : 0;
}
