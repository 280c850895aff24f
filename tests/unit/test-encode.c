/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of encode.c: every line it writes must parse as strict JSON and say exactly what
 * the record says, in any buffer size. */

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>

#include "json-util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "decode/decode.h"
#include "hub/encode.h"
#include "macro.h"


/* Keeps going after a failure so that one run shows every broken case. */
#include "unit-test.h"

#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers: records ---- */

static struct perfrelay_hdr make_hdr(uint16_t type, uint16_t size) {
	return (struct perfrelay_hdr){
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = type,
		.size = size,
		.producer = 17,
		.cpu = 5,
		.seq = 0xfedcba9876543210ull, /* > INT64_MAX: must survive as an unsigned number */
		.ts_ns = 1234567890123456789ull,
	};
}

static struct perfrelay_exec make_exec(void) {
	struct perfrelay_exec r = { .hdr = make_hdr(PERFRELAY_TYPE_EXEC, sizeof(r)) };
	static const char argv[] = "ls\0-l\0/tmp";

	r.pid = 4242;
	r.ppid = 1;
	r.uid = 1000;
	r.gid = 100;
	r.cgroup_id = 0xdeadbeefcafef00dull;
	r.argc = 3;
	r.argv_len = sizeof(argv);
	memcpy(r.argv, argv, sizeof(argv));
	strcpy(r.comm, "ls");
	strcpy(r.filename, "/usr/bin/ls");
	r.ids.exec_id = 0x0123456789abcdefull;
	r.ids.parent_exec_id = 0xfedcba9876543210ull;
	r.n_ancestors = 2;
	r.ancestors[0] = (struct perfrelay_ancestor){ .exec_id = 0xfedcba9876543210ull,
						      .pid = 4000,
						      .comm = "sh" };
	r.ancestors[1] = (struct perfrelay_ancestor){ .exec_id = 1, .pid = 1, .comm = "systemd" };
	r.exe_dev = 8u << 20 | 17;
	r.exe_ino = 131090;
	r.prev_exec_id = UINT64_C(0x0123456789abcdef);
	strcpy(r.exe, "/usr/bin/ls");
	strcpy(r.cwd, "/tmp");
	return r;
}

static struct perfrelay_exit make_exit(void) {
	struct perfrelay_exit r = { .hdr = make_hdr(PERFRELAY_TYPE_EXIT, sizeof(r)) };

	r.pid = 777;
	r.ppid = 776;
	r.uid = 0;
	r.exit_code = 3;
	r.signal = 9;
	r.runtime_ns = 123456789012ull;
	strcpy(r.comm, "sleep");
	r.ids.exec_id = 42; /* and no parent: parent_exec_id is left out */
	return r;
}

static struct perfrelay_fork make_fork(void) {
	struct perfrelay_fork r = { .hdr = make_hdr(PERFRELAY_TYPE_FORK, sizeof(r)) };

	r.parent_pid = 100;
	r.child_pid = 102;
	r.child_tgid = 101;
	r.uid = 65534;
	strcpy(r.comm, "bash");
	r.ids.exec_id = 0x10;
	r.ids.parent_exec_id = 0x20;
	return r;
}

static struct perfrelay_open make_open(void) {
	struct perfrelay_open r = { .hdr = make_hdr(PERFRELAY_TYPE_OPEN, sizeof(r)) };

	r.pid = 555;
	r.uid = 1001;
	r.flags = 0x80000;
	r.result = -2;
	strcpy(r.comm, "cat");
	strcpy(r.path, "/etc/passwd");
	r.ids.exec_id = 0x30;
	r.ids.parent_exec_id = 0x40;
	return r;
}

static struct perfrelay_connect make_connect(void) {
	struct perfrelay_connect r = { .hdr = make_hdr(PERFRELAY_TYPE_CONNECT, sizeof(r)) };

	r.pid = 999;
	r.uid = 33;
	r.result = -115;
	r.family = AF_INET;
	r.port = 443;
	r.addr[0] = 192;
	r.addr[1] = 168;
	r.addr[2] = 0;
	r.addr[3] = 42;
	strcpy(r.comm, "curl");
	r.ids.exec_id = 0x50;
	return r;
}

/* decode_event() is the only way the daemon makes a DecodedEvent, so the tests use it too;
 * a record the decoder refuses is a bug in the test. */
static DecodedEvent decode_ok(const void *rec, size_t size) {
	DecodedEvent ev = {};
	DecodeError e = decode_event(rec, size, &ev);

	if (e != DECODE_OK) {
		fprintf(stderr, "test record rejected: %s\n", decode_error_to_string(e));
		abort();
	}
	return ev;
}

/* ---- helpers: UTF-8 reference ---- */

/* What a JSON parser must hand back for the bytes s[0..n): well-formed UTF-8 kept, every byte
 * that does not start a well-formed sequence replaced by U+FFFD. Works on code points rather
 * than the byte-range table the encoder uses, so the two do not share a mistake. out needs
 * 3 * n bytes. */
static size_t ref_sanitize(const uint8_t *s, size_t n, uint8_t *out) {
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		uint8_t c = s[i];
		size_t len;
		uint32_t cp, min;

		if (c < 0x80) {
			out[o++] = c;
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			len = 2;
			cp = c & 0x1f;
			min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3;
			cp = c & 0x0f;
			min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4;
			cp = c & 0x07;
			min = 0x10000;
		} else
			goto bad;
		if (i + len > n)
			goto bad;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				goto bad;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			goto bad;
		memcpy(out + o, s + i, len);
		o += len;
		i += len;
		continue;
bad:
		memcpy(out + o, "\xef\xbf\xbd", 3);
		o += 3;
		i++;
	}
	return o;
}

static bool utf8_valid(const uint8_t *s, size_t n) {
	uint8_t *tmp = malloc(3 * n + 1);
	bool ok;

	if (!tmp)
		abort();
	ok = ref_sanitize(s, n, tmp) == n && memcmp(tmp, s, n) == 0;
	free(tmp);
	return ok;
}

/* ---- helpers: JSON ---- */

/* Checks the framing of a JSON line and parses it strictly. Returns NULL (after counting a
 * failure) if it is not one valid JSON object followed by '\n'. */
static json_object *parse_line_at(const char *buf, ssize_t n, const char *file, int line) {
	json_tokener *tok;
	json_object *obj;
	bool ok = true;

	if (n <= 0 || buf[n - 1] != '\n') {
		fprintf(stderr, "%s:%d: not a line (n=%zd)\n", file, line, n);
		failures++;
		return NULL;
	}
	/* JSON lines: one '\n' at the end, no raw control byte or DEL inside, valid UTF-8. */
	for (ssize_t i = 0; i < n - 1; i++)
		if ((uint8_t) buf[i] < 0x20 || buf[i] == 0x7f)
			ok = false;
	if (!ok || !utf8_valid((const uint8_t *) buf, (size_t) n - 1)) {
		fprintf(stderr, "%s:%d: raw control byte or invalid UTF-8 in: %.*s\n", file, line, (int) n, buf);
		failures++;
		return NULL;
	}

	tok = json_tokener_new();
	if (!tok)
		abort();
	json_tokener_set_flags(tok, json_strict_flags());
	obj = json_tokener_parse_ex(tok, buf, (int) (n - 1));
	if (!obj || json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != (size_t) (n - 1) ||
	    !json_object_is_type(obj, json_type_object)) {
		fprintf(stderr,
			"%s:%d: json-c: %s in: %.*s\n",
			file,
			line,
			json_tokener_error_desc(json_tokener_get_error(tok)),
			(int) n,
			buf);
		failures++;
		json_object_put(obj);
		obj = NULL;
	}
	json_tokener_free(tok);
	return obj;
}
#define parse_line(buf, n) parse_line_at(buf, n, __FILE__, __LINE__)

/* The keys, in order, and nothing else (json-c keeps insertion order; a duplicate key would
 * collapse and shorten the list). */
