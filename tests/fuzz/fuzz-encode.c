/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Differential fuzzing of the JSON encoder: records of every built-in type (and unknown ones)
 * filled with fuzz bytes are encoded, parsed back with json-c in strict mode, and every field
 * compared with the record; strings against a simple reference of the documented rule (valid
 * UTF-8 kept, each invalid byte replaced by U+FFFD), payloads of unknown types by base64. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "json-util.h"

#include "decode/decode.h"
#include "hub/encode.h"
#include "event.h"
#include "fuzz-record.h"

static char line[ENCODE_JSON_MAX];

#define CHECK(x)                                                                                        \
	do {                                                                                            \
		if (!(x)) {                                                                             \
			fprintf(stderr, "%s:%d: %s\nline: %.*s\n", __FILE__, __LINE__, #x, 2000, line); \
			abort();                                                                        \
		}                                                                                       \
	} while (0)

/* The reference: the length of the valid UTF-8 sequence at s (n bytes left), or 0. Written
 * for clarity, not speed, and independently of encode.c. */
static size_t utf8_valid_len(const uint8_t *s, size_t n) {
	uint32_t cp;
	size_t len;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* What a C string (up to its NUL within max bytes) must read as after the JSON round trip. */
static char *expected_string(const char *s, size_t max) {
	size_t n = strnlen(s, max), o = 0;
	char *out = malloc(n * 3 + 1);

	for (size_t i = 0; i < n;) {
		size_t k = utf8_valid_len((const uint8_t *) s + i, n - i);

		if (k == 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		}
	}
	out[o] = '\0';
	return out;
}

static void check_string(struct json_object *o, const char *key, const char *s, size_t max) {
	struct json_object *v;
	char *want = expected_string(s, max);

	CHECK(json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string));
	CHECK(strcmp(json_object_get_string(v), want) == 0);
	free(want);
}

static void check_u64(struct json_object *o, const char *key, uint64_t want) {
	struct json_object *v;

	CHECK(json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int));
	CHECK(json_object_get_uint64(v) == want);
}

/* An exec id: 16 hex digits; a parent's of 0 (none) is left out (docs/events.md). */
static void check_exec_id(struct json_object *o, const char *key, uint64_t want) {
	struct json_object *v;
	char hex[17];

	if (want == 0 && strcmp(key, "parent_exec_id") == 0) {
		CHECK(!json_object_object_get_ex(o, key, NULL));
		return;
	}
	snprintf(hex, sizeof(hex), "%016" PRIx64, want);
	CHECK(json_object_object_get_ex(o, key, &v) && strcmp(json_object_get_string(v), hex) == 0);
}

static void check_s64(struct json_object *o, const char *key, int64_t want) {
	struct json_object *v;

	CHECK(json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int));
	CHECK(json_object_get_int64(v) == want);
}

