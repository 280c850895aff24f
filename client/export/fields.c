/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An event's fields as a flat list: the socket's JSON line (daemon/hub/encode.c) key for key. */
#include "export/fields.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hub/encode.h"
#include "kernel/counter-names.h"
#include "macro.h"

/* Formatted values of one event: exec ids (up to 11 of 16 digits), a device, an address. */
#define SCRATCH_FORMATTED 1024u
/* An invalid byte becomes U+FFFD, three bytes. */
#define MENDED_MAX(n)     (3u * (size_t) (n))

/* The putters are inlined into the walk, so that a literal key's length is a constant. */
#define _always_inline_ inline __attribute__((always_inline))

static int grow(ExportFields *o) {
	size_t n = MAX(o->allocated * 2, (size_t) 64);
	ExportField *p = realloc(o->f, n * sizeof(*p));

	if (!p)
		return -ENOMEM;
	o->f = p;
	o->allocated = n;
	return 0;
}

static _always_inline_ ExportField *next(ExportFields *o, const char *key, ExportFieldKind kind) {
	ExportField *f;

	if (_unlikely_(o->n == o->allocated) && grow(o) < 0)
		return NULL;
	f = &o->f[o->n++];
	f->key = key;
	f->klen = key ? (uint32_t) strlen(key) : 0;
	f->kind = kind;
	f->len = 0;
	f->u = 0;
	return f;
}

#define TRY_FIELD(o, key, kind)                             \
	({                                                  \
		ExportField *_f = next((o), (key), (kind)); \
		if (!_f)                                    \
			return -ENOMEM;                     \
		_f;                                         \
	})

static _always_inline_ int put_u(ExportFields *o, const char *key, uint64_t v) {
	TRY_FIELD(o, key, EXPORT_FIELD_UINT)->u = v;
	return 0;
}

static _always_inline_ int put_i(ExportFields *o, const char *key, int64_t v) {
	TRY_FIELD(o, key, EXPORT_FIELD_INT)->i = v;
	return 0;
}

static _always_inline_ int put_b(ExportFields *o, const char *key, bool v) {
	TRY_FIELD(o, key, EXPORT_FIELD_BOOL)->b = v;
	return 0;
}

static _always_inline_ int put_open(ExportFields *o, const char *key, ExportFieldKind kind) {
	TRY_FIELD(o, key, kind);
	return 0;
}

static _always_inline_ int put_end(ExportFields *o) {
	TRY_FIELD(o, NULL, EXPORT_FIELD_END);
	return 0;
}

static _always_inline_ int put_bytes(ExportFields *o, const char *key, const void *s, size_t len) {
	ExportField *f = TRY_FIELD(o, key, EXPORT_FIELD_BYTES);

	f->s = s;
	f->len = (uint32_t) len;
	return 0;
}

/* True when s[0..len) is valid UTF-8; plain ASCII, the common case, eight bytes at a time. */
static bool utf8_valid(const uint8_t *s, size_t len) {
	size_t i = 0;

	while (i < len) {
		uint64_t w;
		size_t k;

		if (len - i >= 8) {
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		k = encode_utf8_sequence_len(s + i, len - i);
		if (k == 0)
			return false;
		i += k;
	}
	return true;
}

/* A string of len bytes (no NUL among them): as it is when valid UTF-8, else a copy in the
 * scratch with each invalid byte replaced by U+FFFD, as the JSON line has it. The scratch has
 * room: the walk reserved MENDED_MAX of the record's size. */
/* The string, each invalid byte replaced by U+FFFD, in the scratch. */
static void mend(ExportFields *o, ExportField *f, const char *s, size_t len) {
	const uint8_t *u = (const uint8_t *) s;
	char *p = o->scratch + o->scratch_used;

	f->s = p;
	for (size_t i = 0; i < len;) {
		size_t k = u[i] < 0x80 ? 1 : encode_utf8_sequence_len(u + i, len - i);

		if (k == 0) {
			memcpy(p, "\xef\xbf\xbd", 3);
			p += 3;
			i++;
		} else {
			memcpy(p, s + i, k);
			p += k;
			i += k;
		}
	}
	f->len = (uint32_t) (p - f->s);
	o->scratch_used += f->len;
}

static _always_inline_ int put_string(ExportFields *o, const char *key, const char *s, size_t len) {
	ExportField *f = TRY_FIELD(o, key, EXPORT_FIELD_STRING);

	if (_likely_(utf8_valid((const uint8_t *) s, len))) {
		f->s = s;
		f->len = (uint32_t) len;
	} else
		mend(o, f, s, len);
	return 0;
}

/* A char array of `size` bytes holding a NUL (decode_event() checked that). */
static _always_inline_ int put_array_string(ExportFields *o, const char *key, const char *s, size_t size) {
	return put_string(o, key, s, strnlen(s, size));
}
#define PUT_ARRAY(o, key, rec, type, member) \
	put_array_string(o, key, FIELD_PTR(rec, type, member), FIELD_SIZE(type, member))

/* A formatted value, kept in the scratch. */
static int put_formatted(ExportFields *o, const char *key, const char *fmt, ...) _printf_(3, 4);
static int put_formatted(ExportFields *o, const char *key, const char *fmt, ...) {
	ExportField *f = TRY_FIELD(o, key, EXPORT_FIELD_STRING);
	size_t room = o->scratch_size - o->scratch_used;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->scratch + o->scratch_used, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= room)
		return -ENOBUFS; /* cannot happen: SCRATCH_FORMATTED is far above what is formatted */
	f->s = o->scratch + o->scratch_used;
	f->len = (uint32_t) n;
	o->scratch_used += (size_t) n;
	return 0;
}