static void expect_keys_at(json_object *obj, const char *const *keys, const char *file, int line) {
	size_t i = 0;

	if (!obj)
		return;
	json_object_object_foreach(obj, k, v) {
		(void) v;
		if (!keys[i] || strcmp(keys[i], k) != 0) {
			fprintf(stderr,
				"%s:%d: key %zu is \"%s\", expected \"%s\"\n",
				file,
				line,
				i,
				k,
				keys[i] ? keys[i] : "(end)");
			failures++;
			return;
		}
		i++;
	}
	if (keys[i]) {
		fprintf(stderr, "%s:%d: key \"%s\" missing\n", file, line, keys[i]);
		failures++;
	}
}

/* Each type's JSON line, its keys in order (docs/events.md): the header's, then the type's own. One
 * table, so that a field added to a type is added here once. */
#define HEADER_KEYS "type", "ts", "cpu", "seq", "producer"
static const struct {
	const char *name;
	const char *keys[32]; /* NULL-terminated */
} type_keys[] = {
	{ "exec",
	  { HEADER_KEYS, "pid",  "ppid",           "uid",       "gid",       "comm",          "filename",
	    "argv",      "argc", "argv_truncated", "cgroup_id", "ancestors", "exe",           "exe_dev",
	    "exe_ino",   "cwd",  "prev_exec_id",   "euid",      "exec_id",   "parent_exec_id" } },
	{ "exit",
	  { HEADER_KEYS, "pid", "ppid", "uid", "exit_code", "signal", "runtime_ns", "comm", "euid", "exec_id" } },
	{ "fork",
	  { HEADER_KEYS, "parent_pid", "child_pid", "child_tgid", "uid", "comm", "euid", "exec_id", "parent_exec_id" } },
	{ "open",
	  { HEADER_KEYS, "pid", "uid", "comm", "path", "flags", "result", "euid", "exec_id", "parent_exec_id" } },
	{ "connect",
	  { HEADER_KEYS, "pid", "uid", "comm", "family", "family_name", "address", "port", "result", "euid", "exec_id" } },
	{ "connect, an unnamed family",
	  { HEADER_KEYS, "pid", "uid", "comm", "family", "port", "result", "euid", "exec_id" } },
	{ "bench", { HEADER_KEYS, "call", "size" } },
	{ "unknown", { HEADER_KEYS, "type_id", "payload" } },
};

/* The keys of type `name` (type_keys[]) with `without` left out (NULL: none) and `extra` added at
 * the end (NULL: none). */
static void expect_type_keys_at(
	json_object *obj, const char *name, const char *without, const char *extra, const char *file, int line) {
	const char *keys[34];
	size_t n = 0;

	for (size_t i = 0; i < ELEMENTSOF(type_keys); i++) {
		if (strcmp(type_keys[i].name, name) != 0)
			continue;
		for (size_t k = 0; type_keys[i].keys[k]; k++)
			if (!without || strcmp(type_keys[i].keys[k], without) != 0)
				keys[n++] = type_keys[i].keys[k];
		if (extra)
			keys[n++] = extra;
		keys[n] = NULL;
		expect_keys_at(obj, keys, file, line);
		return;
	}
	fprintf(stderr, "%s:%d: no type \"%s\" in type_keys[]\n", file, line, name);
	failures++;
}
#define expect_type_keys(obj, name, without, extra) \
	expect_type_keys_at(obj, name, without, extra, __FILE__, __LINE__)

static json_object *get_at(json_object *obj, const char *key, json_type type, const char *file, int line) {
	json_object *v = NULL;

	if (!obj)
		return NULL;
	if (!json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, type)) {
		fprintf(stderr, "%s:%d: \"%s\" missing or not a %s\n", file, line, key, json_type_to_name(type));
		failures++;
		return NULL;
	}
	return v;
}

static void expect_u64_at(json_object *obj, const char *key, uint64_t want, const char *file, int line) {
	json_object *v = get_at(obj, key, json_type_int, file, line);

	if (v && json_object_get_uint64(v) != want) {
		fprintf(stderr,
			"%s:%d: \"%s\" is %" PRIu64 ", expected %" PRIu64 "\n",
			file,
			line,
			key,
			json_object_get_uint64(v),
			want);
		failures++;
	}
}
#define expect_u64(obj, key, want) expect_u64_at(obj, key, want, __FILE__, __LINE__)

static void expect_s64_at(json_object *obj, const char *key, int64_t want, const char *file, int line) {
	json_object *v = get_at(obj, key, json_type_int, file, line);

	if (v && json_object_get_int64(v) != want) {
		fprintf(stderr,
			"%s:%d: \"%s\" is %" PRId64 ", expected %" PRId64 "\n",
			file,
			line,
			key,
			json_object_get_int64(v),
			want);
		failures++;
	}
}
#define expect_s64(obj, key, want) expect_s64_at(obj, key, want, __FILE__, __LINE__)

static void expect_bool_at(json_object *obj, const char *key, bool want, const char *file, int line) {
	json_object *v = get_at(obj, key, json_type_boolean, file, line);

	if (v && json_object_get_boolean(v) != want) {
		fprintf(stderr, "%s:%d: \"%s\" is not %s\n", file, line, key, want ? "true" : "false");
		failures++;
	}
}
#define expect_bool(obj, key, want) expect_bool_at(obj, key, want, __FILE__, __LINE__)

/* Compares a JSON string with exactly the bytes want[0..n). */
static void expect_bytes_at(
	json_object *v, const char *what, const void *want, size_t n, const char *file, int line) {
	if (!v)
		return;
	if (!json_object_is_type(v, json_type_string) || (size_t) json_object_get_string_len(v) != n ||
	    memcmp(json_object_get_string(v), want, n) != 0) {
		fprintf(stderr,
			"%s:%d: %s is \"%s\", expected \"%.*s\"\n",
			file,
			line,
			what,
			json_object_get_string(v),
			(int) n,
			(const char *) want);
		failures++;
	}
}

static void expect_str_at(json_object *obj, const char *key, const char *want, const char *file, int line) {
	expect_bytes_at(get_at(obj, key, json_type_string, file, line), key, want, strlen(want), file, line);
}
#define expect_str(obj, key, want) expect_str_at(obj, key, want, __FILE__, __LINE__)

/* A string field must come back as the reference sanitization of the record's bytes. */
static void expect_sanitized_at(
	json_object *v, const char *what, const char *raw, size_t n, const char *file, int line) {
	uint8_t *want = malloc(3 * n + 1);
	size_t wn;

	if (!want)
		abort();
	wn = ref_sanitize((const uint8_t *) raw, n, want);
	expect_bytes_at(v, what, want, wn, file, line);
	free(want);
}
#define expect_sanitized(obj, key, raw)                                 \
	expect_sanitized_at(                                            \
		get_at(obj, key, json_type_string, __FILE__, __LINE__), \
		key,                                                    \
		raw,                                                    \
		strnlen(raw, sizeof(raw)),                              \
		__FILE__,                                               \
		__LINE__)

static void expect_common_at(
	json_object *obj, const struct perfrelay_hdr *h, const char *type, const char *file, int line) {
	expect_str_at(obj, "type", type, file, line);
	expect_u64_at(obj, "ts", h->ts_ns, file, line);
	expect_u64_at(obj, "cpu", h->cpu, file, line);
	expect_u64_at(obj, "seq", h->seq, file, line);
	expect_u64_at(obj, "producer", h->producer, file, line);
}
#define expect_common(obj, h, type) expect_common_at(obj, h, type, __FILE__, __LINE__)

static char linebuf[ENCODE_JSON_MAX];

/* Encodes into a buffer of ENCODE_JSON_MAX bytes, as the daemon does, and parses the line. */
static json_object *encode_parse_at(const DecodedEvent *ev, const char *unit, const char *file, int line) {
	ssize_t n = encode_json(ev, unit, linebuf, sizeof(linebuf));

	if (n <= 0 || (size_t) n > ENCODE_JSON_MAX) {
		fprintf(stderr, "%s:%d: encode_json() = %zd\n", file, line, n);
		failures++;
		return NULL;
	}
	return parse_line_at(linebuf, n, file, line);
}
#define encode_parse(ev, unit) encode_parse_at(ev, unit, __FILE__, __LINE__)

/* ---- helpers: base64 ---- */

