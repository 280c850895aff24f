/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* OTLP logs requests and responses, protobuf (protobuf-c) and JSON (json-c). */
#include "export/otlp-encode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "logs_service.pb-c.h"
#include "macro.h"

typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Common__V1__KeyValueList KeyValueList;
typedef Opentelemetry__Proto__Common__V1__ArrayValue ArrayValue;
typedef Opentelemetry__Proto__Logs__V1__LogRecord LogRecord;

#define SCOPE_NAME "perfrelay-export"
/* How deep an event's JSON nests: the encoder's events are shallower (docs/events.md). */
#define DEPTH_MAX  16

/* A request's messages live in one arena, freed at once after packing: nothing per message. */
typedef struct Arena {
	struct Chunk {
		struct Chunk *next;
		size_t used, size;
		_Alignas(16) uint8_t data[];
	} * chunk;
} Arena;

static void *arena_alloc(Arena *a, size_t n) {
	n = ALIGN_TO(n, (size_t) 16);
	if (!a->chunk || a->chunk->size - a->chunk->used < n) {
		size_t size = MAX(n, (size_t) 256 * 1024);
		struct Chunk *c = malloc(sizeof(*c) + size);

		if (!c)
			return NULL;
		*c = (struct Chunk){ .next = a->chunk, .size = size };
		a->chunk = c;
	}
	a->chunk->used += n;
	return memset(a->chunk->data + a->chunk->used - n, 0, n);
}

static void arena_free(Arena *a) {
	while (a->chunk) {
		struct Chunk *next = a->chunk->next;

		free(a->chunk);
		a->chunk = next;
	}
}

#define NEW(a, type, init)                                 \
	({                                                 \
		type *_p = arena_alloc((a), sizeof(type)); \
		if (_p)                                    \
			*_p = (type) init;                 \
		_p;                                        \
	})

static AnyValue *any_from_json(Arena *a, json_object *o, unsigned depth);
static int kv_list(Arena *a, json_object *o, unsigned depth, KeyValue ***ret, size_t *ret_n);

static KeyValue *kv_new(Arena *a, const char *key, AnyValue *v) {
	KeyValue *kv = NEW(a, KeyValue, OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE__INIT);

	if (!kv || !v)
		return NULL;
	kv->key = (char *) key; /* borrowed: outlives the packing */
	kv->value = v;
	return kv;
}

/* A JSON object's members as KeyValues (a kvlist's, or a record's or resource's attributes). */
static int kv_list(Arena *a, json_object *o, unsigned depth, KeyValue ***ret, size_t *ret_n) {
	size_t n = (size_t) json_object_object_length(o), i = 0;
	KeyValue **kvs = arena_alloc(a, sizeof(KeyValue *) * (n ?: 1));

	if (!kvs)
		return -ENOMEM;
	json_object_object_foreach(o, key, val) {
		if (!(kvs[i++] = kv_new(a, key, any_from_json(a, val, depth))))
			return -ENOMEM;
	}
	*ret = kvs;
	*ret_n = i;
	return 0;
}