/* A 64-bit id as 16 hex digits, as the JSON line has exec ids. */
static int put_hex64(ExportFields *o, const char *key, uint64_t v) {
	ExportField *f = TRY_FIELD(o, key, EXPORT_FIELD_STRING);
	char *p = o->scratch + o->scratch_used;

	for (int i = 15; i >= 0; i--, v >>= 4)
		p[i] = "0123456789abcdef"[v & 15];
	f->s = p;
	f->len = 16;
	o->scratch_used += 16;
	return 0;
}

#define TRY(expr)                       \
	do {                            \
		int _r = (expr);        \
		if (_unlikely_(_r < 0)) \
			return _r;      \
	} while (0)

static int walk_exec(ExportFields *o, const DecodedEvent *ev) {
	const uint8_t *rec = ev->record;
	const char *argv = FIELD_PTR(rec, struct perfrelay_exec, argv);
	size_t argv_len = MIN(
		(size_t) READ_FIELD(rec, struct perfrelay_exec, argv_len), (size_t) PERFRELAY_ARGV_LEN);

	TRY(put_u(o, "pid", READ_FIELD(rec, struct perfrelay_exec, pid)));
	TRY(put_u(o, "ppid", READ_FIELD(rec, struct perfrelay_exec, ppid)));
	TRY(put_u(o, "uid", READ_FIELD(rec, struct perfrelay_exec, uid)));
	TRY(put_u(o, "gid", READ_FIELD(rec, struct perfrelay_exec, gid)));
	TRY(PUT_ARRAY(o, "comm", rec, struct perfrelay_exec, comm));
	TRY(PUT_ARRAY(o, "filename", rec, struct perfrelay_exec, filename));
	TRY(put_open(o, "argv", EXPORT_FIELD_ARRAY));
	for (size_t pos = 0; pos < argv_len;) {
		size_t k = strnlen(argv + pos, argv_len - pos);

		TRY(put_string(o, NULL, argv + pos, k));
		pos += k + 1;
	}
	TRY(put_end(o));
	TRY(put_u(o, "argc", READ_FIELD(rec, struct perfrelay_exec, argc)));
	TRY(put_b(o, "argv_truncated", READ_FIELD(rec, struct perfrelay_exec, argv_truncated) != 0));
	TRY(put_u(o, "cgroup_id", READ_FIELD(rec, struct perfrelay_exec, cgroup_id)));
	if (ev->hdr.size >= sizeof(struct perfrelay_exec)) {
		uint32_t n = MIN(
			READ_FIELD(rec, struct perfrelay_exec, n_ancestors),
			(uint32_t) PERFRELAY_ANCESTORS_MAX);
		uint32_t dev = READ_FIELD(rec, struct perfrelay_exec, exe_dev);

		TRY(put_open(o, "ancestors", EXPORT_FIELD_ARRAY));
		for (uint32_t i = 0; i < n; i++) {
			TRY(put_open(o, NULL, EXPORT_FIELD_OBJECT));
			TRY(put_hex64(
				o, "exec_id", READ_FIELD(rec, struct perfrelay_exec, ancestors[i].exec_id)));
			TRY(put_u(o, "pid", READ_FIELD(rec, struct perfrelay_exec, ancestors[i].pid)));
			TRY(PUT_ARRAY(o, "comm", rec, struct perfrelay_exec, ancestors[i].comm));
			TRY(put_end(o));
		}
		TRY(put_end(o));
		if (FIELD_PTR(rec, struct perfrelay_exec, exe)[0])
			TRY(PUT_ARRAY(o, "exe", rec, struct perfrelay_exec, exe));
		TRY(put_formatted(o, "exe_dev", "%" PRIu32 ":%" PRIu32, dev >> 20, dev & 0xfffff));
		TRY(put_u(o, "exe_ino", READ_FIELD(rec, struct perfrelay_exec, exe_ino)));
		if (FIELD_PTR(rec, struct perfrelay_exec, cwd)[0])
			TRY(PUT_ARRAY(o, "cwd", rec, struct perfrelay_exec, cwd));
		TRY(put_hex64(o, "prev_exec_id", READ_FIELD(rec, struct perfrelay_exec, prev_exec_id)));
	}
	return 0;
}