static int b64_value(char c) {
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Strict RFC 4648 decoding: padded, canonical (unused bits zero). Returns length or -1. */
static ssize_t b64_decode(const char *s, size_t n, uint8_t *out) {
	size_t o = 0;

	if (n % 4 != 0)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		bool last = i + 4 == n;
		int v[4];
		size_t pad = 0;

		for (size_t k = 0; k < 4; k++) {
			if (s[i + k] == '=' && last && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad > 0)
				return -1; /* data after padding */
			v[k] = b64_value(s[i + k]);
			if (v[k] < 0)
				return -1;
		}
		uint32_t w = (uint32_t) v[0] << 18 | (uint32_t) v[1] << 12 | (uint32_t) v[2] << 6 |
			(uint32_t) v[3];
		out[o++] = (uint8_t) (w >> 16);
		if (pad < 2)
			out[o++] = (uint8_t) (w >> 8);
		else if ((w >> 8) & 0xff)
			return -1;
		if (pad < 1)
			out[o++] = (uint8_t) w;
		else if (w & 0xff)
			return -1;
	}
	return (ssize_t) o;
}

/* ---- tests: types ---- */

static void test_exec(void) {
	struct perfrelay_exec r = make_exec();
	DecodedEvent ev = decode_ok(&r, sizeof(r));
	json_object *obj, *argv;

	obj = encode_parse(&ev, "sshd.service");
	expect_type_keys(obj, "exec", NULL, "unit");
	expect_common(obj, &r.hdr, "exec");
	expect_u64(obj, "pid", 4242);
	expect_u64(obj, "ppid", 1);
	expect_u64(obj, "uid", 1000);
	expect_u64(obj, "gid", 100);
	expect_str(obj, "comm", "ls");
	expect_str(obj, "filename", "/usr/bin/ls");
	expect_u64(obj, "argc", 3);
	expect_bool(obj, "argv_truncated", false);
	expect_u64(obj, "cgroup_id", 0xdeadbeefcafef00dull);
	expect_str(obj, "unit", "sshd.service");
	/* Process identity: ids as 16 hex digits, ancestors nearest first, the exe's dev_t as
	 * MAJOR:MINOR. */
	expect_str(obj, "exec_id", "0123456789abcdef");
	expect_str(obj, "parent_exec_id", "fedcba9876543210");
	expect_str(obj, "exe", "/usr/bin/ls");
	expect_str(obj, "exe_dev", "8:17");
	expect_u64(obj, "exe_ino", 131090);
	expect_str(obj, "prev_exec_id", "0123456789abcdef");
	expect_str(obj, "cwd", "/tmp");
	{
		json_object *anc = get_at(obj, "ancestors", json_type_array, __FILE__, __LINE__);

		ASSERT(anc && json_object_array_length(anc) == 2);
		if (anc && json_object_array_length(anc) == 2) {
			expect_str(json_object_array_get_idx(anc, 0), "exec_id", "fedcba9876543210");
			expect_u64(json_object_array_get_idx(anc, 0), "pid", 4000);
			expect_str(json_object_array_get_idx(anc, 0), "comm", "sh");
			expect_str(json_object_array_get_idx(anc, 1), "exec_id", "0000000000000001");
			expect_str(json_object_array_get_idx(anc, 1), "comm", "systemd");
		}
	}
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	if (argv) {
		ASSERT(json_object_array_length(argv) == 3);
		expect_bytes_at(json_object_array_get_idx(argv, 0), "argv[0]", "ls", 2, __FILE__, __LINE__);
		expect_bytes_at(json_object_array_get_idx(argv, 1), "argv[1]", "-l", 2, __FILE__, __LINE__);
		expect_bytes_at(json_object_array_get_idx(argv, 2), "argv[2]", "/tmp", 4, __FILE__, __LINE__);
	}
	json_object_put(obj);

	/* No unit: no key. Truncated argv, empty arguments, escapes inside arguments. */
	static const char args[] = "a\0\0b \"q\"\0tab\there\0\xc3\xa9\xff";
	r = make_exec();
	memset(r.argv, 0, sizeof(r.argv));
	memcpy(r.argv, args, sizeof(args));
	r.argv_len = sizeof(args);
	r.argc = 40;
	r.argv_truncated = 1;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	expect_type_keys(obj, "exec", NULL, NULL);
	expect_u64(obj, "argc", 40);
	expect_bool(obj, "argv_truncated", true);
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	if (argv) {
		ASSERT(json_object_array_length(argv) == 5);
		expect_bytes_at(json_object_array_get_idx(argv, 0), "argv[0]", "a", 1, __FILE__, __LINE__);
		expect_bytes_at(json_object_array_get_idx(argv, 1), "argv[1]", "", 0, __FILE__, __LINE__);
		expect_bytes_at(
			json_object_array_get_idx(argv, 2), "argv[2]", "b \"q\"", 5, __FILE__, __LINE__);
		expect_bytes_at(
			json_object_array_get_idx(argv, 3), "argv[3]", "tab\there", 8, __FILE__, __LINE__);
		expect_bytes_at(
			json_object_array_get_idx(argv, 4),
			"argv[4]",
			"\xc3\xa9\xef\xbf\xbd",
			5,
			__FILE__,
			__LINE__);
	}
	json_object_put(obj);

	/* argv_len 0: an empty array, whatever is in argv[]. */
	r = make_exec();
	r.argv_len = 0;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	ASSERT(argv && json_object_array_length(argv) == 0);
	json_object_put(obj);

	/* Only argv_len bytes count: "ls\0" of "ls\0-l\0/tmp\0". */
	r = make_exec();
	r.argv_len = 3;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	ASSERT(argv && json_object_array_length(argv) == 1);
	json_object_put(obj);

	/* Long plain arguments up to the very end of argv[]: the 16-byte loads must stop at the
	 * array and the arguments at their NULs. */
	for (size_t split = 1; split < 40; split++) {
		size_t cut = PERFRELAY_ARGV_LEN - 1 - split;

		r = make_exec();
		memset(r.argv, 'x', sizeof(r.argv));
		r.argv[cut] = 0;
		r.argv[PERFRELAY_ARGV_LEN - 1] = 0;
		r.argv_len = PERFRELAY_ARGV_LEN;
		ev = decode_ok(&r, sizeof(r));
		obj = encode_parse(&ev, NULL);
		argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
		ASSERT(argv && json_object_array_length(argv) == 2);
		if (argv && json_object_array_length(argv) == 2) {
			expect_sanitized_at(
				json_object_array_get_idx(argv, 0), "argv[0]", r.argv, cut, __FILE__, __LINE__);
			expect_sanitized_at(
				json_object_array_get_idx(argv, 1),
				"argv[1]",
				r.argv + cut + 1,
				split - 1,
				__FILE__,
				__LINE__);
		}
		json_object_put(obj);
	}

	/* A full argv of empty arguments. */
	r = make_exec();
	memset(r.argv, 0, sizeof(r.argv));
	r.argv_len = PERFRELAY_ARGV_LEN;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	ASSERT(argv && json_object_array_length(argv) == PERFRELAY_ARGV_LEN);
	json_object_put(obj);
}

static void test_exit(void) {
	struct perfrelay_exit r = make_exit();
	DecodedEvent ev = decode_ok(&r, sizeof(r));
	json_object *obj = encode_parse(&ev, NULL);

	expect_type_keys(obj, "exit", NULL, NULL);
	expect_common(obj, &r.hdr, "exit");
	expect_u64(obj, "pid", 777);
	expect_u64(obj, "ppid", 776);
	expect_u64(obj, "uid", 0);
	expect_s64(obj, "exit_code", 3);
	expect_u64(obj, "signal", 9);
	expect_u64(obj, "runtime_ns", 123456789012ull);
	expect_str(obj, "comm", "sleep");
	json_object_put(obj);

	/* Signed and extreme values. */
	r.exit_code = INT32_MIN;
	r.signal = UINT32_MAX;
	r.runtime_ns = UINT64_MAX;
	r.pid = UINT32_MAX;
	r.hdr.ts_ns = 0;
	r.hdr.seq = 0;
	r.hdr.cpu = 0;
	r.hdr.producer = 0;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, "user@1000.service");
	expect_common(obj, &r.hdr, "exit");
	expect_s64(obj, "exit_code", INT32_MIN);
	expect_u64(obj, "signal", UINT32_MAX);
	expect_u64(obj, "runtime_ns", UINT64_MAX);
	expect_u64(obj, "pid", UINT32_MAX);
	expect_str(obj, "unit", "user@1000.service");
	json_object_put(obj);

	r.exit_code = -1;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	expect_s64(obj, "exit_code", -1);
	json_object_put(obj);
}