static AnyValue *any_from_json(Arena *a, json_object *o, unsigned depth) {
	AnyValue *v = NEW(a, AnyValue, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT);

	if (!v || depth > DEPTH_MAX)
		return NULL;
	switch (json_object_get_type(o)) {
	case json_type_null:
		break; /* an empty AnyValue is OTLP's null */
	case json_type_boolean:
		v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE;
		v->bool_value = json_object_get_boolean(o);
		break;
	case json_type_double:
		v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_DOUBLE_VALUE;
		v->double_value = json_object_get_double(o);
		break;
	case json_type_int:
		v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
		/* OTLP integers are signed 64-bit: a u64 above INT64_MAX (a seq, a cgroup id) keeps
		 * its bits, as a collector's int64 would read them back. */
		v->int_value = (int64_t) json_object_get_uint64(o);
		if (json_object_get_int64(o) < 0)
			v->int_value = json_object_get_int64(o);
		break;
	case json_type_string:
		v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
		v->string_value = (char *) json_object_get_string(o);
		break;
	case json_type_array: {
		size_t n = json_object_array_length(o);
		ArrayValue *arr = NEW(a, ArrayValue, OPENTELEMETRY__PROTO__COMMON__V1__ARRAY_VALUE__INIT);

		if (!arr || !(arr->values = arena_alloc(a, sizeof(AnyValue *) * (n ?: 1))))
			return NULL;
		for (size_t i = 0; i < n; i++)
			if (!(arr->values[i] = any_from_json(a, json_object_array_get_idx(o, i), depth + 1)))
				return NULL;
		arr->n_values = n;
		v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_ARRAY_VALUE;
		v->array_value = arr;
		break;
	}
	case json_type_object: {
		KeyValueList *l = NEW(a, KeyValueList, OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE_LIST__INIT);

		if (!l || kv_list(a, o, depth + 1, &l->values, &l->n_values) < 0)
			return NULL;
		v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_KVLIST_VALUE;
		v->kvlist_value = l;
		break;
	}
	}
	return v;
}

