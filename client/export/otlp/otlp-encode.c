/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* OTLP logs requests: LogRecords written in protobuf's wire format as events come, the envelope
 * by protobuf-c; OTLP/JSON through json-c. */
#include "export/otlp/otlp-encode.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "hub/encode.h"
#include "json-util.h"
#include "logs_service.pb-c.h"
#include "macro.h"

#define SCOPE_NAME "perfrelay-export"

/* The tags this file writes: (field number << 3) | wire type (0 varint, 1 fixed64, 2 bytes),
 * from the OpenTelemetry .proto files in proto/. Every tag fits one byte. */
enum {
	ANY_STRING = 1 << 3 | 2, /* AnyValue.string_value */
	ANY_BOOL = 2 << 3 | 0,
	ANY_INT = 3 << 3 | 0,
	ANY_ARRAY = 5 << 3 | 2,
	ANY_KVLIST = 6 << 3 | 2,
	ANY_BYTES = 7 << 3 | 2,
	KV_KEY = 1 << 3 | 2, /* KeyValue.key */
	KV_VALUE = 2 << 3 | 2,
	VALUES = 1 << 3 | 2,  /* KeyValueList.values and ArrayValue.values */
	LR_TIME = 1 << 3 | 1, /* LogRecord.time_unix_nano */
	LR_SEVERITY = 2 << 3 | 0,
	LR_SEVERITY_TEXT = 3 << 3 | 2,
	LR_BODY = 5 << 3 | 2,
	LR_ATTRIBUTES = 6 << 3 | 2,
	LR_OBSERVED = 11 << 3 | 1,
	SL_SCOPE = 1 << 3 | 2, /* ScopeLogs.scope */
	SL_RECORDS = 2 << 3 | 2,
	RL_RESOURCE = 1 << 3 | 2, /* ResourceLogs.resource */
	RL_SCOPE_LOGS = 2 << 3 | 2,
	REQ_RESOURCE_LOGS = 1 << 3 | 2, /* ExportLogsServiceRequest.resource_logs */
};

#define VARINT_MAX 10u
/* The constant part of a LogRecord: both times (tag + 8), severity 9, "INFO". */
#define LR_FIXED   (2 * (1 + 8) + 2 + 2 + 4)

/* One field's encoded sizes: its AnyValue, a container's content, its key's length. */
typedef struct FieldSize {
	uint32_t any, inner, klen;
} FieldSize;

struct OtlpBatch {
	OtlpProtocol protocol;
	OtlpCompression compression;
	const OtlpResource *res;
	size_t count;

	/* protobuf: the envelope's parts packed once, and the records as written, after room
	 * for the envelope (gap bytes) that seal fills in front of them. */
	uint8_t *resource, *scope;
	size_t resource_len, scope_len, gap;
	uint8_t *buf;
	size_t used, allocated, hint;
	/* Buffers of requests that are done, for the next batches: fresh memory costs a page
	 * fault a page. */
	uint8_t *spare[OTLP_SPARE_MAX];
	size_t spare_size[OTLP_SPARE_MAX], n_spare;
	FieldSize *sizes;
	size_t n_sizes;

	/* json: the LogRecord objects. */
	json_object *records;
};

/* ---- protobuf ---- */