static void test_fork(void) {
	struct perfrelay_fork r = make_fork();
	DecodedEvent ev = decode_ok(&r, sizeof(r));
	json_object *obj = encode_parse(&ev, NULL);

	expect_type_keys(obj, "fork", NULL, NULL);
	expect_common(obj, &r.hdr, "fork");
	expect_u64(obj, "parent_pid", 100);
	expect_u64(obj, "child_pid", 102);
	expect_u64(obj, "child_tgid", 101);
	expect_u64(obj, "uid", 65534);
	expect_str(obj, "comm", "bash");
	json_object_put(obj);
}

static void test_open(void) {
	struct perfrelay_open r = make_open();
	DecodedEvent ev = decode_ok(&r, sizeof(r));
	json_object *obj = encode_parse(&ev, NULL);

	expect_type_keys(obj, "open", NULL, NULL);
	expect_common(obj, &r.hdr, "open");
	expect_u64(obj, "pid", 555);
	expect_u64(obj, "uid", 1001);
	expect_str(obj, "comm", "cat");
	expect_str(obj, "path", "/etc/passwd");
	expect_s64(obj, "flags", 0x80000);
	expect_s64(obj, "result", -2);
	json_object_put(obj);

	/* A path filling its array. */
	memset(r.path, 'p', sizeof(r.path) - 1);
	r.path[sizeof(r.path) - 1] = 0;
	r.flags = INT32_MIN;
	r.result = INT32_MAX;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	expect_sanitized(obj, "path", r.path);
	expect_s64(obj, "flags", INT32_MIN);
	expect_s64(obj, "result", INT32_MAX);
	json_object_put(obj);
}

static void test_connect(void) {
	static const struct {
		uint8_t addr[16];
		const char *text;
	} v6[] = {
		{ { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 }, "2001:db8::1" },
		{ { [15] = 1 }, "::1" },
		{ { 0 }, "::" },
		{ { [10] = 0xff, [11] = 0xff, 192, 0, 2, 1 }, "::ffff:192.0.2.1" },
		/* RFC 5952 4.2.2: a single zero group is not compressed. */
		{ { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1 }, "2001:db8:0:1:1:1:1:1" },
		/* 4.2.3: the first of two equal zero runs; 4.3: lowercase. */
		{ { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xab, 0xcd },
		  "2001:db8::1:0:0:abcd" },
		{ { 0xfe, 0x80, [8] = 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55 },
		  "fe80::211:22ff:fe33:4455" },
	};
	static const struct {
		uint8_t addr[4];
		const char *text;
	} v4[] = {
		{ { 192, 168, 0, 42 }, "192.168.0.42" },       { { 0, 0, 0, 0 }, "0.0.0.0" },
		{ { 255, 255, 255, 255 }, "255.255.255.255" }, { { 10, 0, 100, 9 }, "10.0.100.9" },
		{ { 1, 22, 199, 200 }, "1.22.199.200" },
	};
	struct perfrelay_connect r;
	DecodedEvent ev;
	json_object *obj;

	for (size_t i = 0; i < ELEMENTS(v4); i++) {
		r = make_connect();
		memset(r.addr, 0xee, sizeof(r.addr)); /* bytes past the IPv4 address are ignored */
		memcpy(r.addr, v4[i].addr, 4);
		ev = decode_ok(&r, sizeof(r));
		obj = encode_parse(&ev, NULL);
		expect_type_keys(obj, "connect", NULL, NULL);
		expect_common(obj, &r.hdr, "connect");
		expect_u64(obj, "pid", 999);
		expect_u64(obj, "uid", 33);
		expect_str(obj, "comm", "curl");
		expect_u64(obj, "family", AF_INET);
		expect_str(obj, "family_name", "inet");
		expect_str(obj, "address", v4[i].text);
		expect_u64(obj, "port", 443);
		expect_s64(obj, "result", -115);
		json_object_put(obj);
	}

	for (size_t i = 0; i < ELEMENTS(v6); i++) {
		r = make_connect();
		r.family = AF_INET6;
		r.port = 65535;
		r.result = 0;
		memcpy(r.addr, v6[i].addr, 16);
		ev = decode_ok(&r, sizeof(r));
		obj = encode_parse(&ev, NULL);
		expect_type_keys(obj, "connect", NULL, NULL);
		expect_u64(obj, "family", AF_INET6);
		expect_str(obj, "family_name", "inet6");
		expect_str(obj, "address", v6[i].text);
		expect_u64(obj, "port", 65535);
		expect_s64(obj, "result", 0);
		json_object_put(obj);
	}

	/* AF_UNIX: named, but the record carries no address. */
	r = make_connect();
	r.family = AF_UNIX;
	r.port = 0;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	expect_type_keys(obj, "connect", "address", NULL);
	expect_str(obj, "family_name", "unix");
	expect_u64(obj, "family", AF_UNIX);
	json_object_put(obj);

	/* Other families: the number only. */
	r.family = AF_NETLINK;
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	expect_type_keys(obj, "connect, an unnamed family", NULL, NULL);
	expect_u64(obj, "family", AF_NETLINK);
	json_object_put(obj);
}

static void test_bench(void) {
	uint8_t buf[sizeof(struct perfrelay_bench) + 100];
	struct perfrelay_bench r = { .hdr = make_hdr(PERFRELAY_TYPE_BENCH, sizeof(buf)), .call = 31337 };
	DecodedEvent ev;
	json_object *obj;

	memset(buf, 0xab, sizeof(buf));
	memcpy(buf, &r, sizeof(r));
	ev = decode_ok(buf, sizeof(buf));
	obj = encode_parse(&ev, NULL);
	expect_type_keys(obj, "bench", NULL, NULL);
	expect_common(obj, &r.hdr, "bench");
	expect_u64(obj, "call", 31337);
	expect_u64(obj, "size", sizeof(buf));
	json_object_put(obj);
}

static void check_unknown_payload(const uint8_t *payload, size_t n, uint16_t type) {
	uint8_t *rec = malloc(sizeof(struct perfrelay_hdr) + n), *back = malloc(n + 3);
	struct perfrelay_hdr h = make_hdr(type, (uint16_t) (sizeof(h) + n));
	json_object *obj, *p;
	DecodedEvent ev;

	if (!rec || !back)
		abort();
	memcpy(rec, &h, sizeof(h));
	memcpy(rec + sizeof(h), payload, n);
	ev = decode_ok(rec, sizeof(h) + n);
	obj = encode_parse(&ev, NULL);
	expect_type_keys(obj, "unknown", NULL, NULL);
	expect_common(obj, &h, "unknown");
	expect_u64(obj, "type_id", type);
	p = get_at(obj, "payload", json_type_string, __FILE__, __LINE__);
	if (p) {
		ssize_t m = b64_decode(json_object_get_string(p), (size_t) json_object_get_string_len(p), back);

		ASSERT(m == (ssize_t) n);
		ASSERT(m >= 0 && memcmp(back, payload, n) == 0);
	}
	json_object_put(obj);
	free(rec);
	free(back);
}