static int walk_counter_values(ExportFields *o, const char *key, const struct perfrelay_counter_values *v) {
	TRY(put_open(o, key, EXPORT_FIELD_OBJECT));
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++)
		if (v->mask & (1u << i))
			TRY(put_u(o, counter_key_to_string(i), v->value[i]));
	TRY(put_end(o));
	return put_b(o, "scaled", (v->scaled & v->mask) != 0);
}

static int walk_exit(ExportFields *o, const DecodedEvent *ev) {
	const uint8_t *rec = ev->record;
	struct perfrelay_counter_values v;

	TRY(put_u(o, "pid", READ_FIELD(rec, struct perfrelay_exit, pid)));
	TRY(put_u(o, "ppid", READ_FIELD(rec, struct perfrelay_exit, ppid)));
	TRY(put_u(o, "uid", READ_FIELD(rec, struct perfrelay_exit, uid)));
	TRY(put_i(o, "exit_code", READ_FIELD(rec, struct perfrelay_exit, exit_code)));
	TRY(put_u(o, "signal", READ_FIELD(rec, struct perfrelay_exit, signal)));
	TRY(put_u(o, "runtime_ns", READ_FIELD(rec, struct perfrelay_exit, runtime_ns)));
	TRY(PUT_ARRAY(o, "comm", rec, struct perfrelay_exit, comm));
	if (ev->hdr.size < PERFRELAY_EXIT_SIZE_V2)
		return 0; /* an older probe's record */
	memcpy(&v, FIELD_PTR(rec, struct perfrelay_exit, counters), sizeof(v));
	return v.mask ? walk_counter_values(o, "counters", &v) : 0;
}

static int walk_counters(ExportFields *o, const uint8_t *rec) {
	struct perfrelay_counter_values v;

	memcpy(&v, FIELD_PTR(rec, struct perfrelay_unit_counters, counters), sizeof(v));
	TRY(put_u(o, "cgroup_id", READ_FIELD(rec, struct perfrelay_unit_counters, cgroup_id)));
	TRY(put_u(o, "interval_ns", READ_FIELD(rec, struct perfrelay_unit_counters, interval_ns)));
	return walk_counter_values(o, "values", &v);
}

static int walk_fork(ExportFields *o, const uint8_t *rec) {
	TRY(put_u(o, "parent_pid", READ_FIELD(rec, struct perfrelay_fork, parent_pid)));
	TRY(put_u(o, "child_pid", READ_FIELD(rec, struct perfrelay_fork, child_pid)));
	TRY(put_u(o, "child_tgid", READ_FIELD(rec, struct perfrelay_fork, child_tgid)));
	TRY(put_u(o, "uid", READ_FIELD(rec, struct perfrelay_fork, uid)));
	return PUT_ARRAY(o, "comm", rec, struct perfrelay_fork, comm);
}

static int walk_open(ExportFields *o, const uint8_t *rec) {
	TRY(put_u(o, "pid", READ_FIELD(rec, struct perfrelay_open, pid)));
	TRY(put_u(o, "uid", READ_FIELD(rec, struct perfrelay_open, uid)));
	TRY(PUT_ARRAY(o, "comm", rec, struct perfrelay_open, comm));
	TRY(PUT_ARRAY(o, "path", rec, struct perfrelay_open, path));
	TRY(put_i(o, "flags", READ_FIELD(rec, struct perfrelay_open, flags)));
	return put_i(o, "result", READ_FIELD(rec, struct perfrelay_open, result));
}

