/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Differential fuzzing of perfrelay-export's event fields and OTLP encoder
 * (client/export/fields.c, otlp/otlp-encode.c): records of every type filled with fuzz bytes
 * (and raw fuzz bytes as a record) are walked; the fields written back as a JSON line must be
 * the socket's line (encode_json(), compared as parsed JSON); the LogRecord written in protobuf's
 * wire format must unpack with protobuf-c's generated decoder, as one record with the line's
 * number of body fields, gzip'd and not. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "json-util.h"

#include "decode/decode.h"
#include "export/fields.h"
#include "export/otlp/otlp-encode.h"
#include "fuzz-record.h"
#include "hub/encode.h"
#include "logs_service.pb-c.h"

#define CHECK(x)                                                                \
	do {                                                                    \
		if (!(x)) {                                                     \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #x); \
			abort();                                                \
		}                                                               \
	} while (0)

/* libperfrelay's schema lookups: no client here, so no third-party schema. */
const char *perfrelay_record_type_name(const perfrelay_client *c, uint16_t type) {
	return NULL;
}
const char *perfrelay_record_producer_name(const perfrelay_client *c, uint16_t type) {
	return NULL;
}
int perfrelay_record_field(
	const perfrelay_client *c, const struct perfrelay_hdr *hdr, unsigned *iter, struct perfrelay_field *f) {
	return -ENOENT;
}

static char line[ENCODE_JSON_MAX], mine[ENCODE_JSON_MAX];
static ExportFields fields;

static json_object *parse(const char *s, size_t n) {
	json_tokener *tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
	json_object *o;

	json_tokener_set_flags(tok, json_strict_flags());
	o = json_tokener_parse_ex(tok, s, (int) n);
	json_tokener_free(tok);
	return o;
}

static void check_record(const uint8_t *rec, size_t size) {
	static const OtlpResource res = { .host = "fuzz", .boot_id = "b", .version = "1" };
	DecodedEvent ev;
	OtlpBatch *b;
	uint8_t *req;
	size_t len;
	ssize_t n, m;

	if (export_fields_walk(&fields, rec, size, "u.service", NULL) < 0)
		return;
	CHECK(export_decode(rec, size, &ev) == 0);
	n = encode_json(&ev, "u.service", line, sizeof(line));
	m = export_fields_json(&fields, mine, sizeof(mine));
	CHECK(n > 0 && m > 0);
	{
		json_object *a = parse(line, (size_t) n), *c = parse(mine, (size_t) m);

		CHECK(a && c && json_object_equal(a, c));
		json_object_put(a);
		json_object_put(c);
	}
	for (int gz = 0; gz < 2; gz++) {
		Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest *r;
		const Opentelemetry__Proto__Logs__V1__LogRecord *lr;
		size_t top = 0, depth = 0;

		CHECK(otlp_batch_new(
			      OTLP_PROTOCOL_PROTOBUF,
			      gz ? OTLP_COMPRESSION_GZIP : OTLP_COMPRESSION_NONE,
			      &res,
			      &b) == 0);
		CHECK(otlp_batch_add(b, &fields, 1, 2) == 0);
		CHECK(otlp_batch_seal(b, &req, &len, NULL) == 0);
		otlp_batch_free(b);
		if (gz) {
			free(req); /* inflating is zlib's business, tested by test-otlp-encode */
			continue;
		}
		r = opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
			NULL, len, req);
		CHECK(r && r->n_resource_logs == 1 && r->resource_logs[0]->n_scope_logs == 1 &&
		      r->resource_logs[0]->scope_logs[0]->n_log_records == 1);
		lr = r->resource_logs[0]->scope_logs[0]->log_records[0];
		for (size_t i = 0; i < fields.n; i++) {
			ExportFieldKind kind = fields.f[i].kind;

			if (kind == EXPORT_FIELD_END) {
				depth--;
				continue;
			}
			top += depth == 0;
			depth += kind == EXPORT_FIELD_OBJECT || kind == EXPORT_FIELD_ARRAY;
		}
		CHECK(lr->body && lr->body->kvlist_value && lr->body->kvlist_value->n_values == top);
		CHECK(lr->time_unix_nano == 1 && lr->observed_time_unix_nano == 2);
		opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(r, NULL);
		free(req);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	static const uint16_t types[] = { PERFRELAY_TYPE_EXEC,    PERFRELAY_TYPE_EXIT,
					  PERFRELAY_TYPE_FORK,    PERFRELAY_TYPE_OPEN,
					  PERFRELAY_TYPE_CONNECT, PERFRELAY_TYPE_COUNTERS,
					  PERFRELAY_TYPE_BENCH,   0x9000 };
	static const uint16_t sizes[] = {
		sizeof(struct perfrelay_exec),    sizeof(struct perfrelay_exit),
		sizeof(struct perfrelay_fork),    sizeof(struct perfrelay_open),
		sizeof(struct perfrelay_connect), sizeof(struct perfrelay_unit_counters),
		sizeof(struct perfrelay_bench),   0
	};
	static _Alignas(8) uint8_t rec[2048];
	struct perfrelay_hdr h = { .magic = PERFRELAY_MAGIC, .version = PERFRELAY_VERSION, .producer = 300 };
	unsigned k;

	if (size < 1)
		return 0;
	/* Raw bytes as they are: most are refused by the decoder, which is the point. */
	check_record(data, size);
	k = data[0] % 8;
	data++;
	size--;
	h.type = types[k];
	h.size = sizes[k] ? sizes[k] : (uint16_t) (sizeof(h) + (size < 1000 ? size : 1000));
	memset(rec, 0, sizeof(rec));
	memcpy(rec + sizeof(h), data, size < (size_t) h.size - sizeof(h) ? size : (size_t) h.size - sizeof(h));
	memcpy(rec, &h, sizeof(h));
	fuzz_record_make_valid(rec, h.type);
	check_record(rec, h.size);
	return 0;
}