/* Adds v as o's member k; frees v when it cannot. */
static int add(json_object *o, const char *k, json_object *v) {
	if (!v || json_object_object_add(o, k, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

/* The resource's attributes, for both encodings: a new JSON object (the caller puts it). */
static json_object *resource_attributes(const OtlpResource *res) {
	json_object *o = json_object_new_object();

	if (!o || add(o, "service.name", json_object_new_string("perfrelay")) < 0 ||
	    add(o, "service.version", json_object_new_string(res->version)) < 0 ||
	    add(o, "host.name", json_object_new_string(res->host)) < 0 ||
	    add(o, "perfrelay.boot_id", json_object_new_string(res->boot_id)) < 0) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* The attributes every collector filters on, from the event's own fields, for both encodings:
 * a new JSON object (the caller puts it). */
static json_object *event_attributes(const OtlpEvent *ev) {
	json_object *o = json_object_new_object(), *x;

	if (!o)
		return NULL;
	if ((json_object_object_get_ex(ev->fields, "type", &x) &&
	     add(o, "perfrelay.type", json_object_get(x)) < 0) ||
	    (json_object_object_get_ex(ev->fields, "pid", &x) && add(o, "process.pid", json_object_get(x)) < 0) ||
	    (ev->unit && add(o, "systemd.unit", json_object_new_string(ev->unit)) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static int encode_protobuf(
	const OtlpResource *res,
	const OtlpEvent *events,
	size_t n,
	uint64_t observed_ns,
	uint8_t **ret,
	size_t *ret_len) {
	Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest req =
		OPENTELEMETRY__PROTO__COLLECTOR__LOGS__V1__EXPORT_LOGS_SERVICE_REQUEST__INIT;
	Opentelemetry__Proto__Logs__V1__ResourceLogs rl = OPENTELEMETRY__PROTO__LOGS__V1__RESOURCE_LOGS__INIT;
	Opentelemetry__Proto__Resource__V1__Resource resource =
		OPENTELEMETRY__PROTO__RESOURCE__V1__RESOURCE__INIT;
	Opentelemetry__Proto__Logs__V1__ScopeLogs sl = OPENTELEMETRY__PROTO__LOGS__V1__SCOPE_LOGS__INIT;
	Opentelemetry__Proto__Common__V1__InstrumentationScope scope =
		OPENTELEMETRY__PROTO__COMMON__V1__INSTRUMENTATION_SCOPE__INIT;
	Opentelemetry__Proto__Logs__V1__ResourceLogs *rls[1] = { &rl };
	Opentelemetry__Proto__Logs__V1__ScopeLogs *sls[1] = { &sl };
	Arena a = {};
	/* The attribute objects, which the messages borrow strings from until packed: the
	 * resource's, then one per event. */
	json_object **attrs = calloc(n + 1, sizeof(json_object *));
	uint8_t *buf;
	size_t len;
	int r = -ENOMEM;

	if (!attrs || !(attrs[n] = resource_attributes(res)) ||
	    kv_list(&a, attrs[n], 0, &resource.attributes, &resource.n_attributes) < 0)
		goto finish;
	scope.name = (char *) SCOPE_NAME;
	scope.version = (char *) res->version;
	sl.scope = &scope;
	sl.log_records = arena_alloc(&a, sizeof(LogRecord *) * n);
	if (!sl.log_records)
		goto finish;
	for (size_t i = 0; i < n; i++) {
		LogRecord *lr = NEW(&a, LogRecord, OPENTELEMETRY__PROTO__LOGS__V1__LOG_RECORD__INIT);

		if (!lr)
			goto finish;
		lr->time_unix_nano = events[i].time_unix_nano;
		lr->observed_time_unix_nano = observed_ns;
		lr->severity_number = OPENTELEMETRY__PROTO__LOGS__V1__SEVERITY_NUMBER__SEVERITY_NUMBER_INFO;
		lr->severity_text = (char *) "INFO";
		lr->body = any_from_json(&a, events[i].fields, 0);
		if (!lr->body || !(attrs[i] = event_attributes(&events[i])) ||
		    kv_list(&a, attrs[i], 0, &lr->attributes, &lr->n_attributes) < 0)
			goto finish;
		sl.log_records[i] = lr;
	}
	sl.n_log_records = n;
	rl.resource = &resource;
	rl.scope_logs = sls;
	rl.n_scope_logs = 1;
	req.resource_logs = rls;
	req.n_resource_logs = 1;

	len = opentelemetry__proto__collector__logs__v1__export_logs_service_request__get_packed_size(&req);
	buf = malloc(len ?: 1);
	if (!buf)
		goto finish;
	opentelemetry__proto__collector__logs__v1__export_logs_service_request__pack(&req, buf);
	*ret = buf;
	*ret_len = len;
	r = 0;
finish:
	for (size_t i = 0; attrs && i <= n; i++)
		json_object_put(attrs[i]);
	free(attrs);
	arena_free(&a);
	return r;
}

/* OTLP/JSON (the protobuf JSON mapping with OTLP's rules): camelCase names, 64-bit integers
 * as strings, enums as numbers. */
static json_object *json_any(json_object *o, unsigned depth);

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

static json_object *json_wrap(const char *kind, json_object *v) {
	json_object *o = json_object_new_object();

	if (!o || !v || json_object_object_add(o, kind, v) < 0) {
		json_object_put(o);
		json_object_put(v);
		return NULL;
	}
	return o;
}

/* A JSON object's members as OTLP/JSON KeyValues: an array of {"key","value"}, or NULL. */
static json_object *json_kvs(json_object *o, unsigned depth) {
	json_object *values = json_object_new_array();

	json_object_object_foreach(o, key, val) {
		json_object *kv = values ? json_kv(key, json_any(val, depth)) : NULL;

		if (!kv || json_object_array_add(values, kv) < 0) {
			json_object_put(kv);
			json_object_put(values);
			return NULL;
		}
	}
	return values;
}

static json_object *json_any(json_object *o, unsigned depth) {
	char num[24];

	if (depth > DEPTH_MAX)
		return NULL;
	switch (json_object_get_type(o)) {
	case json_type_null:
		return json_object_new_object();
	case json_type_boolean:
		return json_wrap("boolValue", json_object_new_boolean(json_object_get_boolean(o)));
	case json_type_double:
		return json_wrap("doubleValue", json_object_new_double(json_object_get_double(o)));
	case json_type_int:
		if (json_object_get_int64(o) < 0)
			snprintf(num, sizeof(num), "%" PRId64, json_object_get_int64(o));
		else
			snprintf(num, sizeof(num), "%" PRId64, (int64_t) json_object_get_uint64(o));
		return json_wrap("intValue", json_object_new_string(num));
	case json_type_string:
		return json_wrap("stringValue", json_object_get(o));
	case json_type_array: {
		json_object *values = json_object_new_array_ext((int) json_object_array_length(o));

		for (size_t i = 0; values && i < json_object_array_length(o); i++)
			if (json_object_array_add(
				    values, json_any(json_object_array_get_idx(o, i), depth + 1)) < 0 ||
			    !json_object_array_get_idx(values, i)) {
				json_object_put(values);
				return NULL;
			}
		return json_wrap("arrayValue", json_wrap("values", values));
	}
	case json_type_object:
		return json_wrap("kvlistValue", json_wrap("values", json_kvs(o, depth + 1)));
	}
	return NULL;
}

static int push(json_object *arr, json_object *v) {
	if (!v || json_object_array_add(arr, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static json_object *json_u64(uint64_t v) {
	char num[24];

	snprintf(num, sizeof(num), "%" PRIu64, v);
	return json_object_new_string(num);
}

static int encode_json(
	const OtlpResource *res,
	const OtlpEvent *events,
	size_t n,
	uint64_t observed_ns,
	uint8_t **ret,
	size_t *ret_len) {
	_cleanup_(json_object_putp) json_object *root = json_object_new_object();
	_cleanup_(json_object_putp) json_object *rattrs = resource_attributes(res);
	json_object *rls = json_object_new_array(), *rl = json_object_new_object(),
		    *resource = json_object_new_object(), *sls = json_object_new_array(),
		    *sl = json_object_new_object(), *scope = json_object_new_object(),
		    *records = json_object_new_array();
	const char *text;
	int r = 0;

	/* Each piece is owned by its parent as soon as it is added; what failed to be added is
	 * freed by add()/push(), and everything else with root. */
	if (!root || !rattrs || add(root, "resourceLogs", rls) < 0 || push(rls, rl) < 0 ||
	    add(rl, "resource", resource) < 0 || add(resource, "attributes", json_kvs(rattrs, 0)) < 0 ||
	    add(rl, "scopeLogs", sls) < 0 || push(sls, sl) < 0 || add(sl, "scope", scope) < 0 ||
	    add(sl, "logRecords", records) < 0)
		return -ENOMEM;
	if (add(scope, "name", json_object_new_string(SCOPE_NAME)) < 0 ||
	    add(scope, "version", json_object_new_string(res->version)) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < n && r >= 0; i++) {
		_cleanup_(json_object_putp) json_object *attrs = event_attributes(&events[i]);
		json_object *lr = json_object_new_object();

		if (!attrs || push(records, lr) < 0 || add(lr, "attributes", json_kvs(attrs, 0)) < 0)
			return -ENOMEM;
		r = add(lr, "timeUnixNano", json_u64(events[i].time_unix_nano));
		if (r >= 0)
			r = add(lr, "observedTimeUnixNano", json_u64(observed_ns));
		if (r >= 0)
			r = add(lr, "severityNumber", json_object_new_int(9));
		if (r >= 0)
			r = add(lr, "severityText", json_object_new_string("INFO"));
		if (r >= 0)
			r = add(lr, "body", json_any(events[i].fields, 0));
	}
	if (r < 0)
		return r;
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text)
		return -ENOMEM;
	*ret_len = strlen(text);
	*ret = (uint8_t *) strdup(text);
	return *ret ? 0 : -ENOMEM;
}

int otlp_encode_request(
	OtlpProtocol protocol,
	const OtlpResource *res,
	const OtlpEvent *events,
	size_t n,
	uint64_t observed_ns,
	uint8_t **ret,
	size_t *ret_len) {
	if (n == 0)
		return -EINVAL;
	return protocol == OTLP_PROTOCOL_JSON ? encode_json(res, events, n, observed_ns, ret, ret_len) :
						encode_protobuf(res, events, n, observed_ns, ret, ret_len);
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
