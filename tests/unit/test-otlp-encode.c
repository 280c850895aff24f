/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's event fields and OTLP encoder (client/export/fields.c, otlp/otlp-encode.c):
 * for every record type, the fields say exactly what the socket's JSON line says (encode_json()
 * is the oracle, compared as parsed JSON); the LogRecords written in protobuf's wire format
 * unpack with protobuf-c's generated decoder into the same body, attributes and envelope; gzip
 * inflates to the same request; OTLP/JSON carries the same body. */

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <zlib.h>

#include "decode/decode.h"
#include "export/fields.h"
#include "export/otlp/otlp-encode.h"
#include "hub/encode.h"
#include "logs_service.pb-c.h"
#include "macro.h"
#include "unit-test.h"

typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest Request;

static struct perfrelay_hdr make_hdr(uint16_t type, uint16_t size) {
	return (struct perfrelay_hdr){
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = type,
		.size = size,
		.producer = 17,
		.cpu = 1,
		.seq = 0xfedcba9876543210ull, /* > INT64_MAX */
		.ts_ns = 1234567890123456789ull,
	};
}

/* Records of every type, back to back: [u32 size][record]... */
static uint8_t records[64 * 1024];
static size_t records_len;

static void add_record(const void *rec, size_t size) {
	uint32_t n = (uint32_t) size;

	memcpy(records + records_len, &n, 4);
	memcpy(records + records_len + 4, rec, size);
	records_len += 4 + size;
}

static void make_records(void) {
	struct perfrelay_exec x = { .hdr = make_hdr(PERFRELAY_TYPE_EXEC, sizeof(x)) };
	struct perfrelay_exit e = { .hdr = make_hdr(PERFRELAY_TYPE_EXIT, sizeof(e)) };
	struct perfrelay_fork f = { .hdr = make_hdr(PERFRELAY_TYPE_FORK, sizeof(f)) };
	struct perfrelay_open o = { .hdr = make_hdr(PERFRELAY_TYPE_OPEN, sizeof(o)) };
	struct perfrelay_connect c4 = { .hdr = make_hdr(PERFRELAY_TYPE_CONNECT, sizeof(c4)) }, c6, cu;
	struct perfrelay_unit_counters u = { .hdr = make_hdr(PERFRELAY_TYPE_COUNTERS, sizeof(u)) };
	struct perfrelay_bench b = { .hdr = make_hdr(PERFRELAY_TYPE_BENCH, sizeof(b)) };
	struct {
		struct perfrelay_packet p;
		uint8_t data[5];
	} __attribute__((packed))
	pk = { .p = { .hdr = make_hdr(PERFRELAY_TYPE_PACKET, sizeof(struct perfrelay_packet)) } };
	struct {
		struct perfrelay_hdr h;
		uint8_t payload[7];
	} __attribute__((packed))
	unk = { .h = make_hdr(0x8001, sizeof(unk)), .payload = { 0, 1, 2, 0xff, 'a', 0, 9 } };
	static const char argv[] = "ls\0-l\0\xff\xfe bad\0";

	x.pid = 4242;
	x.ppid = 1;
	x.uid = 1000;
	x.gid = 100;
	x.cgroup_id = 0xdeadbeefcafef00dull;
	x.argc = 3;
	x.argv_len = sizeof(argv) - 1;
	memcpy(x.argv, argv, sizeof(argv));
	strcpy(x.comm, "l\xc3\xa9s\x80");        /* é, then an invalid byte */
	strcpy(x.filename, "/usr/bin/\"ls\"\n"); /* escaped in JSON, bytes in protobuf */
	x.ids.exec_id = 0x0123456789abcdefull;
	x.ids.parent_exec_id = 0xfedcba9876543210ull;
	x.n_ancestors = 2;
	x.ancestors[0] = (struct perfrelay_ancestor){ .exec_id = 0xfedcba9876543210ull,
						      .pid = 4000,
						      .comm = "sh" };
	x.ancestors[1] = (struct perfrelay_ancestor){ .exec_id = 1, .pid = 1, .comm = "systemd" };
	x.exe_dev = 8u << 20 | 17;
	x.exe_ino = 131090;
	x.prev_exec_id = 0x0123456789abcdefull;
	strcpy(x.exe, "/usr/bin/ls");
	strcpy(x.cwd, "/tmp");
	add_record(&x, sizeof(x));

	e.pid = 777;
	e.exit_code = -3;
	e.signal = 9;
	e.runtime_ns = 123456789012ull;
	strcpy(e.comm, "sleep");
	e.counters.mask = 0x5;
	e.counters.scaled = 0x1;
	e.counters.value[0] = 11;
	e.counters.value[2] = UINT64_MAX;
	e.ids.exec_id = 42;
	add_record(&e, sizeof(e));

	f.parent_pid = 100;
	f.child_pid = 102;
	f.child_tgid = 101;
	strcpy(f.comm, "bash");
	add_record(&f, sizeof(f));

	o.pid = 555;
	o.flags = (int32_t) 0x80000000u;
	o.result = -2;
	strcpy(o.comm, "cat");
	strcpy(o.path, "/etc/passwd");
	add_record(&o, sizeof(o));

	c4.pid = 999;
	c4.family = AF_INET;
	c4.port = 443;
	memcpy(c4.addr, (uint8_t[]){ 192, 168, 0, 42 }, 4);
	strcpy(c4.comm, "curl");
	c6 = c4;
	c6.family = AF_INET6;
	memcpy(c6.addr, (uint8_t[]){ 0x20, 0x01, 0x0d, 0xb8, [15] = 1 }, 16);
	cu = c4;
	cu.family = AF_UNIX;
	add_record(&c4, sizeof(c4));
	add_record(&c6, sizeof(c6));
	add_record(&cu, sizeof(cu));

	u.cgroup_id = 77;
	u.interval_ns = 1000000000;
	u.counters.mask = 0x3;
	u.counters.value[0] = 5;
	u.counters.value[1] = 6;
	add_record(&u, sizeof(u));

	b.call = 99;
	add_record(&b, sizeof(b));

	pk.p.cgroup_id = 3;
	pk.p.capture_id = 2;
	pk.p.ifindex = 1;
	pk.p.orig_len = 5;
	pk.p.cap_len = 5;
	pk.p.protocol = 0x0800;
	pk.p.direction = PERFRELAY_PACKET_EGRESS;
	pk.p.link = PERFRELAY_PACKET_LINK_ETHER;
	memcpy(pk.data, "\x45\x00\xff\x01\x02", 5);
	add_record(&pk, sizeof(pk));

	add_record(&unk, sizeof(unk));
}