static int walk_connect(ExportFields *o, const uint8_t *rec) {
	uint16_t family = READ_FIELD(rec, struct perfrelay_connect, family);
	uint8_t addr[PERFRELAY_ADDR_LEN];
	char text[INET6_ADDRSTRLEN];

	memcpy(addr, FIELD_PTR(rec, struct perfrelay_connect, addr), sizeof(addr));
	TRY(put_u(o, "pid", READ_FIELD(rec, struct perfrelay_connect, pid)));
	TRY(put_u(o, "uid", READ_FIELD(rec, struct perfrelay_connect, uid)));
	TRY(PUT_ARRAY(o, "comm", rec, struct perfrelay_connect, comm));
	TRY(put_u(o, "family", family));
	switch (family) {
	case AF_INET:
		TRY(put_string(o, "family_name", "inet", 4));
		TRY(put_formatted(o, "address", "%u.%u.%u.%u", addr[0], addr[1], addr[2], addr[3]));
		break;
	case AF_INET6:
		TRY(put_string(o, "family_name", "inet6", 5));
		if (!inet_ntop(AF_INET6, addr, text, sizeof(text)))
			return -EINVAL;
		TRY(put_formatted(o, "address", "%s", text));
		break;
	case AF_UNIX:
		TRY(put_string(o, "family_name", "unix", 4));
		break;
	}
	TRY(put_u(o, "port", READ_FIELD(rec, struct perfrelay_connect, port)));
	return put_i(o, "result", READ_FIELD(rec, struct perfrelay_connect, result));
}

static int walk_packet(ExportFields *o, const DecodedEvent *ev) {
	const uint8_t *rec = ev->record;
	bool egress = READ_FIELD(rec, struct perfrelay_packet, direction) == PERFRELAY_PACKET_EGRESS;
	bool ether = READ_FIELD(rec, struct perfrelay_packet, link) == PERFRELAY_PACKET_LINK_ETHER;
	uint32_t cap_len = ev->record_size > ev->hdr.size ? ev->record_size - ev->hdr.size : 0;

	TRY(put_u(o, "capture_id", READ_FIELD(rec, struct perfrelay_packet, capture_id)));
	TRY(put_u(o, "ifindex", READ_FIELD(rec, struct perfrelay_packet, ifindex)));
	TRY(put_string(o, "direction", egress ? "egress" : "ingress", egress ? 6 : 7));
	TRY(put_u(o, "protocol", READ_FIELD(rec, struct perfrelay_packet, protocol)));
	TRY(put_string(o, "link", ether ? "ethernet" : "ip", ether ? 8 : 2));
	TRY(put_u(o, "len", READ_FIELD(rec, struct perfrelay_packet, orig_len)));
	TRY(put_u(o, "caplen", cap_len));
	TRY(put_u(o, "cgroup_id", READ_FIELD(rec, struct perfrelay_packet, cgroup_id)));
	return put_bytes(o, "data", rec + ev->hdr.size, cap_len);
}

/* A third-party record through its schema: the iterator's fields, nesting included. */
static int walk_schema(ExportFields *o, const perfrelay_client *c, const struct perfrelay_hdr *hdr) {
	struct perfrelay_field f;
	unsigned iter = 0;
	int r;

	while ((r = perfrelay_record_field(c, hdr, &iter, &f)) > 0)
		switch (f.kind) {
		case PERFRELAY_FIELD_UINT:
			TRY(put_u(o, f.name, f.value.u));
			break;
		case PERFRELAY_FIELD_INT:
			TRY(put_i(o, f.name, f.value.i));
			break;
		case PERFRELAY_FIELD_ENUM:
			if (f.enum_name)
				TRY(put_string(o, f.name, f.enum_name, strlen(f.enum_name)));
			else if (f.is_signed)
				TRY(put_i(o, f.name, f.value.i));
			else
				TRY(put_u(o, f.name, f.value.u));
			break;
		case PERFRELAY_FIELD_STRING:
			TRY(put_string(o, f.name, f.bytes, f.len));
			break;
		case PERFRELAY_FIELD_BYTES:
			TRY(put_bytes(o, f.name, f.bytes, f.len));
			break;
		case PERFRELAY_FIELD_STRUCT_BEGIN:
			TRY(put_open(o, f.name, EXPORT_FIELD_OBJECT));
			break;
		case PERFRELAY_FIELD_ARRAY_BEGIN:
			TRY(put_open(o, f.name, EXPORT_FIELD_ARRAY));
			break;
		case PERFRELAY_FIELD_STRUCT_END:
		case PERFRELAY_FIELD_ARRAY_END:
			TRY(put_end(o));
			break;
		}
	return r;
}