static size_t base64_decode(const char *in, uint8_t *out) {
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint32_t acc = 0;
	size_t o = 0;
	int bits = 0;

	for (; *in && *in != '='; in++) {
		const char *p = strchr(alphabet, *in);

		CHECK(p);
		acc = acc << 6 | (uint32_t) (p - alphabet);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (uint8_t) (acc >> bits);
		}
	}
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	static const uint16_t types[] = { PERFRELAY_TYPE_EXEC, PERFRELAY_TYPE_EXIT,    PERFRELAY_TYPE_FORK,
					  PERFRELAY_TYPE_OPEN, PERFRELAY_TYPE_CONNECT, 0x9000 };
	static const uint16_t sizes[] = { sizeof(struct perfrelay_exec),    sizeof(struct perfrelay_exit),
					  sizeof(struct perfrelay_fork),    sizeof(struct perfrelay_open),
					  sizeof(struct perfrelay_connect), 0 };
	static _Alignas(8) uint8_t rec[2048];
	struct perfrelay_hdr h = { .magic = PERFRELAY_MAGIC, .version = PERFRELAY_VERSION, .producer = 300 };
	struct json_tokener *tok;
	struct json_object *o, *v;
	DecodedEvent ev;
	unsigned k;
	ssize_t n;

	if (size < 1)
		return 0;
	k = data[0] % 6;
	data++;
	size--;
	h.type = types[k];
	h.size = sizes[k] ? sizes[k] : (uint16_t) (sizeof(h) + (size < 1000 ? size : 1000));
	memset(rec, 0, sizeof(rec));
	memcpy(rec + sizeof(h),
	       data,
	       (size < (size_t) h.size - sizeof(h) ? size : (size_t) h.size - sizeof(h)));
	memcpy(rec, &h, sizeof(h));

	fuzz_record_make_valid(rec, h.type);
	CHECK(decode_event(rec, h.size, &ev) == DECODE_OK);

	n = encode_json(&ev, NULL, line, sizeof(line));
	CHECK(n > 0 && line[n - 1] == '\n');
	tok = json_tokener_new();
	json_tokener_set_flags(tok, json_strict_flags());
	o = json_tokener_parse_ex(tok, line, (int) n - 1);
	CHECK(o && json_tokener_get_error(tok) == json_tokener_success &&
	      json_object_is_type(o, json_type_object));

	check_u64(o, "producer", 300);
	switch (h.type) {
	case PERFRELAY_TYPE_EXEC: {
		const struct perfrelay_exec *e = (const void *) rec;
		size_t i = 0, idx = 0;

		check_u64(o, "pid", e->pid);
		check_u64(o, "uid", e->uid);
		check_u64(o, "cgroup_id", e->cgroup_id);
		check_string(o, "comm", e->comm, sizeof(e->comm));
		check_string(o, "filename", e->filename, sizeof(e->filename));
		CHECK(json_object_object_get_ex(o, "argv", &v) && json_object_is_type(v, json_type_array));
		while (i < e->argv_len) {
			struct json_object *a = json_object_array_get_idx(v, idx++);
			char *want = expected_string(e->argv + i, e->argv_len - i);

			CHECK(a && strcmp(json_object_get_string(a), want) == 0);
			free(want);
			i += strnlen(e->argv + i, e->argv_len - i) + 1;
		}
		CHECK(json_object_array_length(v) == idx);
		check_exec_id(o, "exec_id", e->ids.exec_id);
		check_exec_id(o, "parent_exec_id", e->ids.parent_exec_id);
		CHECK(json_object_object_get_ex(o, "ancestors", &v) &&
		      json_object_is_type(v, json_type_array) &&
		      json_object_array_length(v) == e->n_ancestors);
		for (i = 0; i < e->n_ancestors; i++) {
			struct json_object *a = json_object_array_get_idx(v, i);

			check_exec_id(a, "exec_id", e->ancestors[i].exec_id);
			check_u64(a, "pid", e->ancestors[i].pid);
			check_string(a, "comm", e->ancestors[i].comm, sizeof(e->ancestors[i].comm));
		}
		if (e->exe[0])
			check_string(o, "exe", e->exe, sizeof(e->exe));
		else
			CHECK(!json_object_object_get_ex(o, "exe", NULL));
		if (e->cwd[0])
			check_string(o, "cwd", e->cwd, sizeof(e->cwd));
		else
			CHECK(!json_object_object_get_ex(o, "cwd", NULL));
		check_exec_id(o, "prev_exec_id", e->prev_exec_id);
		break;
	}
	case PERFRELAY_TYPE_EXIT: {
		const struct perfrelay_exit *e = (const void *) rec;
		check_u64(o, "pid", e->pid);
		check_s64(o, "exit_code", e->exit_code);
		check_u64(o, "runtime_ns", e->runtime_ns);
		check_string(o, "comm", e->comm, sizeof(e->comm));
		check_exec_id(o, "exec_id", e->ids.exec_id);
		check_exec_id(o, "parent_exec_id", e->ids.parent_exec_id);
		break;
	}
	case PERFRELAY_TYPE_FORK: {
		const struct perfrelay_fork *e = (const void *) rec;
		check_u64(o, "parent_pid", e->parent_pid);
		check_u64(o, "child_pid", e->child_pid);
		check_string(o, "comm", e->comm, sizeof(e->comm));
		check_exec_id(o, "exec_id", e->ids.exec_id);
		check_exec_id(o, "parent_exec_id", e->ids.parent_exec_id);
		break;
	}
	case PERFRELAY_TYPE_OPEN: {
		const struct perfrelay_open *e = (const void *) rec;
		check_u64(o, "pid", e->pid);
		check_s64(o, "flags", e->flags);
		check_s64(o, "result", e->result);
		check_string(o, "comm", e->comm, sizeof(e->comm));
		check_string(o, "path", e->path, sizeof(e->path));
		check_exec_id(o, "exec_id", e->ids.exec_id);
		check_exec_id(o, "parent_exec_id", e->ids.parent_exec_id);
		break;
	}
	case PERFRELAY_TYPE_CONNECT: {
		const struct perfrelay_connect *e = (const void *) rec;
		check_u64(o, "pid", e->pid);
		check_u64(o, "port", e->port);
		check_s64(o, "result", e->result);
		check_string(o, "comm", e->comm, sizeof(e->comm));
		check_exec_id(o, "exec_id", e->ids.exec_id);
		check_exec_id(o, "parent_exec_id", e->ids.parent_exec_id);
		break;
	}
	default: {
		static uint8_t decoded[2048];
		size_t got;

		check_u64(o, "type_id", h.type);
		CHECK(json_object_object_get_ex(o, "payload", &v) && json_object_is_type(v, json_type_string));
		got = base64_decode(json_object_get_string(v), decoded);
		CHECK(got == h.size - sizeof(h) && memcmp(decoded, rec + sizeof(h), got) == 0);
	}
	}
	json_object_put(o);
	json_tokener_free(tok);
	return 0;
}