static inline size_t varint_len(uint64_t v) {
	/* floor(log2(v)) * 9 / 64 + 1, as protobuf's own VarintSize64 */
	return ((unsigned) (63 - __builtin_clzll(v | 1)) * 9 + 73) / 64;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
	while (v >= 0x80) {
		*p++ = (uint8_t) (v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t) v;
	return p;
}

static inline uint8_t *put_fixed64(uint8_t *p, uint64_t v) {
	for (unsigned i = 0; i < 8; i++)
		*p++ = (uint8_t) (v >> (8 * i));
	return p;
}

static inline uint8_t *put_len(uint8_t *p, uint8_t tag, const void *s, size_t len) {
	*p++ = tag;
	p = put_varint(p, len);
	memcpy(p, s, len);
	return p + len;
}

static size_t len_field(size_t len) {
	return 1 + varint_len(len) + len;
}

static size_t scalar_any(const ExportField *f) {
	switch (f->kind) {
	case EXPORT_FIELD_UINT:
		return 1 + varint_len(f->u);
	case EXPORT_FIELD_INT:
		/* int64: a negative value takes ten bytes, as protobuf's int64 does */
		return 1 + varint_len((uint64_t) f->i);
	case EXPORT_FIELD_BOOL:
		return 2;
	default:
		return len_field(f->len);
	}
}

/* A KeyValue's size: the key, the value. */
static size_t kv_size(size_t klen, size_t any) {
	return len_field(klen) + len_field(any);
}

/* What a field adds to its container: an array's element (an AnyValue) or an object's member
 * (a KeyValue), with its tag and length. */
static size_t child_size(const FieldSize *s, bool in_array) {
	return len_field(in_array ? s->any : kv_size(s->klen, s->any));
}

/* Every field's sizes, into b->sizes; the body's kvlist content into *ret. */
static int body_sizes(OtlpBatch *b, const ExportFields *f, size_t *ret) {
	size_t acc[OTLP_DEPTH_MAX + 1], open[OTLP_DEPTH_MAX + 1];
	bool array[OTLP_DEPTH_MAX + 1];
	unsigned d = 0;

	if (b->n_sizes < f->n) {
		size_t n = MAX(f->n, (size_t) 64);
		FieldSize *p = realloc(b->sizes, n * sizeof(*p));

		if (!p)
			return -ENOMEM;
		b->sizes = p;
		b->n_sizes = n;
	}
	acc[0] = 0;
	array[0] = false;
	for (size_t i = 0; i < f->n; i++) {
		const ExportField *x = &f->f[i];
		FieldSize *s = &b->sizes[i];

		if (x->kind == EXPORT_FIELD_END) {
			FieldSize *c;

			if (d == 0)
				return -EBADMSG;
			c = &b->sizes[open[d]];
			c->inner = (uint32_t) acc[d];
			c->any = (uint32_t) len_field(acc[d]);
			d--;
			acc[d] += child_size(c, array[d]);
			continue;
		}
		s->klen = array[d] ? 0 : x->klen;
		if (x->kind == EXPORT_FIELD_OBJECT || x->kind == EXPORT_FIELD_ARRAY) {
			if (d == OTLP_DEPTH_MAX)
				return -EBADMSG;
			d++;
			open[d] = i;
			acc[d] = 0;
			array[d] = x->kind == EXPORT_FIELD_ARRAY;
			continue;
		}
		s->any = (uint32_t) scalar_any(x);
		acc[d] += child_size(s, array[d]);
	}
	if (d != 0)
		return -EBADMSG;
	*ret = acc[0];
	return 0;
}

/* The fields as the members of the body's kvlist. */
static uint8_t *put_body_fields(uint8_t *p, const ExportFields *f, const FieldSize *sizes) {
	bool array[OTLP_DEPTH_MAX + 1] = {};
	unsigned d = 0;

	for (size_t i = 0; i < f->n; i++) {
		const ExportField *x = &f->f[i];
		const FieldSize *s = &sizes[i];

		if (x->kind == EXPORT_FIELD_END) {
			d--;
			continue;
		}
		*p++ = VALUES;
		if (array[d])
			p = put_varint(p, s->any);
		else {
			p = put_varint(p, kv_size(s->klen, s->any));
			p = put_len(p, KV_KEY, x->key ?: "", s->klen);
			*p++ = KV_VALUE;
			p = put_varint(p, s->any);
		}
		switch (x->kind) {
		case EXPORT_FIELD_UINT:
			*p++ = ANY_INT;
			p = put_varint(p, x->u); /* above INT64_MAX: the bits, as an int64 reads them */
			break;
		case EXPORT_FIELD_INT:
			*p++ = ANY_INT;
			p = put_varint(p, (uint64_t) x->i);
			break;
		case EXPORT_FIELD_BOOL:
			*p++ = ANY_BOOL;
			*p++ = x->b;
			break;
		case EXPORT_FIELD_STRING:
			p = put_len(p, ANY_STRING, x->s, x->len);
			break;
		case EXPORT_FIELD_BYTES:
			p = put_len(p, ANY_BYTES, x->s, x->len);
			break;
		case EXPORT_FIELD_OBJECT:
		case EXPORT_FIELD_ARRAY:
			*p++ = x->kind == EXPORT_FIELD_OBJECT ? ANY_KVLIST : ANY_ARRAY;
			p = put_varint(p, s->inner);
			array[++d] = x->kind == EXPORT_FIELD_ARRAY;
			break;
		case EXPORT_FIELD_END:
			break;
		}
	}
	return p;
}

/* The attributes collectors filter on: perfrelay.type, process.pid, systemd.unit. */
#define ATTR_TYPE "perfrelay.type"
#define ATTR_PID  "process.pid"
#define ATTR_UNIT "systemd.unit"

/* A LogRecord attribute whose AnyValue takes `any` bytes: its size, all told. */
static size_t attr_size(const char *key, size_t any) {
	return len_field(kv_size(strlen(key), any));
}

/* A LogRecord attribute's tag and length, key, and its value's tag and length: the AnyValue of
 * `any` bytes follows. */
static uint8_t *put_attr_head(uint8_t *p, const char *key, size_t any) {
	size_t klen = strlen(key);

	*p++ = LR_ATTRIBUTES;
	p = put_varint(p, kv_size(klen, any));
	p = put_len(p, KV_KEY, key, klen);
	*p++ = KV_VALUE;
	return put_varint(p, any);
}

static uint8_t *put_attr_string(uint8_t *p, const char *key, const char *s) {
	size_t len = strlen(s);

	p = put_attr_head(p, key, len_field(len));
	return put_len(p, ANY_STRING, s, len);
}

static int buf_reserve(OtlpBatch *b, size_t n) {
	size_t want;
	uint8_t *p;

	if (b->used <= b->allocated && b->allocated - b->used >= n)
		return 0;
	want = MAX(MAX(b->allocated * 2, b->used + n), b->hint);
	p = realloc(b->buf, want);
	if (!p)
		return -ENOMEM;
	b->buf = p;
	b->allocated = want;
	return 0;
}

static int add_protobuf(OtlpBatch *b, const ExportFields *f, uint64_t time_ns, uint64_t observed_ns) {
	size_t inner, body, lr, pid_any = 1 + varint_len(f->pid);
	uint8_t *p;
	int r;

	if (!b->buf) {
		/* A seal that could not get the next buffer: the room for the envelope first. */
		b->used = 0;
		r = buf_reserve(b, b->gap);
		if (r < 0)
			return r;
		b->used = b->gap;
	}
	r = body_sizes(b, f, &inner);
	if (r < 0)
		return r;
	body = len_field(inner);
	lr = LR_FIXED + len_field(body) + attr_size(ATTR_TYPE, len_field(strlen(f->type)));
	if (f->has_pid)
		lr += attr_size(ATTR_PID, pid_any);
	if (f->unit)
		lr += attr_size(ATTR_UNIT, len_field(strlen(f->unit)));
	r = buf_reserve(b, 1 + VARINT_MAX + lr);
	if (r < 0)
		return r;
	p = b->buf + b->used;
	*p++ = SL_RECORDS;
	p = put_varint(p, lr);
	*p++ = LR_TIME;
	p = put_fixed64(p, time_ns);
	*p++ = LR_SEVERITY;
	*p++ = OPENTELEMETRY__PROTO__LOGS__V1__SEVERITY_NUMBER__SEVERITY_NUMBER_INFO;
	p = put_len(p, LR_SEVERITY_TEXT, "INFO", 4);
	*p++ = LR_BODY;
	p = put_varint(p, body);
	*p++ = ANY_KVLIST;
	p = put_varint(p, inner);
	p = put_body_fields(p, f, b->sizes);
	p = put_attr_string(p, ATTR_TYPE, f->type);
	if (f->has_pid) {
		p = put_attr_head(p, ATTR_PID, pid_any);
		*p++ = ANY_INT;
		p = put_varint(p, f->pid);
	}
	if (f->unit)
		p = put_attr_string(p, ATTR_UNIT, f->unit);
	*p++ = LR_OBSERVED;
	p = put_fixed64(p, observed_ns);
	b->used = (size_t) (p - b->buf);
	return 0;
}

/* The envelope in front of the records (which start at b->gap): request, resource logs,
 * resource, scope logs, scope. Returns where the request starts. */
static uint8_t *put_envelope(OtlpBatch *b) {
	size_t records = b->used - b->gap;
	size_t sl = len_field(b->scope_len) + records;
	size_t rl = len_field(b->resource_len) + len_field(sl);
	size_t head = len_field(rl) - rl + len_field(b->resource_len) + 1 + varint_len(sl) +
		len_field(b->scope_len);
	uint8_t *start = b->buf + b->gap - head, *p = start;

	*p++ = REQ_RESOURCE_LOGS;
	p = put_varint(p, rl);
	p = put_len(p, RL_RESOURCE, b->resource, b->resource_len);
	*p++ = RL_SCOPE_LOGS;
	p = put_varint(p, sl);
	p = put_len(p, SL_SCOPE, b->scope, b->scope_len);
	assert(p == b->buf + b->gap);
	return start;
}

typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;

/* The resource and the scope, packed once. */
static int pack_envelope(OtlpBatch *b) {
	const OtlpResource *res = b->res;
	const char *keys[] = { "service.name", "service.version", "host.name", "perfrelay.boot_id" };
	const char *values[] = { "perfrelay", res->version, res->host, res->boot_id };
	AnyValue any[ELEMENTSOF(keys)];
	KeyValue kv[ELEMENTSOF(keys)], *kvs[ELEMENTSOF(keys)];
	Opentelemetry__Proto__Resource__V1__Resource resource =
		OPENTELEMETRY__PROTO__RESOURCE__V1__RESOURCE__INIT;
	Opentelemetry__Proto__Common__V1__InstrumentationScope scope =
		OPENTELEMETRY__PROTO__COMMON__V1__INSTRUMENTATION_SCOPE__INIT;

	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		any[i] = (AnyValue) OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT;
		any[i].value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
		any[i].string_value = (char *) values[i];
		kv[i] = (KeyValue) OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE__INIT;
		kv[i].key = (char *) keys[i];
		kv[i].value = &any[i];
		kvs[i] = &kv[i];
	}
	resource.attributes = kvs;
	resource.n_attributes = ELEMENTSOF(keys);
	scope.name = (char *) SCOPE_NAME;
	scope.version = (char *) res->version;
	b->resource_len = opentelemetry__proto__resource__v1__resource__get_packed_size(&resource);
	b->scope_len = opentelemetry__proto__common__v1__instrumentation_scope__get_packed_size(&scope);
	b->resource = malloc(b->resource_len ?: 1);
	b->scope = malloc(b->scope_len ?: 1);
	if (!b->resource || !b->scope)
		return -ENOMEM;
	opentelemetry__proto__resource__v1__resource__pack(&resource, b->resource);
	opentelemetry__proto__common__v1__instrumentation_scope__pack(&scope, b->scope);
	/* The envelope's most: four tags and lengths, the two parts. */
	b->gap = 4 * (1 + VARINT_MAX) + b->resource_len + b->scope_len;
	return 0;
}