static void test_unknown(void) {
	/* RFC 4648 section 10 test vectors, as exact text. */
	static const char *const vectors[][2] = {
		{ "", "" },
		{ "f", "Zg==" },
		{ "fo", "Zm8=" },
		{ "foo", "Zm9v" },
		{ "foob", "Zm9vYg==" },
		{ "fooba", "Zm9vYmE=" },
		{ "foobar", "Zm9vYmFy" },
	};
	uint8_t rec[64], *big;
	size_t max = PERFRELAY_RECORD_MAX - sizeof(struct perfrelay_hdr);

	for (size_t i = 0; i < ELEMENTS(vectors); i++) {
		size_t n = strlen(vectors[i][0]);
		struct perfrelay_hdr h = make_hdr(0x8001, (uint16_t) (sizeof(h) + n));
		char want[64];
		DecodedEvent ev;
		ssize_t len;

		memcpy(rec, &h, sizeof(h));
		memcpy(rec + sizeof(h), vectors[i][0], n);
		ev = decode_ok(rec, sizeof(h) + n);
		len = encode_json(&ev, NULL, linebuf, sizeof(linebuf));
		snprintf(want, sizeof(want), ",\"type_id\":32769,\"payload\":\"%s\"}\n", vectors[i][1]);
		ASSERT(len > (ssize_t) strlen(want));
		ASSERT(len > 0 && memcmp(linebuf + len - strlen(want), want, strlen(want)) == 0);
		ASSERT(strncmp(linebuf, "{\"type\":\"unknown\",", 18) == 0);
	}

	/* Every byte value, in every position of a base64 quantum. */
	big = malloc(max);
	if (!big)
		abort();
	for (size_t i = 0; i < max; i++)
		big[i] = (uint8_t) (i * 7 + i / 256);
	for (size_t n = 0; n < 600; n++)
		check_unknown_payload(big, n, PERFRELAY_TYPE_THIRD_PARTY_MIN);
	/* The largest payload a record can have. */
	check_unknown_payload(big, max, 0xffff);
	/* Unnamed types below the third-party range are unknown too. */
	check_unknown_payload(big, 10, 7);
	free(big);
}

/* In the ring the record starts 12 bytes into an 8-aligned perf record, so its u64 fields are
 * misaligned; the output must not depend on where the record sits (UBSan checks the loads). */
static void test_unaligned(void) {
	struct perfrelay_exec r = make_exec();
	uint64_t storage[(sizeof(r) + 16) / 8 + 1];
	uint8_t *base = (uint8_t *) storage;
	char *want = malloc(ENCODE_JSON_MAX);
	DecodedEvent ev;
	ssize_t n, m;

	if (!want)
		abort();
	ev = decode_ok(&r, sizeof(r));
	n = encode_json(&ev, "u.service", want, ENCODE_JSON_MAX);
	ASSERT(n > 0);
	for (size_t off = 1; off < 16; off++) {
		memcpy(base + off, &r, sizeof(r));
		ev = decode_ok(base + off, sizeof(r));
		m = encode_json(&ev, "u.service", linebuf, sizeof(linebuf));
		ASSERT(m == n && memcmp(linebuf, want, (size_t) n) == 0);
	}
	free(want);
}

/* encode_json() takes any DecodedEvent; one whose record changed after decoding (argv_len no
 * longer ending at a NUL, or beyond the array) still may not read past argv[]. */
static void test_undecoded_bounds(void) {
	struct perfrelay_exec r = make_exec(); /* argv "ls\0-l\0/tmp\0" */
	DecodedEvent ev = decode_ok(&r, sizeof(r));
	json_object *obj, *argv;

	r.argv_len = 9; /* "ls\0-l\0/tm" */
	obj = encode_parse(&ev, NULL);
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	ASSERT(argv && json_object_array_length(argv) == 3);
	if (argv && json_object_array_length(argv) == 3)
		expect_bytes_at(json_object_array_get_idx(argv, 2), "argv[2]", "/tm", 3, __FILE__, __LINE__);
	json_object_put(obj);

	memset(r.argv, 'z', sizeof(r.argv));
	r.argv_len = UINT16_MAX; /* clamped to the array */
	obj = encode_parse(&ev, NULL);
	argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
	ASSERT(argv && json_object_array_length(argv) == 1);
	if (argv && json_object_array_length(argv) == 1)
		ASSERT(json_object_get_string_len(json_object_array_get_idx(argv, 0)) == PERFRELAY_ARGV_LEN);
	json_object_put(obj);

	/* Unterminated fields stop at the end of their arrays. */
	memset(r.comm, 'c', sizeof(r.comm));
	obj = encode_parse(&ev, NULL);
	expect_bytes_at(
		get_at(obj, "comm", json_type_string, __FILE__, __LINE__),
		"comm",
		r.comm,
		sizeof(r.comm),
		__FILE__,
		__LINE__);
	json_object_put(obj);
}

/* ---- tests: strings ---- */

