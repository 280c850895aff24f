/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the consumer side of a perf ring: arbitrary bytes laid into a ring of fuzzed size and
 * start offset (so records wrap its end), walked, decoded as perf records and perfrelay records,
 * and every valid event encoded to JSON, which must parse with json-c. A packet's bytes appended
 * after its record (BPF_F_CTXLEN_MASK) must be accounted for by its cap_len exactly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "json-util.h"

#include "decode/decode.h"
#include "hub/encode.h"
#include "kernel/perfring.h"

static _Alignas(8) uint8_t scratch[PERFRING_RECORD_MAX + 8];
static char line[ENCODE_JSON_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	uint64_t ring_size, mask, start, tail, head;
	uint8_t *ring;

	if (size < 3)
		return 0;
	ring_size = 64u << (data[0] % 11); /* 64 B .. 64 KiB */
	mask = ring_size - 1;
	start = ((uint64_t) data[1] << 8 | data[2]) * 8; /* records are 8-aligned, as in the kernel */
	data += 3;
	size -= 3;
	if (size > ring_size)
		size = ring_size; /* the kernel never publishes more than the ring holds */

	ring = aligned_alloc(8, ring_size);
	if (!ring)
		return 0;
	memset(ring, 0xa5, ring_size);
	for (size_t i = 0; i < size; i++)
		ring[(start + i) & mask] = data[i];

	tail = start;
	head = start + size;
	for (;;) {
		const uint8_t *rec;
		uint32_t rec_size;
		PerfRecordView v;
		DecodedEvent ev;

		if (perfring_next(ring, mask, tail, head, scratch, &rec, &rec_size) != PERFRING_RECORD)
			break;
		if (rec_size > head - tail)
			abort(); /* the walker never returns a record beyond what was published */
		decode_perf_record(rec, rec_size, &v);
		if (v.kind == PERF_REC_SAMPLE && decode_event(v.raw, v.raw_size, &ev) == DECODE_OK) {
			ssize_t n = encode_json(&ev, NULL, line, sizeof(line));
			struct json_tokener *tok;
			struct json_object *o;

			/* A record (a packet's appended bytes included) never reaches past its sample,
			 * and what is left after it is the kernel's padding only. */
			if (ev.record_size < ev.hdr.size || ev.record_size > v.raw_size ||
			    v.raw_size - ev.record_size >= 8)
				abort();
			if (ev.hdr.type == PERFRELAY_TYPE_PACKET &&
			    (ev.record_size - ev.hdr.size > PERFRELAY_CAPTURE_BYTES_MAX ||
			     memcmp(ev.record, v.raw, ev.record_size) != 0))
				abort();

			if (n <= 0 || line[n - 1] != '\n')
				abort();
			tok = json_tokener_new();
			json_tokener_set_flags(tok, json_strict_flags());
			o = json_tokener_parse_ex(tok, line, (int) n - 1);
			if (!o || json_tokener_get_error(tok) != json_tokener_success ||
			    !json_object_is_type(o, json_type_object))
				abort(); /* every line the daemon publishes is one JSON object */
			json_object_put(o);
			json_tokener_free(tok);
		}
		tail += rec_size;
	}
	free(ring);
	return 0;
}