/* ---- OTLP/JSON: the protobuf JSON mapping with OTLP's rules (camelCase names, 64-bit
 * integers as decimal strings, enums as numbers, bytes in base64) ---- */

static json_object *json_wrap(const char *kind, json_object *v) {
	json_object *o = json_object_new_object();

	if (!o || !v || json_object_object_add(o, kind, v) < 0) {
		json_object_put(o);
		json_object_put(v);
		return NULL;
	}
	return o;
}

static json_object *json_kv(const char *key, json_object *value) {
	json_object *kv = json_object_new_object();

	if (!kv || !value || json_object_object_add(kv, "key", json_object_new_string(key)) < 0 ||
	    json_object_object_add(kv, "value", value) < 0) {
		json_object_put(kv);
		json_object_put(value);
		return NULL;
	}
	return kv;
}

static json_object *json_int(int64_t v) {
	char num[24];

	snprintf(num, sizeof(num), "%" PRId64, v);
	return json_wrap("intValue", json_object_new_string(num));
}

static json_object *json_base64(const char *s, size_t len) {
	size_t n = 4 * ((len + 2) / 3);
	char *text = malloc(n + 2); /* encode_base64() writes it quoted */
	json_object *o;

	if (!text)
		return NULL;
	encode_base64(text, (const uint8_t *) s, len);
	o = json_object_new_string_len(text + 1, (int) n);
	free(text);
	return o;
}