/* The record at *pos, or false at the end. */
static bool next_record(size_t *pos, const uint8_t **rec, size_t *size) {
	uint32_t n;

	if (*pos >= records_len)
		return false;
	memcpy(&n, records + *pos, 4);
	*rec = records + *pos + 4;
	*size = n;
	*pos += 4 + n;
	return true;
}

static json_object *parse(const char *s, size_t n) {
	json_tokener *tok = json_tokener_new();
	json_object *o = json_tokener_parse_ex(tok, s, (int) n);

	json_tokener_free(tok);
	return o;
}

/* The socket's JSON line of the record, parsed. */
static json_object *oracle(const uint8_t *rec, size_t size, const char *unit) {
	static char line[ENCODE_JSON_MAX];
	DecodedEvent ev;
	ssize_t n;

	ASSERT(export_decode(rec, size, &ev) == 0);
	n = encode_json(&ev, unit, line, sizeof(line));
	ASSERT(n > 0);
	return parse(line, (size_t) n);
}

/* An AnyValue as JSON, the way a collector's reader turns it back: int64 bits read unsigned when
 * the JSON line's number is (oracle gives the sign), bytes as base64. */
static json_object *any_json(const AnyValue *v, json_object *like) {
	switch (v->value_case) {
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE:
		return json_object_new_string(v->string_value);
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE:
		return json_object_new_boolean(v->bool_value);
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE:
		if (v->int_value < 0 && like && json_object_get_int64(like) >= 0)
			return json_object_new_uint64((uint64_t) v->int_value);
		return json_object_new_int64(v->int_value);
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BYTES_VALUE: {
		char text[256];
		char *end = encode_base64(text, v->bytes_value.data, v->bytes_value.len);

		return json_object_new_string_len(text + 1, (int) (end - text - 2));
	}
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_ARRAY_VALUE: {
		json_object *a = json_object_new_array();

		for (size_t i = 0; i < v->array_value->n_values; i++)
			json_object_array_add(
				a,
				any_json(
					v->array_value->values[i],
					like ? json_object_array_get_idx(like, i) : NULL));
		return a;
	}
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_KVLIST_VALUE: {
		json_object *o = json_object_new_object();

		for (size_t i = 0; i < v->kvlist_value->n_values; i++) {
			json_object *l = NULL;
			const KeyValue *kv = v->kvlist_value->values[i];

			if (like)
				json_object_object_get_ex(like, kv->key, &l);
			json_object_object_add(o, kv->key, any_json(kv->value, l));
		}
		return o;
	}
	default:
		return json_object_new_null();
	}
}