/* Exact escape forms: json-c would accept \u000a for \n, the spec of our output does not. */
static void test_escape_text(void) {
	static const struct {
		const char *in;
		const char *out;
	} cases[] = {
		{ "", "\"\"" },
		{ "plain", "\"plain\"" },
		{ "a\"b\\c/d", "\"a\\\"b\\\\c/d\"" },
		{ "\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"" },
		{ "\x01\x1f\x7f\x0b", "\"\\u0001\\u001f\\u007f\\u000b\"" },
		{ "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"" },
		{ "\x80", "\"\\ufffd\"" },
		{ "\xc0\xaf", "\"\\ufffd\\ufffd\"" },                       /* overlong '/' */
		{ "\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"" },            /* overlong, 3 bytes */
		{ "\xf0\x80\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"" }, /* overlong, 4 bytes */
		{ "\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"" },            /* U+D800 */
		{ "\xed\xbf\xbf", "\"\\ufffd\\ufffd\\ufffd\"" },            /* U+DFFF */
		{ "\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"" }, /* U+110000 */
		{ "\xe4\xb8", "\"\\ufffd\\ufffd\"" },                       /* truncated at the end */
		{ "\xe4\xb8x", "\"\\ufffd\\ufffdx\"" },                     /* truncated by ASCII */
		{ "\xf5\xff\xfe", "\"\\ufffd\\ufffd\\ufffd\"" },
		{ "a\xc3", "\"a\\ufffd\"" },
		/* The boundaries of each well-formed range pass through. */
		{ "\xc2\x80\xdf\xbf", "\"\xc2\x80\xdf\xbf\"" },
		{ "\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf",
		  "\"\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf\"" },
		{ "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", "\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"" },
		/* Long plain runs around a special byte (the 8-byte fast path). */
		{ "0123456789abcdef\"0123456789abcdef", "\"0123456789abcdef\\\"0123456789abcdef\"" },
		{ "01234567\xc3\xa9"
		  "89abcdefghij",
		  "\"01234567\xc3\xa9"
		  "89abcdefghij\"" },
	};
	char out[512];

	for (size_t i = 0; i < ELEMENTS(cases); i++) {
		ssize_t n = encode_json_string(cases[i].in, strlen(cases[i].in), out, sizeof(out));

		if (n != (ssize_t) strlen(cases[i].out) || memcmp(out, cases[i].out, (size_t) n) != 0) {
			fprintf(stderr,
				"%s:%d: case %zu: got %.*s, expected %s\n",
				__FILE__,
				__LINE__,
				i,
				(int) (n > 0 ? n : 0),
				out,
				cases[i].out);
			failures++;
		}
	}

	/* len bounds the input, and so does a NUL before it. */
	ASSERT(encode_json_string("abcdef", 3, out, sizeof(out)) == 5 && memcmp(out, "\"abc\"", 5) == 0);
	ASSERT(encode_json_string("ab\0cd", 5, out, sizeof(out)) == 4 && memcmp(out, "\"ab\"", 4) == 0);
	ASSERT(encode_json_string("abc", 0, out, sizeof(out)) == 2);
}

/* Puts s (at most the field size - 1 bytes) into comm/path of an open record, encodes, parses
 * and compares with the reference. */
static void check_open_strings(const char *comm, size_t comm_len, const char *path, size_t path_len) {
	struct perfrelay_open r = make_open();
	DecodedEvent ev;
	json_object *obj;

	memset(r.comm, 0, sizeof(r.comm));
	memset(r.path, 0, sizeof(r.path));
	memcpy(r.comm, comm, comm_len);
	memcpy(r.path, path, path_len);
	ev = decode_ok(&r, sizeof(r));
	obj = encode_parse(&ev, NULL);
	expect_sanitized(obj, "comm", r.comm);
	expect_sanitized(obj, "path", r.path);
	json_object_put(obj);
}

static void test_strings_roundtrip(void) {
	char s[256];
	static const char *const samples[] = {
		"quote\" back\\slash",
		"caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
		"\x80lone continuation",
		"trunc\xe4\xb8",
		"over\xc0\x80long \xe0\x80\x80 \xf0\x80\x80\x80",
		"surrogate \xed\xa0\x80\xed\xb0\x80",
		"too big \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
		"del\x7f",
	};

	/* Every control byte, alone and inside text. */
	for (int c = 1; c < 0x20; c++) {
		s[0] = (char) c;
		snprintf(s + 1, sizeof(s) - 1, "x%cy", c);
		check_open_strings(s, 1, s, strlen(s));
	}
	for (size_t i = 0; i < ELEMENTS(samples); i++)
		check_open_strings(
			samples[i], strnlen(samples[i], PERFRELAY_COMM_LEN - 1), samples[i], strlen(samples[i]));

	/* One special byte (or sequence) at every position of a plain string, so that it falls
	 * at every place of a 16-byte chunk and of the tail after the last chunk. */
	{
		static const char *const specials[] = {
			"\"",   "\\",      "\x01", "\x7f", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80",
			"\xff", "\xe4\xb8"
		};

		for (size_t sp = 0; sp < ELEMENTS(specials); sp++)
			for (size_t pos = 0; pos + strlen(specials[sp]) < PERFRELAY_PATH_LEN; pos++) {
				size_t n = strlen(specials[sp]);

				memset(s, 'a', sizeof(s));
				memcpy(s + pos, specials[sp], n);
				check_open_strings(
					s,
					pos + n < PERFRELAY_COMM_LEN ? pos + n : PERFRELAY_COMM_LEN - 1,
					s,
					pos + n);
				check_open_strings(s, PERFRELAY_COMM_LEN - 1, s, PERFRELAY_PATH_LEN - 1);
			}
	}

	/* Whole strings of one byte value, for every non-NUL byte. */
	for (int c = 1; c < 256; c++) {
		memset(s, c, sizeof(s));
		check_open_strings(s, PERFRELAY_COMM_LEN - 1, s, PERFRELAY_PATH_LEN - 1);
	}

	/* The U+FFFD replacement is the character itself after parsing. */
	{
		struct perfrelay_fork r = make_fork();
		DecodedEvent ev;
		json_object *obj;

		strcpy(r.comm,
		       "a\xff"
		       "b\xe9");
		ev = decode_ok(&r, sizeof(r));
		obj = encode_parse(&ev, NULL);
		expect_str(
			obj,
			"comm",
			"a\xef\xbf\xbd"
			"b\xef\xbf\xbd");
		json_object_put(obj);

		strcpy(r.comm, "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
		ev = decode_ok(&r, sizeof(r));
		obj = encode_parse(&ev, NULL);
		expect_str(obj, "comm", "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
		json_object_put(obj);
	}

	/* Units are escaped too; an impossible (too long) unit is left out. */
	{
		struct perfrelay_exit r = make_exit();
		DecodedEvent ev = decode_ok(&r, sizeof(r));
		char unit[300];
		json_object *obj;

		obj = encode_parse(&ev, "we\"ird\\\x01\xff.service");
		expect_str(obj, "unit", "we\"ird\\\x01\xef\xbf\xbd.service");
		json_object_put(obj);

		memset(unit, 'u', sizeof(unit));
		unit[255] = 0;
		obj = encode_parse(&ev, unit);
		expect_str(obj, "unit", unit);
		json_object_put(obj);

		unit[255] = 'u';
		unit[256] = 0;
		obj = encode_parse(&ev, unit);
		expect_type_keys(obj, "exit", NULL, NULL);
		json_object_put(obj);
	}
}

/* ---- tests: numbers ---- */

static void test_numbers(void) {
	uint64_t values[200];
	size_t n = 0;
	char out[64], want[64];

	values[n++] = 0;
	values[n++] = UINT64_MAX;
	values[n++] = UINT64_MAX - 1;
	values[n++] = (uint64_t) INT64_MAX;
	values[n++] = (uint64_t) INT64_MAX + 1;
	for (uint64_t p = 1, i = 0; i < 20; i++, p *= 10) {
		values[n++] = p - 1;
		values[n++] = p;
		values[n++] = p + 1;
	}
	for (unsigned b = 1; b < 64; b++) {
		values[n++] = (1ull << b) - 1;
		values[n++] = 1ull << b;
	}
	for (size_t i = 0; i < n; i++) {
		ssize_t len = encode_lost_json(values[i], out, sizeof(out));
		int wl = snprintf(want, sizeof(want), "{\"type\":\"lost\",\"count\":%" PRIu64 "}\n", values[i]);

		if (len != wl || memcmp(out, want, (size_t) wl) != 0) {
			fprintf(stderr,
				"%s:%d: %" PRIu64 " encoded as %.*s\n",
				__FILE__,
				__LINE__,
				values[i],
				(int) (len > 0 ? len : 0),
				out);
			failures++;
		}
	}
}

/* ---- tests: buffer sizes ---- */

/* Every size below the line's length fails with -ENOBUFS (valgrind watches the writes: each
 * buffer is a heap block of exactly that size); the exact size succeeds with the same bytes. */
static void check_all_sizes(const DecodedEvent *ev, const char *unit) {
	char *full = malloc(ENCODE_JSON_MAX), *b;
	ssize_t need = encode_json(ev, unit, full, ENCODE_JSON_MAX), r;

	ASSERT(need > 0);
	if (need <= 0) {
		free(full);
		return;
	}
	for (size_t size = 0; size < (size_t) need; size++) {
		b = malloc(size > 0 ? size : 1);
		r = encode_json(ev, unit, b, size);
		if (r != -ENOBUFS) {
			fprintf(stderr, "%s:%d: size %zu of %zd: got %zd\n", __FILE__, __LINE__, size, need, r);
			failures++;
		}
		free(b);
	}
	b = malloc((size_t) need);
	r = encode_json(ev, unit, b, (size_t) need);
	ASSERT(r == need);
	ASSERT(r == need && memcmp(b, full, (size_t) need) == 0);
	free(b);
	free(full);
}

static void test_sizes(void) {
	/* Strings mixing every kind of output (plain runs, 2- and 6-byte escapes, valid multi-byte,
	 * replacements) so that the buffer ends inside each of them for some size. */
	static const char mix[] =
		"ab\"\\\n\x01\x7f\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xff\xe4\xb8xyz01234567890123";
	DecodedEvent ev;

	{
		struct perfrelay_exec r = make_exec();
		static const char args[] = "ls\0\0-\x01\xff\"\0\xe4\xb8\xad";

		memcpy(r.comm, mix, sizeof(r.comm) - 1);
		memcpy(r.filename, mix, sizeof(mix));
		memset(r.argv, 0, sizeof(r.argv));
		memcpy(r.argv, args, sizeof(args));
		r.argv_len = sizeof(args);
		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, "a\"b.service");
		check_all_sizes(&ev, NULL);
	}
	{
		struct perfrelay_exit r = make_exit();

		memcpy(r.comm, mix, sizeof(r.comm) - 1);
		r.exit_code = -100;
		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
	}
	{
		struct perfrelay_fork r = make_fork();

		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
	}
	{
		struct perfrelay_open r = make_open();

		memcpy(r.path, mix, sizeof(mix));
		memcpy(r.comm, mix + 3, sizeof(r.comm) - 1);
		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
	}
	{
		struct perfrelay_connect r = make_connect();

		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
		r.family = AF_INET6;
		r.addr[0] = 0x20;
		r.addr[15] = 1;
		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
		r.family = AF_UNIX;
		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
	}
	{
		struct perfrelay_bench r = { .hdr = make_hdr(PERFRELAY_TYPE_BENCH, sizeof(r)), .call = 1 };

		ev = decode_ok(&r, sizeof(r));
		check_all_sizes(&ev, NULL);
	}
	{
		uint8_t rec[sizeof(struct perfrelay_hdr) + 100];
		struct perfrelay_hdr h = make_hdr(0x8000, sizeof(rec));

		for (size_t i = 0; i < sizeof(rec); i++)
			rec[i] = (uint8_t) (i * 37);
		memcpy(rec, &h, sizeof(h));
		ev = decode_ok(rec, sizeof(rec));
		check_all_sizes(&ev, NULL);
		h.size = sizeof(h) + 2; /* ends in "==" */
		memcpy(rec, &h, sizeof(h));
		ev = decode_ok(rec, sizeof(h) + 2);
		check_all_sizes(&ev, NULL);
	}

	/* encode_lost_json and encode_json_string, the same way. */
	{
		char full[64], *b;
		ssize_t need = encode_lost_json(UINT64_MAX, full, sizeof(full)), r;

		ASSERT(need == (ssize_t) strlen("{\"type\":\"lost\",\"count\":18446744073709551615}\n"));
		for (size_t size = 0; size < (size_t) need; size++) {
			b = malloc(size > 0 ? size : 1);
			ASSERT(encode_lost_json(UINT64_MAX, b, size) == -ENOBUFS);
			free(b);
		}
		b = malloc((size_t) need);
		r = encode_lost_json(UINT64_MAX, b, (size_t) need);
		ASSERT(r == need && memcmp(b, full, (size_t) need) == 0);
		free(b);
	}
	{
		char full[256], *b;
		ssize_t need = encode_json_string(mix, sizeof(mix), full, sizeof(full)), r;

		ASSERT(need > 0);
		for (size_t size = 0; size < (size_t) need; size++) {
			b = malloc(size > 0 ? size : 1);
			ASSERT(encode_json_string(mix, sizeof(mix), b, size) == -ENOBUFS);
			free(b);
		}
		b = malloc((size_t) need);
		r = encode_json_string(mix, sizeof(mix), b, (size_t) need);
		ASSERT(r == need && memcmp(b, full, (size_t) need) == 0);
		free(b);
	}
}

/* ENCODE_JSON_MAX is what the daemon sizes its buffers by: the worst record of every type must
 * fit. Worst = longest numbers, every string byte needing 6 output bytes, the longest unit. */
static void test_worst_case(void) {
	char unit[256];
	size_t worst = 0;
	ssize_t n;
	DecodedEvent ev;

	memset(unit, 0x01, 255);
	unit[255] = 0;

#define WORST_HDR(h)                                        \
	do {                                                \
		(h).ts_ns = UINT64_MAX;                     \
		(h).seq = UINT64_MAX;                       \
		(h).cpu = UINT32_MAX;                       \
		(h).producer = PERFRELAY_MAX_PRODUCERS - 1; \
	} while (0)
#define CHECK_WORST(ev, what)                                           \
	do {                                                            \
		n = encode_json(&(ev), unit, linebuf, sizeof(linebuf)); \
		ASSERT(n > 0 && (size_t) n <= ENCODE_JSON_MAX);         \
		json_object_put(parse_line(linebuf, n));                \
		if (n > 0 && (size_t) n > worst)                        \
			worst = (size_t) n;                             \
		printf("  worst %-8s %zd bytes\n", what, n);            \
	} while (0)

	for (int pattern = 0; pattern < 4; pattern++) {
		struct perfrelay_exec r = make_exec();
		uint8_t fill = pattern == 1 ? 0xff : 0x01;

		WORST_HDR(r.hdr);
		r.pid = r.ppid = r.uid = r.gid = UINT32_MAX;
		r.cgroup_id = UINT64_MAX;
		r.argc = UINT16_MAX;
		r.argv_truncated = 0; /* "false" is the longer one */
		memset(r.comm, fill, sizeof(r.comm) - 1);
		memset(r.filename, fill, sizeof(r.filename) - 1);
		r.comm[sizeof(r.comm) - 1] = r.filename[sizeof(r.filename) - 1] = 0;
		memset(r.argv, fill, sizeof(r.argv));
		if (pattern == 2)
			for (size_t i = 1; i < sizeof(r.argv); i += 2)
				r.argv[i] = 0; /* many one-byte arguments */
		if (pattern == 3)
			memset(r.argv, 0, sizeof(r.argv)); /* many empty arguments */
		r.argv[sizeof(r.argv) - 1] = 0;
		r.argv_len = PERFRELAY_ARGV_LEN;
		/* Schema 3's context at its longest: every ancestor, paths and names of bytes that
		 * each take an escape, the largest numbers. */
		r.ids.exec_id = r.ids.parent_exec_id = UINT64_MAX;
		r.n_ancestors = PERFRELAY_ANCESTORS_MAX;
		for (size_t i = 0; i < PERFRELAY_ANCESTORS_MAX; i++) {
			r.ancestors[i].exec_id = UINT64_MAX;
			r.ancestors[i].pid = UINT32_MAX;
			memset(r.ancestors[i].comm, fill, sizeof(r.ancestors[i].comm) - 1);
		}
		r.exe_dev = UINT32_MAX;
		r.exe_ino = UINT64_MAX;
		r.prev_exec_id = UINT64_MAX;
		memset(r.exe, fill, sizeof(r.exe) - 1);
		memset(r.cwd, fill, sizeof(r.cwd) - 1);
		ev = decode_ok(&r, sizeof(r));
		CHECK_WORST(ev, "exec");
	}
	{
		struct perfrelay_exit r = make_exit();

		WORST_HDR(r.hdr);
		r.pid = r.ppid = r.uid = r.signal = UINT32_MAX;
		r.exit_code = INT32_MIN;
		r.runtime_ns = UINT64_MAX;
		memset(r.comm, 0x01, sizeof(r.comm) - 1);
		ev = decode_ok(&r, sizeof(r));
		CHECK_WORST(ev, "exit");
	}
	{
		struct perfrelay_fork r = make_fork();

		WORST_HDR(r.hdr);
		r.parent_pid = r.child_pid = r.child_tgid = r.uid = UINT32_MAX;
		memset(r.comm, 0x01, sizeof(r.comm) - 1);
		ev = decode_ok(&r, sizeof(r));
		CHECK_WORST(ev, "fork");
	}
	{
		struct perfrelay_open r = make_open();

		WORST_HDR(r.hdr);
		r.pid = r.uid = UINT32_MAX;
		r.flags = r.result = INT32_MIN;
		memset(r.comm, 0x01, sizeof(r.comm) - 1);
		memset(r.path, 0x01, sizeof(r.path) - 1);
		ev = decode_ok(&r, sizeof(r));
		CHECK_WORST(ev, "open");
	}
	{
		struct perfrelay_connect r = make_connect();

		WORST_HDR(r.hdr);
		r.pid = r.uid = UINT32_MAX;
		r.result = INT32_MIN;
		r.family = AF_INET6;
		r.port = UINT16_MAX;
		memset(r.addr, 0xff, sizeof(r.addr));
		memset(r.comm, 0x01, sizeof(r.comm) - 1);
		ev = decode_ok(&r, sizeof(r));
		CHECK_WORST(ev, "connect");
	}
	{
		uint8_t *rec = calloc(1, PERFRELAY_RECORD_MAX);
		struct perfrelay_hdr h = make_hdr(UINT16_MAX, PERFRELAY_RECORD_MAX);

		if (!rec)
			abort();
		WORST_HDR(h);
		memcpy(rec, &h, sizeof(h));
		ev = decode_ok(rec, PERFRELAY_RECORD_MAX);
		CHECK_WORST(ev, "unknown");
		h.type = PERFRELAY_TYPE_BENCH;
		memcpy(rec, &h, sizeof(h));
		ev = decode_ok(rec, PERFRELAY_RECORD_MAX);
		CHECK_WORST(ev, "bench");
		free(rec);
	}
	printf("  worst line %zu bytes, ENCODE_JSON_MAX %u\n", worst, ENCODE_JSON_MAX);
#undef WORST_HDR
#undef CHECK_WORST
}

/* ---- tests: random strings ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void) {
	/* xorshift64*: fixed seed, same sequence on every libc. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* Random non-NUL bytes biased towards what is interesting to an escaper: controls, quotes,
 * high bytes, and whole valid or broken UTF-8 sequences. Returns the length (< max). */
static size_t rand_string(char *dst, size_t max) {
	size_t len = max > 1 ? rng() % max : 0, i = 0;

	while (i < len) {
		unsigned kind = rng() % 10;
		uint8_t c;

		if (kind == 0 && i + 4 <= len) {
			/* a valid 2-, 3- or 4-byte sequence */
			uint32_t cp;
			unsigned bytes = 2 + rng() % 3;

			if (bytes == 2)
				cp = 0x80 + rng() % (0x800 - 0x80);
			else if (bytes == 3) {
				do
					cp = 0x800 + rng() % (0x10000 - 0x800);
				while (cp >= 0xd800 && cp <= 0xdfff);
			} else
				cp = 0x10000 + rng() % (0x110000 - 0x10000);
			if (bytes == 2) {
				dst[i++] = (char) (0xc0 | cp >> 6);
			} else if (bytes == 3) {
				dst[i++] = (char) (0xe0 | cp >> 12);
				dst[i++] = (char) (0x80 | ((cp >> 6) & 0x3f));
			} else {
				dst[i++] = (char) (0xf0 | cp >> 18);
				dst[i++] = (char) (0x80 | ((cp >> 12) & 0x3f));
				dst[i++] = (char) (0x80 | ((cp >> 6) & 0x3f));
			}
			dst[i++] = (char) (0x80 | (cp & 0x3f));
			continue;
		}
		if (kind <= 3)
			c = (uint8_t) (0x20 + rng() % 0x5f);
		else if (kind == 4)
			c = (uint8_t) (1 + rng() % 0x1f);
		else if (kind == 5)
			c = "\"\\\x7f/"[rng() % 4];
		else
			c = (uint8_t) (0x80 + rng() % 0x80);
		dst[i++] = (char) c;
	}
	return len;
}

static void fill_string(char *field, size_t size) {
	memset(field, 0, size);
	rand_string(field, size);
}

/* Decodes from an exact-size heap copy of the record, so that valgrind flags any read past its
 * end (the strings of exit, fork and connect records end where the record ends). */
static DecodedEvent decode_heap(const void *rec, size_t size, void **ret_heap) {
	void *copy = malloc(size);

	if (!copy)
		abort();
	memcpy(copy, rec, size);
	*ret_heap = copy;
	return decode_ok(copy, size);
}

/* The line must also be exact at its own size and fail one byte short. */
static void check_exact_size(const DecodedEvent *ev, const char *unit, ssize_t need) {
	char *b = malloc((size_t) need);

	ASSERT(encode_json(ev, unit, b, (size_t) need) == need);
	ASSERT(memcmp(b, linebuf, (size_t) need) == 0);
	ASSERT(encode_json(ev, unit, b, (size_t) need - 1) == -ENOBUFS);
	free(b);
}

static void test_random(void) {
	char unit[64];

	for (unsigned iter = 0; iter < 20000; iter++) {
		/* The records are built here, then copied to the heap for decoding. */
		union {
			struct perfrelay_exec exec;
			struct perfrelay_exit exit;
			struct perfrelay_fork fork;
			struct perfrelay_open open;
			struct perfrelay_connect connect;
		} rec;
		const char *u = NULL;
		json_object *obj = NULL;
		void *heap = NULL;
		DecodedEvent ev;
		ssize_t need;

		if (rng() % 4 == 0) {
			memset(unit, 0, sizeof(unit));
			rand_string(unit, sizeof(unit));
			u = unit;
		}

		switch (rng() % 5) {
		case 0: {
			struct perfrelay_exec *r = &rec.exec;
			size_t pos = 0, nargs = 0;
			json_object *argv;

			*r = make_exec();
			r->hdr.ts_ns = rng();
			r->hdr.seq = rng();
			r->pid = (uint32_t) rng();
			r->cgroup_id = rng();
			fill_string(r->comm, sizeof(r->comm));
			fill_string(r->filename, sizeof(r->filename));
			memset(r->argv, 0, sizeof(r->argv));
			while (pos < sizeof(r->argv) - 1 && rng() % 8 != 0) {
				size_t room = sizeof(r->argv) - 1 - pos;
				size_t k = rand_string(r->argv + pos, room < 40 ? room : 40);

				pos += k + 1; /* the NUL is already there */
				nargs++;
			}
			r->argv_len = (uint16_t) pos;
			ev = decode_heap(r, sizeof(*r), &heap);
			need = encode_json(&ev, u, linebuf, sizeof(linebuf));
			obj = parse_line(linebuf, need);
			expect_sanitized(obj, "comm", r->comm);
			expect_sanitized(obj, "filename", r->filename);
			expect_u64(obj, "pid", r->pid);
			expect_u64(obj, "ts", r->hdr.ts_ns);
			expect_u64(obj, "seq", r->hdr.seq);
			expect_u64(obj, "cgroup_id", r->cgroup_id);
			argv = get_at(obj, "argv", json_type_array, __FILE__, __LINE__);
			if (argv) {
				ASSERT(json_object_array_length(argv) == nargs);
				pos = 0;
				for (size_t a = 0; a < nargs && a < json_object_array_length(argv); a++) {
					size_t k = strlen(r->argv + pos);

					expect_sanitized_at(
						json_object_array_get_idx(argv, a),
						"argv[]",
						r->argv + pos,
						k,
						__FILE__,
						__LINE__);
					pos += k + 1;
				}
			}
			break;
		}
		case 1: {
			struct perfrelay_exit *r = &rec.exit;

			*r = make_exit();
			r->exit_code = (int32_t) rng();
			r->runtime_ns = rng();
			fill_string(r->comm, sizeof(r->comm));
			ev = decode_heap(r, sizeof(*r), &heap);
			need = encode_json(&ev, u, linebuf, sizeof(linebuf));
			obj = parse_line(linebuf, need);
			expect_sanitized(obj, "comm", r->comm);
			expect_s64(obj, "exit_code", r->exit_code);
			expect_u64(obj, "runtime_ns", r->runtime_ns);
			break;
		}
		case 2: {
			struct perfrelay_fork *r = &rec.fork;

			*r = make_fork();
			r->child_pid = (uint32_t) rng();
			fill_string(r->comm, sizeof(r->comm));
			ev = decode_heap(r, sizeof(*r), &heap);
			need = encode_json(&ev, u, linebuf, sizeof(linebuf));
			obj = parse_line(linebuf, need);
			expect_sanitized(obj, "comm", r->comm);
			expect_u64(obj, "child_pid", r->child_pid);
			break;
		}
		case 3: {
			struct perfrelay_open *r = &rec.open;

			*r = make_open();
			r->flags = (int32_t) rng();
			r->result = (int32_t) rng();
			fill_string(r->comm, sizeof(r->comm));
			fill_string(r->path, sizeof(r->path));
			ev = decode_heap(r, sizeof(*r), &heap);
			need = encode_json(&ev, u, linebuf, sizeof(linebuf));
			obj = parse_line(linebuf, need);
			expect_sanitized(obj, "comm", r->comm);
			expect_sanitized(obj, "path", r->path);
			expect_s64(obj, "flags", r->flags);
			expect_s64(obj, "result", r->result);
			break;
		}
		default: {
			struct perfrelay_connect *r = &rec.connect;

			*r = make_connect();
			r->port = (uint16_t) rng();
			r->result = (int32_t) rng();
			fill_string(r->comm, sizeof(r->comm));
			ev = decode_heap(r, sizeof(*r), &heap);
			need = encode_json(&ev, u, linebuf, sizeof(linebuf));
			obj = parse_line(linebuf, need);
			expect_sanitized(obj, "comm", r->comm);
			expect_u64(obj, "port", r->port);
			expect_s64(obj, "result", r->result);
			break;
		}
		}
		if (u)
			expect_sanitized(obj, "unit", unit);
		json_object_put(obj);
		if (need > 0)
			check_exact_size(&ev, u, need);
		free(heap);
		if (failures > 20) {
			fprintf(stderr, "too many failures, stopping at iteration %u\n", iter);
			return;
		}
	}
}

int main(void) {
	test_exec();
	test_exit();
	test_fork();
	test_open();
	test_connect();
	test_bench();
	test_unknown();
	test_unaligned();
	test_undecoded_bounds();
	test_escape_text();
	test_strings_roundtrip();
	test_numbers();
	test_sizes();
	test_worst_case();
	test_random();

	if (failures > 0) {
		fprintf(stderr, "test-encode: %u failure(s)\n", failures);
		return 1;
	}
	printf("test-encode: all passed\n");
	return 0;
}