/* The AnyValue of field *i (a container with its members), leaving *i at its last field. */
static json_object *json_any(const ExportFields *f, size_t *i, unsigned depth) {
	const ExportField *x = &f->f[*i];
	json_object *values;

	switch (x->kind) {
	case EXPORT_FIELD_UINT:
		return json_int((int64_t) x->u);
	case EXPORT_FIELD_INT:
		return json_int(x->i);
	case EXPORT_FIELD_BOOL:
		return json_wrap("boolValue", json_object_new_boolean(x->b));
	case EXPORT_FIELD_STRING:
		return json_wrap("stringValue", json_object_new_string_len(x->s, (int) x->len));
	case EXPORT_FIELD_BYTES:
		return json_wrap("bytesValue", json_base64(x->s, x->len));
	case EXPORT_FIELD_OBJECT:
	case EXPORT_FIELD_ARRAY:
		if (depth >= OTLP_DEPTH_MAX)
			return NULL;
		values = json_object_new_array();
		for ((*i)++; values && *i < f->n && f->f[*i].kind != EXPORT_FIELD_END; (*i)++) {
			const char *key = f->f[*i].key ?: "";
			json_object *v = json_any(f, i, depth + 1);

			if (v && x->kind == EXPORT_FIELD_OBJECT)
				v = json_kv(key, v);
			if (!v || json_object_array_add(values, v) < 0) {
				json_object_put(v);
				json_object_put(values);
				return NULL;
			}
		}
		return json_wrap(
			x->kind == EXPORT_FIELD_OBJECT ? "kvlistValue" : "arrayValue",
			json_wrap("values", values));
	case EXPORT_FIELD_END:
		break;
	}
	return NULL;
}