static int walk(ExportFields *o, const DecodedEvent *ev, const char *unit, const perfrelay_client *c) {
	const struct perfrelay_hdr *hdr = (const struct perfrelay_hdr *) ev->record;
	const char *schema_name = !ev->known && c ? perfrelay_record_type_name(c, ev->hdr.type) : NULL;

	o->type = ev->known ? event_type_to_string(ev->hdr.type) : schema_name;
	o->type = o->type ?: "unknown";
	TRY(put_string(o, "type", o->type, strlen(o->type)));
	TRY(put_u(o, "ts", ev->hdr.ts_ns));
	TRY(put_u(o, "cpu", ev->hdr.cpu));
	TRY(put_u(o, "seq", ev->hdr.seq));
	TRY(put_u(o, "producer", ev->hdr.producer));
	if (schema_name) {
		const char *producer = perfrelay_record_producer_name(c, ev->hdr.type);

		if (producer)
			TRY(put_string(
				o, "producer_name", producer, strnlen(producer, ENCODE_PRODUCER_NAME_MAX)));
		TRY(walk_schema(o, c, hdr));
	} else if (!ev->known) {
		TRY(put_u(o, "type_id", ev->hdr.type));
		TRY(put_bytes(o, "payload", ev->payload, ev->payload_size));
	} else
		switch (ev->hdr.type) {
		case PERFRELAY_TYPE_EXEC:
			TRY(walk_exec(o, ev));
			break;
		case PERFRELAY_TYPE_EXIT:
			TRY(walk_exit(o, ev));
			break;
		case PERFRELAY_TYPE_COUNTERS:
			TRY(walk_counters(o, ev->record));
			break;
		case PERFRELAY_TYPE_PACKET:
			TRY(walk_packet(o, ev));
			break;
		case PERFRELAY_TYPE_FORK:
			TRY(walk_fork(o, ev->record));
			break;
		case PERFRELAY_TYPE_OPEN:
			TRY(walk_open(o, ev->record));
			break;
		case PERFRELAY_TYPE_CONNECT:
			TRY(walk_connect(o, ev->record));
			break;
		case PERFRELAY_TYPE_BENCH:
			TRY(put_u(o, "call", READ_FIELD(ev->record, struct perfrelay_bench, call)));
			TRY(put_u(o, "size", ev->hdr.size));
			break;
		default:
			return -EBADMSG; /* known is only set for the types above */
		}
	if (ev->known && ev->has_euid)
		TRY(put_u(o, "euid", ev->euid));
	if (ev->known && ev->has_exec_id) {
		TRY(put_hex64(o, "exec_id", ev->exec_id));
		if (ev->parent_exec_id)
			TRY(put_hex64(o, "parent_exec_id", ev->parent_exec_id));
	}
	if (ev->hdr.flags & PERFRELAY_HDR_LINEAGE_INCOMPLETE)
		TRY(put_b(o, "lineage_incomplete", true));
	o->unit = NULL;
	if (unit && strnlen(unit, ENCODE_UNIT_MAX + 1) <= ENCODE_UNIT_MAX) {
		TRY(put_string(o, "unit", unit, strlen(unit)));
		o->unit = o->f[o->n - 1].s;
	}
	o->has_pid = ev->has_pid;
	o->pid = ev->pid;
	return 0;
}

int export_decode(const void *rec, size_t size, DecodedEvent *ret) {
	struct perfrelay_hdr hdr;

	if (size < sizeof(hdr))
		return -EBADMSG;
	memcpy(&hdr, rec, sizeof(hdr));
	/* The units' counters are the daemon's own records, which decode_event() refuses from a
	 * producer; from the socket they are checked for their size and taken. */
	if (hdr.type == PERFRELAY_TYPE_COUNTERS) {
		if (hdr.magic != PERFRELAY_MAGIC || hdr.size != sizeof(struct perfrelay_unit_counters) ||
		    size != hdr.size)
			return -EBADMSG;
		decode_daemon_record(rec, ret);
		return 0;
	}
	return decode_event(rec, size, ret) == DECODE_OK ? 0 : -EBADMSG;
}