static const char *attr(const Opentelemetry__Proto__Logs__V1__LogRecord *lr, const char *key, int64_t *ret_int) {
	for (size_t i = 0; i < lr->n_attributes; i++)
		if (streq(lr->attributes[i]->key, key)) {
			if (ret_int)
				*ret_int = lr->attributes[i]->value->int_value;
			return lr->attributes[i]->value->value_case ==
					OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE ?
				lr->attributes[i]->value->string_value :
				"";
		}
	return NULL;
}

/* The fields of every type, written back as a JSON line, are the socket's line. */
static void test_fields_are_the_json_line(void) {
	ExportFields f = {};
	const uint8_t *rec;
	size_t size, pos = 0;
	unsigned n = 0;

	while (next_record(&pos, &rec, &size)) {
		char line[ENCODE_JSON_MAX];
		json_object *want = oracle(rec, size, n % 2 ? "sshd.service" : NULL), *got;
		ssize_t k;

		ASSERT(export_fields_walk(&f, rec, size, n % 2 ? "sshd.service" : NULL, NULL) == 0);
		k = export_fields_json(&f, line, sizeof(line));
		ASSERT(k > 0);
		got = k > 0 ? parse(line, (size_t) k) : NULL;
		ASSERT(got && json_object_equal(got, want));
		if (!got || !json_object_equal(got, want))
			fprintf(stderr, "want %s\n got %.*s\n", json_object_to_json_string(want), (int) k, line);
		ASSERT(f.unit ? streq(f.unit, "sshd.service") : n % 2 == 0);
		json_object_put(got);
		json_object_put(want);
		n++;
	}
	ASSERT(n == 11);
	/* A record the decoder refuses is not walked. */
	ASSERT(export_fields_walk(&f, records + 4, 10, NULL, NULL) == -EBADMSG);
	export_fields_done(&f);
}

static OtlpResource res = { .host = "h\xc3\xa9st", .boot_id = "0123-abcd", .version = "9.9" };

/* Every record as one request: unpacked by protobuf-c, each LogRecord says what the line says. */
static void check_request(const uint8_t *data, size_t len, unsigned n_records) {
	Request *req = opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
		NULL, len, data);
	const uint8_t *rec;
	size_t size, pos = 0;
	unsigned n = 0;

	ASSERT(req && req->n_resource_logs == 1);
	if (!req || req->n_resource_logs != 1)
		return;
	{
		const Opentelemetry__Proto__Logs__V1__ResourceLogs *rl = req->resource_logs[0];
		const Opentelemetry__Proto__Logs__V1__ScopeLogs *sl;

		ASSERT(rl->resource && rl->resource->n_attributes == 4);
		ASSERT(streq(rl->resource->attributes[0]->key, "service.name"));
		ASSERT(streq(rl->resource->attributes[2]->value->string_value, res.host));
		ASSERT(streq(rl->resource->attributes[3]->value->string_value, res.boot_id));
		ASSERT(rl->n_scope_logs == 1);
		sl = rl->scope_logs[0];
		ASSERT(streq(sl->scope->name, "perfrelay-export") && streq(sl->scope->version, "9.9"));
		ASSERT(sl->n_log_records == n_records);
		while (n < sl->n_log_records && next_record(&pos, &rec, &size)) {
			const Opentelemetry__Proto__Logs__V1__LogRecord *lr = sl->log_records[n];
			json_object *want = oracle(rec, size, n % 2 ? "sshd.service" : NULL), *got, *type,
				    *pid;
			int64_t pid_attr = -1;

			got = any_json(lr->body, want);
			ASSERT(json_object_equal(got, want));
			if (!json_object_equal(got, want))
				fprintf(stderr,
					"want %s\n got %s\n",
					json_object_to_json_string(want),
					json_object_to_json_string(got));
			ASSERT(lr->time_unix_nano == 1000 + n && lr->observed_time_unix_nano == 2000 + n);
			ASSERT(lr->severity_number == 9 && streq(lr->severity_text, "INFO"));
			json_object_object_get_ex(want, "type", &type);
			ASSERT(streq(attr(lr, "perfrelay.type", NULL) ?: "-", json_object_get_string(type)));
			if (json_object_object_get_ex(want, "pid", &pid) && n != 5 /* counters: no pid */) {
				ASSERT(attr(lr, "process.pid", &pid_attr) != NULL);
				ASSERT(pid_attr == json_object_get_int64(pid));
			}
			ASSERT(n % 2 ? streq(attr(lr, "systemd.unit", NULL) ?: "-", "sshd.service") :
				       attr(lr, "systemd.unit", NULL) == NULL);
			json_object_put(got);
			json_object_put(want);
			n++;
		}
	}
	ASSERT(n == n_records);
	opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(req, NULL);
}