/* Adds v as o's member k; frees v when it cannot. */
static int add(json_object *o, const char *k, json_object *v) {
	if (!v || json_object_object_add(o, k, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static int push(json_object *arr, json_object *v) {
	if (!v || json_object_array_add(arr, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static json_object *json_u64_string(uint64_t v) {
	char num[24];

	snprintf(num, sizeof(num), "%" PRIu64, v);
	return json_object_new_string(num);
}

static json_object *json_string_kv(const char *key, const char *value) {
	return json_kv(key, json_wrap("stringValue", json_object_new_string(value)));
}

static int add_json(OtlpBatch *b, const ExportFields *f, uint64_t time_ns, uint64_t observed_ns) {
	json_object *lr = json_object_new_object(), *attrs = json_object_new_array(), *body = NULL;
	json_object *members = json_object_new_array();
	int r = -ENOMEM;

	if (!lr || push(b->records, lr) < 0)
		goto fail;
	if (add(lr, "timeUnixNano", json_u64_string(time_ns)) < 0 ||
	    add(lr, "observedTimeUnixNano", json_u64_string(observed_ns)) < 0 ||
	    add(lr, "severityNumber", json_object_new_int(9)) < 0 ||
	    add(lr, "severityText", json_object_new_string("INFO")) < 0)
		goto fail_added;
	for (size_t i = 0; members && i < f->n; i++) {
		const char *key = f->f[i].key ?: "";

		if (push(members, json_kv(key, json_any(f, &i, 1))) < 0)
			goto fail_added;
	}
	body = json_wrap("kvlistValue", json_wrap("values", json_object_get(members)));
	if (add(lr, "body", body) < 0)
		goto fail_added;
	if (push(attrs, json_string_kv(ATTR_TYPE, f->type)) < 0 ||
	    (f->has_pid && push(attrs, json_kv(ATTR_PID, json_int(f->pid))) < 0) ||
	    (f->unit && push(attrs, json_string_kv(ATTR_UNIT, f->unit)) < 0))
		goto fail_added;
	r = add(lr, "attributes", json_object_get(attrs));
	if (r < 0)
		goto fail_added;
	json_object_put(attrs);
	json_object_put(members);
	b->count++;
	return 0;
fail_added:
	/* The record is in b->records: take it out again. */
	json_object_array_del_idx(b->records, json_object_array_length(b->records) - 1, 1);
	lr = NULL;
fail:
	json_object_put(lr);
	json_object_put(attrs);
	json_object_put(members);
	return r;
}

static int seal_json(OtlpBatch *b, uint8_t **ret, size_t *ret_len) {
	_cleanup_(json_object_putp) json_object *root = json_object_new_object();
	const OtlpResource *res = b->res;
	json_object *rls = json_object_new_array(), *rl = json_object_new_object(),
		    *resource = json_object_new_object(), *rattrs = json_object_new_array(),
		    *sls = json_object_new_array(), *sl = json_object_new_object(),
		    *scope = json_object_new_object();
	const char *text;

	/* Each piece is owned by its parent as soon as it is added; what failed to be added is
	 * freed by add()/push(), and everything else with root. */
	if (!root || add(root, "resourceLogs", rls) < 0 || push(rls, rl) < 0 ||
	    add(rl, "resource", resource) < 0 || add(resource, "attributes", rattrs) < 0 ||
	    add(rl, "scopeLogs", sls) < 0 || push(sls, sl) < 0 || add(sl, "scope", scope) < 0 ||
	    add(scope, "name", json_object_new_string(SCOPE_NAME)) < 0 ||
	    add(scope, "version", json_object_new_string(res->version)) < 0 ||
	    push(rattrs, json_string_kv("service.name", "perfrelay")) < 0 ||
	    push(rattrs, json_string_kv("service.version", res->version)) < 0 ||
	    push(rattrs, json_string_kv("host.name", res->host)) < 0 ||
	    push(rattrs, json_string_kv("perfrelay.boot_id", res->boot_id)) < 0 ||
	    add(sl, "logRecords", json_object_get(b->records)) < 0)
		return -ENOMEM;
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text)
		return -ENOMEM;
	*ret_len = strlen(text);
	*ret = (uint8_t *) strdup(text);
	return *ret ? 0 : -ENOMEM;
}

/* ---- the batch ---- */

/* Compresses the request in place of the original: gzip (RFC 1952), OTLP/HTTP's
 * Content-Encoding, at zlib's fastest level: the exporter's CPU is the host's. */
static int gzip(uint8_t **data, size_t *len) {
	z_stream z = {};
	uint8_t *out;
	size_t bound;
	int r;

	if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	bound = deflateBound(&z, *len);
	out = malloc(bound);
	if (!out) {
		deflateEnd(&z);
		return -ENOMEM;
	}
	z.next_in = *data;
	z.avail_in = (uInt) *len;
	z.next_out = out;
	z.avail_out = (uInt) bound;
	r = deflate(&z, Z_FINISH);
	deflateEnd(&z);
	if (r != Z_STREAM_END) {
		free(out);
		return -EIO;
	}
	*data = out;
	*len = z.total_out;
	return 0;
}

int otlp_batch_new(OtlpProtocol protocol, OtlpCompression compression, const OtlpResource *res, OtlpBatch **ret) {
	OtlpBatch *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return -ENOMEM;
	*b = (OtlpBatch){ .protocol = protocol, .compression = compression, .res = res };
	if (protocol == OTLP_PROTOCOL_JSON) {
		b->records = json_object_new_array();
		r = b->records ? 0 : -ENOMEM;
	} else {
		r = pack_envelope(b);
		if (r >= 0)
			r = buf_reserve(b, b->gap);
		b->used = b->gap;
	}
	if (r < 0) {
		otlp_batch_free(b);
		return r;
	}
	*ret = b;
	return 0;
}

OtlpBatch *otlp_batch_free(OtlpBatch *b) {
	if (!b)
		return NULL;
	json_object_put(b->records);
	free(b->resource);
	free(b->scope);
	free(b->buf);
	free(b->sizes);
	for (size_t i = 0; i < b->n_spare; i++)
		free(b->spare[i]);
	free(b);
	return NULL;
}

int otlp_batch_add(OtlpBatch *b, const ExportFields *f, uint64_t time_ns, uint64_t observed_ns) {
	int r;

	if (b->protocol == OTLP_PROTOCOL_JSON)
		return add_json(b, f, time_ns, observed_ns);
	r = add_protobuf(b, f, time_ns, observed_ns);
	if (r >= 0)
		b->count++;
	return r;
}

void otlp_batch_recycle(OtlpBatch *b, uint8_t *buf, size_t size) {
	if (size == 0 || b->n_spare == OTLP_SPARE_MAX) {
		free(buf);
		return;
	}
	b->spare[b->n_spare] = buf;
	b->spare_size[b->n_spare++] = size;
}

size_t otlp_batch_count(const OtlpBatch *b) {
	return b->count;
}

void otlp_batch_clear(OtlpBatch *b) {
	b->count = 0;
	b->used = b->gap;
	if (b->records)
		json_object_array_del_idx(b->records, 0, json_object_array_length(b->records));
}

int otlp_batch_seal(OtlpBatch *b, uint8_t **ret, size_t *ret_len, size_t *ret_size) {
	uint8_t *data;
	size_t len, size = 0;
	int r;

	if (b->count == 0)
		return -EINVAL;
	if (b->protocol == OTLP_PROTOCOL_JSON)
		r = seal_json(b, &data, &len);
	else {
		uint8_t *start = put_envelope(b);

		/* The request starts inside the buffer: move it to the front, so that the caller
		 * gets one allocation. A memmove of the request's bytes, once per request. */
		len = b->used - (size_t) (start - b->buf);
		memmove(b->buf, start, len);
		data = b->buf;
		size = b->allocated;
		b->hint = b->allocated; /* the next batch starts as large */
		b->buf = NULL;
		b->used = b->allocated = 0;
		if (b->n_spare > 0) {
			b->n_spare--;
			b->buf = b->spare[b->n_spare];
			b->allocated = b->spare_size[b->n_spare];
		}
		r = buf_reserve(b, b->gap);
		if (r < 0) {
			/* The request is lost (the caller counts its events); the next add makes
			 * the buffer again. */
			free(data);
			free(b->buf);
			b->buf = NULL;
			b->allocated = 0;
			otlp_batch_clear(b);
			return r;
		}
	}
	otlp_batch_clear(b);
	if (r < 0)
		return r;
	if (b->compression == OTLP_COMPRESSION_GZIP) {
		uint8_t *plain = data;

		r = gzip(&data, &len);
		if (r < 0) {
			free(data);
			return r;
		}
		otlp_batch_recycle(b, plain, size);
		size = 0; /* deflate's buffer: not one to reuse */
	}
	*ret = data;
	*ret_len = len;
	if (ret_size)
		*ret_size = size;
	return 0;
}

int otlp_parse_response(
	OtlpProtocol protocol, const uint8_t *body, size_t len, uint64_t *ret_rejected, char *msg, size_t msg_size) {
	*ret_rejected = 0;
	if (msg_size > 0)
		msg[0] = 0;
	if (len == 0)
		return 0;
	if (protocol == OTLP_PROTOCOL_JSON) {
		_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new();
		_cleanup_(json_object_putp) json_object *o = NULL;
		json_object *ps, *x;

		if (!tok || len > INT32_MAX)
			return -EBADMSG;
		o = json_tokener_parse_ex(tok, (const char *) body, (int) len);
		if (!o || !json_object_is_type(o, json_type_object))
			return -EBADMSG;
		if (!json_object_object_get_ex(o, "partialSuccess", &ps))
			return 0;
		/* rejectedLogRecords is an int64: a string in OTLP/JSON, a number from some. */
		if (json_object_object_get_ex(ps, "rejectedLogRecords", &x))
			*ret_rejected = (uint64_t) MAX(json_object_get_int64(x), (int64_t) 0);
		if (json_object_object_get_ex(ps, "errorMessage", &x) && msg_size > 0)
			snprintf(msg, msg_size, "%s", json_object_get_string(x));
		return 0;
	} else {
		Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceResponse *resp =
			opentelemetry__proto__collector__logs__v1__export_logs_service_response__unpack(
				NULL, len, body);

		if (!resp)
			return -EBADMSG;
		if (resp->partial_success) {
			*ret_rejected = (uint64_t) MAX(
				resp->partial_success->rejected_log_records, (int64_t) 0);
			if (resp->partial_success->error_message && msg_size > 0)
				snprintf(msg, msg_size, "%s", resp->partial_success->error_message);
		}
		opentelemetry__proto__collector__logs__v1__export_logs_service_response__free_unpacked(
			resp, NULL);
		return 0;
	}
}