int export_fields_walk(
	ExportFields *o, const void *rec, size_t size, const char *unit, const perfrelay_client *client) {
	size_t need = SCRATCH_FORMATTED + MENDED_MAX(size + ENCODE_UNIT_MAX + 64 + ENCODE_PRODUCER_NAME_MAX);
	DecodedEvent ev;

	o->n = 0;
	o->scratch_used = 0;
	if (export_decode(rec, size, &ev) < 0)
		return -EBADMSG;
	/* Room for everything mended or formatted, reserved before: pointers into the scratch
	 * stay valid through the walk. */
	if (o->scratch_size < need) {
		char *p = realloc(o->scratch, need);

		if (!p)
			return -ENOMEM;
		o->scratch = p;
		o->scratch_size = need;
	}
	return walk(o, &ev, unit, client);
}

void export_fields_done(ExportFields *o) {
	free(o->f);
	free(o->scratch);
	*o = (ExportFields){};
}

/* ---- the JSON line, from the fields ---- */

/* The most one field writes besides its string's bytes: a comma, a key (escaped), a colon, a
 * number, brackets. */
#define JSON_FIELD_FIXED 32u

ssize_t export_fields_json(const ExportFields *o, char *buf, size_t size) {
	bool first[EXPORT_FIELDS_DEPTH_MAX + 1], array[EXPORT_FIELDS_DEPTH_MAX + 1];
	char *p = buf, *end = buf + MIN(size, (size_t) SSIZE_MAX);
	unsigned d = 0;

	if (size < 3)
		return -ENOBUFS;
	*p++ = '{';
	first[0] = true;
	array[0] = false;
	for (size_t i = 0; i < o->n; i++) {
		const ExportField *x = &o->f[i];
		size_t klen = x->klen, need = JSON_FIELD_FIXED + 6 * klen;
		ssize_t k;

		if (x->kind == EXPORT_FIELD_STRING)
			need += 2 + 6 * (size_t) x->len;
		else if (x->kind == EXPORT_FIELD_BYTES)
			need += 2 + 4 * (((size_t) x->len + 2) / 3);
		if ((size_t) (end - p) < need)
			return -ENOBUFS;
		if (x->kind == EXPORT_FIELD_END) {
			if (d == 0)
				return -EBADMSG;
			*p++ = array[d] ? ']' : '}';
			d--;
			continue;
		}
		if (!first[d])
			*p++ = ',';
		first[d] = false;
		if (!array[d]) {
			k = encode_json_string(x->key ?: "", klen, p, (size_t) (end - p));
			if (k < 0)
				return k;
			p += k;
			*p++ = ':';
		}
		switch (x->kind) {
		case EXPORT_FIELD_UINT:
			p = encode_u64_digits(p, x->u);
			break;
		case EXPORT_FIELD_INT:
			if (x->i < 0)
				*p++ = '-';
			p = encode_u64_digits(p, x->i < 0 ? 0u - (uint64_t) x->i : (uint64_t) x->i);
			break;
		case EXPORT_FIELD_BOOL:
			memcpy(p, x->b ? "true" : "false", x->b ? 4 : 5);
			p += x->b ? 4 : 5;
			break;
		case EXPORT_FIELD_STRING:
			k = encode_json_string(x->s, x->len, p, (size_t) (end - p));
			if (k < 0)
				return k;
			p += k;
			break;
		case EXPORT_FIELD_BYTES:
			p = encode_base64(p, (const uint8_t *) x->s, x->len);
			break;
		case EXPORT_FIELD_OBJECT:
		case EXPORT_FIELD_ARRAY:
			if (d == EXPORT_FIELDS_DEPTH_MAX)
				return -EBADMSG;
			*p++ = x->kind == EXPORT_FIELD_OBJECT ? '{' : '[';
			d++;
			first[d] = true;
			array[d] = x->kind == EXPORT_FIELD_ARRAY;
			break;
		case EXPORT_FIELD_END:
			break;
		}
	}
	if (d != 0 || end - p < 2)
		return d != 0 ? -EBADMSG : -ENOBUFS;
	*p++ = '}';
	*p++ = '\n';
	return p - buf;
}