static size_t fill(OtlpBatch *b, ExportFields *f) {
	const uint8_t *rec;
	size_t size, pos = 0, n = 0;

	while (next_record(&pos, &rec, &size)) {
		ASSERT(export_fields_walk(f, rec, size, n % 2 ? "sshd.service" : NULL, NULL) == 0);
		ASSERT(otlp_batch_add(b, f, 1000 + n, 2000 + n) == 0);
		n++;
	}
	return n;
}

static void test_protobuf(void) {
	ExportFields f = {};
	OtlpBatch *b, *z;
	uint8_t *data, *zdata, *inflated;
	size_t len, zlen, n;
	uLongf ilen;

	ASSERT(otlp_batch_new(OTLP_PROTOCOL_PROTOBUF, OTLP_COMPRESSION_NONE, &res, &b) == 0);
	ASSERT(otlp_batch_seal(b, &data, &len, NULL) == -EINVAL); /* empty */
	/* Twice: a sealed batch starts over. */
	for (unsigned round = 0; round < 2; round++) {
		n = fill(b, &f);
		ASSERT(otlp_batch_count(b) == n);
		ASSERT(otlp_batch_seal(b, &data, &len, NULL) == 0);
		ASSERT(otlp_batch_count(b) == 0);
		check_request(data, len, (unsigned) n);
		if (round == 0)
			free(data);
	}

	/* gzip: the same request, deflated. */
	ASSERT(otlp_batch_new(OTLP_PROTOCOL_PROTOBUF, OTLP_COMPRESSION_GZIP, &res, &z) == 0);
	fill(z, &f);
	ASSERT(otlp_batch_seal(z, &zdata, &zlen, NULL) == 0);
	ASSERT(zlen > 18 && zdata[0] == 0x1f && zdata[1] == 0x8b); /* RFC 1952's magic */
	{
		z_stream s = { .next_in = zdata, .avail_in = (uInt) zlen };

		ilen = len + 1;
		inflated = malloc(ilen);
		ASSERT(inflateInit2(&s, 15 + 16) == Z_OK);
		s.next_out = inflated;
		s.avail_out = (uInt) ilen;
		ASSERT(inflate(&s, Z_FINISH) == Z_STREAM_END);
		ASSERT(s.total_out == len && memcmp(inflated, data, len) == 0);
		inflateEnd(&s);
	}
	free(inflated);
	free(zdata);
	free(data);
	otlp_batch_free(z);
	otlp_batch_free(b);
	export_fields_done(&f);
}

static void test_json(void) {
	ExportFields f = {};
	OtlpBatch *b;
	uint8_t *data;
	size_t len, n;
	json_object *root, *lrs, *body, *values, *x;

	ASSERT(otlp_batch_new(OTLP_PROTOCOL_JSON, OTLP_COMPRESSION_NONE, &res, &b) == 0);
	n = fill(b, &f);
	ASSERT(otlp_batch_seal(b, &data, &len, NULL) == 0);
	root = parse((const char *) data, len);
	ASSERT(root != NULL);
	json_object_object_get_ex(
		json_object_array_get_idx(
			json_object_object_get(
				json_object_array_get_idx(json_object_object_get(root, "resourceLogs"), 0),
				"scopeLogs"),
			0),
		"logRecords",
		&lrs);
	ASSERT(json_object_array_length(lrs) == n);
	/* The exec's body: its "pid" as an OTLP/JSON intValue (a string), argv an arrayValue. */
	body = json_object_object_get(json_object_array_get_idx(lrs, 0), "body");
	values = json_object_object_get(json_object_object_get(body, "kvlistValue"), "values");
	ASSERT(values && json_object_array_length(values) > 10);
	x = json_object_array_get_idx(values, 5); /* type ts cpu seq producer pid */
	ASSERT(streq(json_object_get_string(json_object_object_get(x, "key")), "pid"));
	ASSERT(streq(
		json_object_get_string(json_object_object_get(json_object_object_get(x, "value"), "intValue")),
		"4242"));
	ASSERT(
		streq(json_object_get_string(
			      json_object_object_get(json_object_array_get_idx(lrs, 0), "timeUnixNano")),
		      "1000"));
	json_object_put(root);
	free(data);
	otlp_batch_free(b);
	export_fields_done(&f);
}

int main(void) {
	make_records();
	test_fields_are_the_json_line();
	test_protobuf();
	test_json();
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	return failures ? 1 : 0;
}
