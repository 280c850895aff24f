/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* JSON lines for decoded events: the daemon's per-event hot path, written by hand so that it
 * neither allocates nor goes through stdio, and checks the room left once per field. */

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include "decode/btfrec.h"
#include "hub/encode.h"
#include "macro.h"
#include "kernel/counter-names.h"


/* Unit names longer than systemd's UNIT_NAME_MAX - 1 cannot exist; refusing them keeps
 * ENCODE_JSON_MAX a real bound whatever the caller passes. */

#define KEY(name)    ",\"" name "\":"
#define KEYLEN(name) (sizeof(KEY(name)) - 1)
#define LITLEN(lit)  (sizeof(lit) - 1)

/* One input byte becomes at most 6 output bytes: \u00XX for control bytes, \ufffd for an
 * invalid byte. Valid multi-byte UTF-8 is copied as is (1 output byte per input byte). */
#define ESCAPE_MAX_PER_BYTE  6u
#define JSON_STRING_MAX(len) (2u + ESCAPE_MAX_PER_BYTE * (size_t) (len))
/* Above this the size arithmetic could wrap; such strings take the checked path. */
#define ESCAPE_FAST_LEN_MAX  (SIZE_MAX / 8)

#define TRY(expr)                       \
	do {                            \
		int _r = (expr);        \
		if (_unlikely_(_r < 0)) \
			return _r;      \
	} while (0)

typedef struct Out {
	char *p;
	char *end;
} Out;

static inline size_t out_room(const Out *o) {
	return (size_t) (o->end - o->p);
}

static inline int out_put(Out *o, const void *s, size_t n) {
	if (_unlikely_(out_room(o) < n))
		return -ENOBUFS;
	memcpy(o->p, s, n);
	o->p += n;
	return 0;
}
#define PUT_LIT(o, lit) TRY(out_put(o, "" lit, LITLEN(lit)))

/* ---- numbers ---- */

static const char digit_pairs[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

static const uint64_t pow10_table[20] = {
	1ull,
	10ull,
	100ull,
	1000ull,
	10000ull,
	100000ull,
	1000000ull,
	10000000ull,
	100000000ull,
	1000000000ull,
	10000000000ull,
	100000000000ull,
	1000000000000ull,
	10000000000000ull,
	100000000000000ull,
	1000000000000000ull,
	10000000000000000ull,
	100000000000000000ull,
	1000000000000000000ull,
	10000000000000000000ull,
};

/* Decimal digits of v, without a division: floor(log10(2) * bits) is off by at most one.
 * 0 is counted as 1 like the 1-digit numbers, hence v | 1 in both places. */
static inline unsigned u64_digits(uint64_t v) {
	uint64_t w = v | 1;
	unsigned t = ((64u - (unsigned) __builtin_clzll(w)) * 1233u) >> 12;

	return t + (w >= pow10_table[t]);
}

static inline void put_2(char *p, uint32_t v) {
	memcpy(p, digit_pairs + 2 * v, 2);
}

/* Exactly 8 digits of v < 10^8, zero-padded. The two halves have no data dependency on each
 * other, which is what makes this faster than a digit-by-digit loop. */
static inline void put_8(char *p, uint32_t v) {
	uint32_t hi = v / 10000, lo = v % 10000;

	put_2(p, hi / 100);
	put_2(p + 2, hi % 100);
	put_2(p + 4, lo / 100);
	put_2(p + 6, lo % 100);
}

/* The n digits of v < 10^8, written from the end. */
static inline void put_small(char *p, unsigned n, uint32_t v) {
	char *q = p + n;

	while (v >= 100) {
		q -= 2;
		put_2(q, v % 100);
		v /= 100;
	}
	if (v >= 10)
		put_2(q - 2, v);
	else
		q[-1] = (char) ('0' + v);
}

/* The n == u64_digits(v) digits of v. Splitting into 10^8 chunks keeps the arithmetic in 32
 * bits after at most two 64-bit divisions by a constant. */
static inline void put_u64(char *p, unsigned n, uint64_t v) {
	uint64_t hi, top;

	if (n <= 8) {
		put_small(p, n, (uint32_t) v);
		return;
	}
	hi = v / 100000000u;
	put_8(p + n - 8, (uint32_t) (v - hi * 100000000u));
	if (n <= 16) {
		put_small(p, n - 8, (uint32_t) hi);
		return;
	}
	top = hi / 100000000u;
	put_8(p + n - 16, (uint32_t) (hi - top * 100000000u));
	put_small(p, n - 16, (uint32_t) top);
}

/* The n == u32_digits(v) digits of v. */
static inline void put_u32(char *p, unsigned n, uint32_t v) {
	uint32_t hi;

	if (n <= 8) {
		put_small(p, n, v);
		return;
	}
	hi = v / 100000000u;
	put_8(p + n - 8, v - hi * 100000000u);
	put_small(p, n - 8, hi);
}

static inline unsigned u32_digits(uint32_t v) {
	uint32_t w = v | 1;
	unsigned t = ((32u - (unsigned) __builtin_clz(w)) * 1233u) >> 12;

	return t + (w >= pow10_table[t]);
}

/* For encode-btf.c's field encoder: the same digit writer, without a key. The caller has
 * checked there is room for 20 bytes. */
char *encode_u64_digits(char *p, uint64_t v) {
	unsigned n = u64_digits(v);

	put_u64(p, n, v);
	return p + n;
}

/* Number writers are always inlined: the key is then a constant-size copy of a literal and the
 * common 32-bit fields never touch 64-bit arithmetic. */
#define _always_inline_ inline __attribute__((always_inline))

static _always_inline_ int out_key_u64(Out *o, const char *key, size_t klen, uint64_t v) {
	unsigned n = u64_digits(v);

	if (_unlikely_(out_room(o) < klen + n))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	put_u64(o->p + klen, n, v);
	o->p += klen + n;
	return 0;
}

static _always_inline_ int out_key_u32(Out *o, const char *key, size_t klen, uint32_t v) {
	unsigned n = u32_digits(v);

	if (_unlikely_(out_room(o) < klen + n))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	put_u32(o->p + klen, n, v);
	o->p += klen + n;
	return 0;
}

static _always_inline_ int out_key_s32(Out *o, const char *key, size_t klen, int32_t v) {
	/* 0u - (uint32_t) v is well defined for INT32_MIN, -v is not. */
	uint32_t m = v < 0 ? 0u - (uint32_t) v : (uint32_t) v;
	size_t neg = v < 0;
	unsigned n = u32_digits(m);

	if (_unlikely_(out_room(o) < klen + neg + n))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	o->p[klen] = '-'; /* overwritten by the first digit when not negative */
	put_u32(o->p + klen + neg, n, m);
	o->p += klen + neg + n;
	return 0;
}

/* ,"key":"0123456789abcdef": a 64-bit id as 16 hex digits in a string (exec ids: JSON numbers
 * above 2^53 lose digits in most readers, JavaScript's and jq's). */
static inline int out_key_hex64(Out *o, const char *key, size_t klen, uint64_t v) {
	static const char hex[16] = "0123456789abcdef";

	if (_unlikely_(out_room(o) < klen + 18))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	o->p += klen;
	*o->p++ = '"';
	for (int shift = 60; shift >= 0; shift -= 4)
		*o->p++ = hex[(v >> shift) & 15];
	*o->p++ = '"';
	return 0;
}

#define PUT_U64(o, name, v)   TRY(out_key_u64(o, KEY(name), KEYLEN(name), (v)))
#define PUT_HEX64(o, name, v) TRY(out_key_hex64(o, KEY(name), KEYLEN(name), (v)))
#define PUT_U32(o, name, v)   TRY(out_key_u32(o, KEY(name), KEYLEN(name), (v)))
#define PUT_S32(o, name, v)   TRY(out_key_s32(o, KEY(name), KEYLEN(name), (v)))

/* ---- strings ---- */

/* 0: copied as is; 1: start of a multi-byte sequence (or an invalid byte); 'u': \u00XX;
 * anything else: the letter after the backslash. NUL is 'u' here but ends the string before
 * the table's answer is used. */
static const char escape_table[256] = {
	[0x00 ... 0x07] = 'u', [0x08] = 'b',  [0x09] = 't', [0x0a] = 'n',
	[0x0b] = 'u',          [0x0c] = 'f',  [0x0d] = 'r', [0x0e ... 0x1f] = 'u',
	['"'] = '"',           ['\\'] = '\\', [0x7f] = 'u', [0x80 ... 0xff] = 1,
};

static const char hex_digits[16] = "0123456789abcdef";

/* The compiler's generic vectors: SSE2 on x86-64, NEON on arm64, scalar code elsewhere. */
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef int8_t s8x16 __attribute__((vector_size(16)));
#define CHUNK 16u

/* Index (0..16) of the first byte of v that cannot be copied as is: a control byte (which
 * includes a terminating NUL), DEL, '"', '\\', or any byte >= 0x80. */
static inline unsigned chunk_first_special(u8x16 v) {
	s8x16 special = (v < 0x20) | (v >= 0x7f) | (v == '"') | (v == '\\');
	uint64_t h[2];

	memcpy(h, &special, sizeof(h));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (h[0])
		return (unsigned) __builtin_ctzll(h[0]) / 8;
	if (h[1])
		return 8 + (unsigned) __builtin_ctzll(h[1]) / 8;
#else
	if (h[0])
		return (unsigned) __builtin_clzll(h[0]) / 8;
	if (h[1])
		return 8 + (unsigned) __builtin_clzll(h[1]) / 8;
#endif
	return CHUNK;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes available), or 0. Follows the table
 * of well-formed byte sequences in Unicode 15 §3.9 (D92): that table already excludes
 * overlong forms, surrogates and code points above U+10FFFF. */
static inline size_t utf8_sequence_len(const uint8_t *s, size_t n) {
	uint8_t c = s[0], lo = 0x80, hi = 0xbf;

	if (c >= 0xc2 && c <= 0xdf)
		return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
	if (c >= 0xe0 && c <= 0xef) {
		if (n < 3)
			return 0;
		if (c == 0xe0)
			lo = 0xa0; /* below: overlong */
		else if (c == 0xed)
			hi = 0x9f; /* above: UTF-16 surrogates */
		return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		if (n < 4)
			return 0;
		if (c == 0xf0)
			lo = 0x90; /* below: overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* above: beyond U+10FFFF */
		return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80 ? 4 : 0;
	}
	return 0; /* continuation byte without a lead, C0/C1 (always overlong), F5..FF */
}

size_t encode_utf8_sequence_len(const uint8_t *s, size_t n) {
	return utf8_sequence_len(s, n);
}

/* Writes the string at s as a quoted JSON string: up to its first NUL or `limit` bytes,
 * whichever comes first. `readable` >= limit is how far s may be read: record fields are
 * fixed arrays, so the 16-byte loads may look past the NUL (and the result ignores what they
 * see there) but never past the array. Returns the number of input bytes used (the NUL not
 * included) or -ENOBUFS.
 *
 * With checked == false the caller has made sure that JSON_STRING_MAX(limit) bytes are free;
 * with checked == true every write is checked, so the result is exact even in a buffer that
 * is just big enough. Always inlined into the two wrappers below so that each is compiled
 * with the checks folded away or kept. The 16-byte store is speculative in both modes: it
 * lands inside the buffer (end - p >= 16) and only the plain bytes in it are kept. */
static inline __attribute__((always_inline))
ssize_t escape_impl(Out *o, const uint8_t *s, size_t limit, size_t readable, const bool checked) {
	char *p = o->p, *const end = o->end;
	size_t i = 0;

#define NEED(n)                                                      \
	do {                                                         \
		if (checked && _unlikely_((size_t) (end - p) < (n))) \
			return -ENOBUFS;                             \
	} while (0)

	NEED(1);
	*p++ = '"';
	for (;;) {
		uint8_t c;
		char e;

		/* Names and paths are mostly plain ASCII: copy 16 bytes, keep the plain prefix. */
		if (i + CHUNK <= readable && (size_t) (end - p) >= CHUNK) {
			u8x16 v;
			size_t k;

			memcpy(&v, s + i, CHUNK);
			memcpy(p, &v, CHUNK);
			k = MIN((size_t) chunk_first_special(v), limit - i);
			p += k;
			i += k;
			if (k == CHUNK)
				continue;
		}
		if (i >= limit)
			break;

		c = s[i];
		e = escape_table[c];
		if (e == 0) {
			NEED(1);
			*p++ = (char) c;
			i++;
		} else if (e == 1) {
			size_t n = utf8_sequence_len(s + i, limit - i);

			if (n > 0) {
				NEED(n);
				memcpy(p, s + i, n);
				p += n;
				i += n;
			} else {
				/* One replacement per invalid byte: simple, and it keeps the
				 * 6-bytes-per-input-byte bound that ENCODE_JSON_MAX relies on. */
				NEED(6);
				memcpy(p, "\\ufffd", 6);
				p += 6;
				i++;
			}
		} else if (c == 0) {
			break;
		} else if (e == 'u') {
			NEED(6);
			memcpy(p, "\\u00", 4);
			p[4] = hex_digits[c >> 4];
			p[5] = hex_digits[c & 15];
			p += 6;
			i++;
		} else {
			NEED(2);
			p[0] = '\\';
			p[1] = e;
			p += 2;
			i++;
		}
	}
	NEED(1);
	*p++ = '"';
#undef NEED

	o->p = p;
	return (ssize_t) i;
}

static ssize_t escape_fast(Out *o, const char *s, size_t limit, size_t readable) {
	return escape_impl(o, (const uint8_t *) s, limit, readable, false);
}

static ssize_t escape_checked(Out *o, const char *s, size_t limit, size_t readable) {
	return escape_impl(o, (const uint8_t *) s, limit, readable, true);
}

/* Escapes up to limit bytes of s (or to its NUL), of which `readable` may be read. Returns the
 * input bytes used or -ENOBUFS. */
static inline ssize_t out_string(Out *o, const char *s, size_t limit, size_t readable) {
	if (_likely_(limit <= ESCAPE_FAST_LEN_MAX && out_room(o) >= JSON_STRING_MAX(limit)))
		return escape_fast(o, s, limit, readable);
	return escape_checked(o, s, limit, readable);
}

/* A key and a record's string field: a NUL-terminated string in a char array of `size`. */
static inline int out_key_field(Out *o, const char *key, size_t klen, const char *s, size_t size) {
	if (_likely_(out_room(o) >= klen + JSON_STRING_MAX(size))) {
		memcpy(o->p, key, klen);
		o->p += klen;
		(void) escape_fast(o, s, size, size); /* cannot fail: the room was checked */
		return 0;
	}
	TRY(out_put(o, key, klen));
	return escape_checked(o, s, size, size) < 0 ? -ENOBUFS : 0;
}
#define PUT_FIELD(o, name, rec, type, member) \
	TRY(out_key_field(o, KEY(name), KEYLEN(name), FIELD_PTR(rec, type, member), FIELD_SIZE(type, member)))

/* Strings that are known to need no escaping (inet_ntop output). */
static inline int out_key_plain_string(Out *o, const char *key, size_t klen, const char *s, size_t len) {
	if (_unlikely_(out_room(o) < klen + 2 + len))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	o->p[klen] = '"';
	memcpy(o->p + klen + 1, s, len);
	o->p[klen + 1 + len] = '"';
	o->p += klen + 2 + len;
	return 0;
}

/* argv[] holds the arguments back to back, each ending in a NUL. An argument of k bytes costs
 * at most 6k + 2 quotes + 1 comma and consumes k + 1 input bytes, so the whole array stays
 * within 2 + 6 * len (plus slack for a last argument without its NUL). */
#define ARGV_JSON_MAX(len) (2u + ESCAPE_MAX_PER_BYTE * (size_t) (len) + 3u)

/* len: the bytes in use (argv_len); readable: the size of the array holding them. */
static int out_argv(Out *o, const char *argv, size_t len, size_t readable) {
	PUT_LIT(o, KEY("argv") "[");
	for (size_t pos = 0; pos < len;) {
		ssize_t k;

		if (pos > 0)
			PUT_LIT(o, ",");
		k = out_string(o, argv + pos, len - pos, readable - pos);
		if (k < 0)
			return (int) k;
		pos += (size_t) k + 1; /* and the NUL */
	}
	PUT_LIT(o, "]");
	return 0;
}

/* ---- base64 ---- */

#define BASE64_LEN(n) (((size_t) (n) / 3 + ((size_t) (n) % 3 != 0)) * 4)

static const char base64_alphabet[64] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *encode_base64(char *p, const uint8_t *s, size_t n) {
	size_t i = 0;

	*p++ = '"';
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t) s[i] << 16 | (uint32_t) s[i + 1] << 8 | s[i + 2];

		p[0] = base64_alphabet[v >> 18];
		p[1] = base64_alphabet[(v >> 12) & 63];
		p[2] = base64_alphabet[(v >> 6) & 63];
		p[3] = base64_alphabet[v & 63];
		p += 4;
	}
	if (n - i > 0) {
		uint32_t v = (uint32_t) s[i] << 16 | (n - i == 2 ? (uint32_t) s[i + 1] << 8 : 0);

		p[0] = base64_alphabet[v >> 18];
		p[1] = base64_alphabet[(v >> 12) & 63];
		p[2] = n - i == 2 ? base64_alphabet[(v >> 6) & 63] : '=';
		p[3] = '=';
		p += 4;
	}
	*p++ = '"';
	return p;
}

static int out_key_base64(Out *o, const char *key, size_t klen, const uint8_t *s, size_t n) {
	if (_unlikely_(out_room(o) < klen + 2 + BASE64_LEN(n)))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	o->p = encode_base64(o->p + klen, s, n);
	return 0;
}

/* ---- per type ---- */

static int encode_common(Out *o, const DecodedEvent *ev) {
	const char *name = ev->known ? event_type_to_string(ev->hdr.type) : NULL;

	if (!name)
		name = "unknown";
	PUT_LIT(o, "{\"type\":\"");
	TRY(out_put(o, name, strlen(name)));
	PUT_LIT(o, "\"");
	PUT_U64(o, "ts", ev->hdr.ts_ns);
	PUT_U32(o, "cpu", ev->hdr.cpu);
	PUT_U64(o, "seq", ev->hdr.seq);
	PUT_U32(o, "producer", ev->hdr.producer);
	return 0;
}

/* ,"key":"MAJOR:MINOR": the kernel's dev_t (major << 20 | minor) as stat(1) and
 * /proc/PID/maps show it. */
static int out_key_dev(Out *o, const char *key, size_t klen, uint32_t dev) {
	uint32_t major = dev >> 20, minor = dev & 0xfffff;
	unsigned a = u32_digits(major), b = u32_digits(minor);

	if (_unlikely_(out_room(o) < klen + a + b + 3))
		return -ENOBUFS;
	memcpy(o->p, key, klen);
	o->p += klen;
	*o->p++ = '"';
	put_u32(o->p, a, major);
	o->p += a;
	*o->p++ = ':';
	put_u32(o->p, b, minor);
	o->p += b;
	*o->p++ = '"';
	return 0;
}

/* Schema 3's process context of an exec: "ancestors" (nearest first), the executable as the
 * kernel resolved it with its device and inode, and the working directory. */
static int encode_exec_context(Out *o, const uint8_t *rec) {
	uint32_t n = MIN(
		READ_FIELD(rec, struct perfrelay_exec, n_ancestors), (uint32_t) PERFRELAY_ANCESTORS_MAX);
	uint32_t dev = READ_FIELD(rec, struct perfrelay_exec, exe_dev);

	PUT_LIT(o, KEY("ancestors") "[");
	for (uint32_t i = 0; i < n; i++) {
		if (i > 0)
			PUT_LIT(o, ",");
		/* The first key without its comma: out_key_hex64() writes what it is given. */
		TRY(out_key_hex64(
			o,
			"{\"exec_id\":",
			LITLEN("{\"exec_id\":"),
			READ_FIELD(rec, struct perfrelay_exec, ancestors[i].exec_id)));
		PUT_U32(o, "pid", READ_FIELD(rec, struct perfrelay_exec, ancestors[i].pid));
		PUT_FIELD(o, "comm", rec, struct perfrelay_exec, ancestors[i].comm);
		PUT_LIT(o, "}");
	}
	PUT_LIT(o, "]");
	if (FIELD_PTR(rec, struct perfrelay_exec, exe)[0])
		PUT_FIELD(o, "exe", rec, struct perfrelay_exec, exe);
	TRY(out_key_dev(o, KEY("exe_dev"), KEYLEN("exe_dev"), dev));
	PUT_U64(o, "exe_ino", READ_FIELD(rec, struct perfrelay_exec, exe_ino));
	if (FIELD_PTR(rec, struct perfrelay_exec, cwd)[0])
		PUT_FIELD(o, "cwd", rec, struct perfrelay_exec, cwd);
	PUT_HEX64(o, "prev_exec_id", READ_FIELD(rec, struct perfrelay_exec, prev_exec_id));
	return 0;
}

static int encode_exec(Out *o, const DecodedEvent *ev) {
	const uint8_t *rec = ev->record;
	/* Clamped again so that a DecodedEvent not made by decode_event() cannot walk past argv. */
	size_t argv_len = MIN(
		(size_t) READ_FIELD(rec, struct perfrelay_exec, argv_len), (size_t) PERFRELAY_ARGV_LEN);

	PUT_U32(o, "pid", READ_FIELD(rec, struct perfrelay_exec, pid));
	PUT_U32(o, "ppid", READ_FIELD(rec, struct perfrelay_exec, ppid));
	PUT_U32(o, "uid", READ_FIELD(rec, struct perfrelay_exec, uid));
	PUT_U32(o, "gid", READ_FIELD(rec, struct perfrelay_exec, gid));
	PUT_FIELD(o, "comm", rec, struct perfrelay_exec, comm);
	PUT_FIELD(o, "filename", rec, struct perfrelay_exec, filename);
	TRY(out_argv(
		o,
		FIELD_PTR(rec, struct perfrelay_exec, argv),
		argv_len,
		FIELD_SIZE(struct perfrelay_exec, argv)));
	PUT_U32(o, "argc", READ_FIELD(rec, struct perfrelay_exec, argc));
	if (READ_FIELD(rec, struct perfrelay_exec, argv_truncated))
		PUT_LIT(o, KEY("argv_truncated") "true");
	else
		PUT_LIT(o, KEY("argv_truncated") "false");
	PUT_U64(o, "cgroup_id", READ_FIELD(rec, struct perfrelay_exec, cgroup_id));
	if (ev->hdr.size >= sizeof(struct perfrelay_exec))
		TRY(encode_exec_context(o, rec));
	return 0;
}

static int encode_exit(Out *o, const uint8_t *rec) {
	PUT_U32(o, "pid", READ_FIELD(rec, struct perfrelay_exit, pid));
	PUT_U32(o, "ppid", READ_FIELD(rec, struct perfrelay_exit, ppid));
	PUT_U32(o, "uid", READ_FIELD(rec, struct perfrelay_exit, uid));
	PUT_S32(o, "exit_code", READ_FIELD(rec, struct perfrelay_exit, exit_code));
	PUT_U32(o, "signal", READ_FIELD(rec, struct perfrelay_exit, signal));
	PUT_U64(o, "runtime_ns", READ_FIELD(rec, struct perfrelay_exit, runtime_ns));
	PUT_FIELD(o, "comm", rec, struct perfrelay_exit, comm);
	return 0;
}

/* "counters":{"task_clock_ns":N,...},"scaled":false: the configured counters only. */
static int encode_counter_values(Out *o, const char *key, size_t klen, const struct perfrelay_counter_values *v) {
	bool first = true;

	TRY(out_put(o, key, klen));
	PUT_LIT(o, "{");
	for (unsigned i = 0; i < PERFRELAY_COUNTERS_MAX; i++) {
		const char *name = counter_key_to_string(i);

		if (!(v->mask & (1u << i)))
			continue;
		if (first)
			PUT_LIT(o, "\"");
		else
			PUT_LIT(o, ",\"");
		first = false;
		TRY(out_put(o, name, strlen(name)));
		PUT_LIT(o, "\":");
		TRY(out_key_u64(o, "", 0, v->value[i]));
	}
	PUT_LIT(o, "}");
	if (v->scaled & v->mask)
		PUT_LIT(o, KEY("scaled") "true");
	else
		PUT_LIT(o, KEY("scaled") "false");
	return 0;
}

static int encode_exit_counters(Out *o, const DecodedEvent *ev) {
	struct perfrelay_counter_values v;

	if (ev->hdr.size < PERFRELAY_EXIT_SIZE_V2)
		return 0; /* an older probe's record */
	memcpy(&v, FIELD_PTR(ev->record, struct perfrelay_exit, counters), sizeof(v));
	if (v.mask == 0)
		return 0; /* counters off */
	return encode_counter_values(o, KEY("counters"), KEYLEN("counters"), &v);
}

static int encode_counters(Out *o, const uint8_t *rec) {
	struct perfrelay_counter_values v;

	memcpy(&v, FIELD_PTR(rec, struct perfrelay_unit_counters, counters), sizeof(v));
	PUT_U64(o, "cgroup_id", READ_FIELD(rec, struct perfrelay_unit_counters, cgroup_id));
	PUT_U64(o, "interval_ns", READ_FIELD(rec, struct perfrelay_unit_counters, interval_ns));
	return encode_counter_values(o, KEY("values"), KEYLEN("values"), &v);
}

static int encode_fork(Out *o, const uint8_t *rec) {
	PUT_U32(o, "parent_pid", READ_FIELD(rec, struct perfrelay_fork, parent_pid));
	PUT_U32(o, "child_pid", READ_FIELD(rec, struct perfrelay_fork, child_pid));
	PUT_U32(o, "child_tgid", READ_FIELD(rec, struct perfrelay_fork, child_tgid));
	PUT_U32(o, "uid", READ_FIELD(rec, struct perfrelay_fork, uid));
	PUT_FIELD(o, "comm", rec, struct perfrelay_fork, comm);
	return 0;
}

static int encode_open(Out *o, const uint8_t *rec) {
	PUT_U32(o, "pid", READ_FIELD(rec, struct perfrelay_open, pid));
	PUT_U32(o, "uid", READ_FIELD(rec, struct perfrelay_open, uid));
	PUT_FIELD(o, "comm", rec, struct perfrelay_open, comm);
	PUT_FIELD(o, "path", rec, struct perfrelay_open, path);
	PUT_S32(o, "flags", READ_FIELD(rec, struct perfrelay_open, flags));
	PUT_S32(o, "result", READ_FIELD(rec, struct perfrelay_open, result));
	return 0;
}

/* "255.255.255.255" */
static size_t format_ipv4(char *buf, const uint8_t a[4]) {
	char *p = buf;

	for (size_t i = 0; i < 4; i++) {
		uint32_t v = a[i];

		if (i > 0)
			*p++ = '.';
		if (v >= 100) {
			*p++ = (char) ('0' + v / 100);
			put_2(p, v % 100);
			p += 2;
		} else if (v >= 10) {
			put_2(p, v);
			p += 2;
		} else
			*p++ = (char) ('0' + v);
	}
	return (size_t) (p - buf);
}

static int encode_connect(Out *o, const uint8_t *rec) {
	uint16_t family = READ_FIELD(rec, struct perfrelay_connect, family);
	uint8_t addr[PERFRELAY_ADDR_LEN];
	char text[INET6_ADDRSTRLEN];
	const char *family_name = NULL;
	size_t text_len = 0;

	memcpy(addr, FIELD_PTR(rec, struct perfrelay_connect, addr), sizeof(addr));
	switch (family) {
	case AF_INET:
		family_name = "inet";
		text_len = format_ipv4(text, addr);
		break;
	case AF_INET6:
		family_name = "inet6";
		/* glibc's inet_ntop follows RFC 5952 (lowercase, longest zero run compressed,
		 * a single zero group not compressed, ::ffff:a.b.c.d for mapped IPv4). */
		if (!inet_ntop(AF_INET6, addr, text, sizeof(text)))
			return -EINVAL; /* cannot happen with a 16-byte address and this buffer */
		text_len = strlen(text);
		break;
	case AF_UNIX:
		/* The record has no room for a socket path, so there is no address to show. */
		family_name = "unix";
		break;
	}

	PUT_U32(o, "pid", READ_FIELD(rec, struct perfrelay_connect, pid));
	PUT_U32(o, "uid", READ_FIELD(rec, struct perfrelay_connect, uid));
	PUT_FIELD(o, "comm", rec, struct perfrelay_connect, comm);
	PUT_U32(o, "family", family);
	if (family_name)
		TRY(out_key_plain_string(
			o, KEY("family_name"), KEYLEN("family_name"), family_name, strlen(family_name)));
	if (text_len > 0)
		TRY(out_key_plain_string(o, KEY("address"), KEYLEN("address"), text, text_len));
	PUT_U32(o, "port", READ_FIELD(rec, struct perfrelay_connect, port));
	PUT_S32(o, "result", READ_FIELD(rec, struct perfrelay_connect, result));
	return 0;
}

/* The bytes are those decode_event() vouched for: record_size - hdr.size of them. */
static int encode_packet(Out *o, const DecodedEvent *ev) {
	const uint8_t *rec = ev->record;
	uint8_t direction = READ_FIELD(rec, struct perfrelay_packet, direction);
	uint32_t cap_len = ev->record_size > ev->hdr.size ? ev->record_size - ev->hdr.size : 0;

	PUT_U32(o, "capture_id", READ_FIELD(rec, struct perfrelay_packet, capture_id));
	PUT_U32(o, "ifindex", READ_FIELD(rec, struct perfrelay_packet, ifindex));
	if (direction == PERFRELAY_PACKET_EGRESS)
		PUT_LIT(o, KEY("direction") "\"egress\"");
	else
		PUT_LIT(o, KEY("direction") "\"ingress\"");
	PUT_U32(o, "protocol", READ_FIELD(rec, struct perfrelay_packet, protocol));
	if (READ_FIELD(rec, struct perfrelay_packet, link) == PERFRELAY_PACKET_LINK_ETHER)
		PUT_LIT(o, KEY("link") "\"ethernet\"");
	else
		PUT_LIT(o, KEY("link") "\"ip\"");
	PUT_U32(o, "len", READ_FIELD(rec, struct perfrelay_packet, orig_len));
	PUT_U32(o, "caplen", cap_len);
	PUT_U64(o, "cgroup_id", READ_FIELD(rec, struct perfrelay_packet, cgroup_id));
	return out_key_base64(o, KEY("data"), KEYLEN("data"), rec + ev->hdr.size, cap_len);
}

static int encode_bench(Out *o, const DecodedEvent *ev) {
	PUT_U64(o, "call", READ_FIELD(ev->record, struct perfrelay_bench, call));
	PUT_U32(o, "size", ev->hdr.size);
	return 0;
}

static int encode_unknown(Out *o, const DecodedEvent *ev) {
	PUT_U32(o, "type_id", ev->hdr.type);
	return out_key_base64(o, KEY("payload"), KEYLEN("payload"), ev->payload, ev->payload_size);
}

/* ,"container":{"id":..,"runtime":..[,"name":..][,"image":..][,"image_id":..]} */
static int encode_container(Out *o, const Container *c) {
	const ContainerRef *ref = container_ref(c);
	const ContainerNames *n = container_names(c);
	const char *runtime = container_runtime_to_string(ref->runtime);
	size_t len;

	if (!runtime)
		return 0;
	PUT_LIT(o, ",\"container\":{\"id\":");
	len = strnlen(ref->id, CONTAINER_ID_MAX - 1);
	if (out_string(o, ref->id, len, len) < 0)
		return -ENOBUFS;
	PUT_LIT(o, KEY("runtime"));
	len = strlen(runtime);
	if (out_string(o, runtime, len, len) < 0)
		return -ENOBUFS;
	if (n) {
		/* Bounded where they are made (container_names_new()); bounded again here. */
		const struct {
			const char *key;
			size_t key_len;
			const char *value;
			size_t max;
		} fields[] = {
			{ KEY("name"), KEYLEN("name"), n->name, CONTAINER_NAME_MAX },
			{ KEY("image"), KEYLEN("image"), n->image, CONTAINER_IMAGE_MAX },
			{ KEY("image_id"), KEYLEN("image_id"), n->image_id, CONTAINER_ID_MAX - 1 },
		};

		for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
			if (!fields[i].value)
				continue;
			TRY(out_put(o, fields[i].key, fields[i].key_len));
			len = strnlen(fields[i].value, fields[i].max);
			if (out_string(o, fields[i].value, len, len) < 0)
				return -ENOBUFS;
		}
	}
	if (ref->monitor)
		PUT_LIT(o, KEY("monitor") "true");
	PUT_LIT(o, "}");
	return 0;
}

ssize_t encode_container_json(const Container *c, char *buf, size_t size) {
	Out o = { .p = buf, .end = buf + MIN(size, (size_t) SSIZE_MAX) };

	TRY(encode_container(&o, c));
	return o.p - buf;
}

static int encode_body(Out *o, const DecodedEvent *ev, const char *unit, const Container *container) {
	TRY(encode_common(o, ev));

	if (!ev->known)
		TRY(encode_unknown(o, ev));
	else
		switch (ev->hdr.type) {
		case PERFRELAY_TYPE_EXEC:
			TRY(encode_exec(o, ev));
			break;
		case PERFRELAY_TYPE_EXIT:
			TRY(encode_exit(o, ev->record));
			TRY(encode_exit_counters(o, ev));
			break;
		case PERFRELAY_TYPE_COUNTERS:
			TRY(encode_counters(o, ev->record));
			break;
		case PERFRELAY_TYPE_PACKET:
			TRY(encode_packet(o, ev));
			break;
		case PERFRELAY_TYPE_FORK:
			TRY(encode_fork(o, ev->record));
			break;
		case PERFRELAY_TYPE_OPEN:
			TRY(encode_open(o, ev->record));
			break;
		case PERFRELAY_TYPE_CONNECT:
			TRY(encode_connect(o, ev->record));
			break;
		case PERFRELAY_TYPE_BENCH:
			TRY(encode_bench(o, ev));
			break;
		default:
			/* known is only set by decode_event() for the types above. */
			TRY(encode_unknown(o, ev));
			break;
		}
	/* Set by decode_event() for built-in records of schema 2 probes. */
	if (ev->known && ev->has_euid)
		PUT_U32(o, "euid", ev->euid);
	/* And for those of schema 3 probes, the process image and its parent's. */
	if (ev->known && ev->has_exec_id) {
		PUT_HEX64(o, "exec_id", ev->exec_id);
		if (ev->parent_exec_id)
			PUT_HEX64(o, "parent_exec_id", ev->parent_exec_id);
	}
	/* The client's copy says its "ancestor" filter took it for a lineage cut short. */
	if (ev->hdr.flags & PERFRELAY_HDR_LINEAGE_INCOMPLETE)
		PUT_LIT(o, KEY("lineage_incomplete") "true");

	if (unit) {
		size_t len = strnlen(unit, ENCODE_UNIT_MAX + 1);

		if (len <= ENCODE_UNIT_MAX) {
			PUT_LIT(o, KEY("unit"));
			if (out_string(o, unit, len, len) < 0)
				return -ENOBUFS;
		}
	}
	if (container)
		TRY(encode_container(o, container));
	PUT_LIT(o, "}\n");
	return 0;
}

ssize_t encode_json(const DecodedEvent *ev, const char *unit, char *buf, size_t size) {
	return encode_json_in(ev, unit, NULL, buf, size);
}

ssize_t encode_json_in(
	const DecodedEvent *ev, const char *unit, const Container *container, char *buf, size_t size) {
	/* The byte count must fit the ssize_t we return. */
	Out o = { .p = buf, .end = buf + MIN(size, (size_t) SSIZE_MAX) };

	TRY(encode_body(&o, ev, unit, container));
	return o.p - buf;
}

/* ---- third-party records decoded from their BTF (issue 12) ---- */

/* Producer names are kernel program names (16 bytes) or C identifiers from BTF (63). */
ssize_t encode_lost_json(uint64_t count, char *buf, size_t size) {
	Out o = { .p = buf, .end = buf + MIN(size, (size_t) SSIZE_MAX) };

	PUT_LIT(&o, "{\"type\":\"lost\"");
	PUT_U64(&o, "count", count);
	PUT_LIT(&o, "}\n");
	return o.p - buf;
}

ssize_t encode_json_string(const char *s, size_t len, char *buf, size_t size) {
	Out o = { .p = buf, .end = buf + MIN(size, (size_t) SSIZE_MAX) };
	size_t n = strnlen(s, len);

	if (out_string(&o, s, n, n) < 0)
		return -ENOBUFS;
	return o.p - buf;
}

/* ---- the bound every caller sizes its buffers by ---- */

_Static_assert(
	KEYLEN("container") + 1 + LITLEN("\"id\":") + JSON_STRING_MAX(CONTAINER_ID_MAX - 1) +
			KEYLEN("runtime") + JSON_STRING_MAX(sizeof("systemd-nspawn") - 1) + KEYLEN("name") +
			JSON_STRING_MAX(CONTAINER_NAME_MAX) + KEYLEN("image") +
			JSON_STRING_MAX(CONTAINER_IMAGE_MAX) + KEYLEN("image_id") +
			JSON_STRING_MAX(CONTAINER_ID_MAX - 1) + KEYLEN("monitor") + LITLEN("true}") <=
		ENCODE_CONTAINER_JSON_MAX,
	"ENCODE_CONTAINER_JSON_MAX too small");

/* Every number is counted at the longest any 64-bit value can take ("18446744073709551615",
 * "-9223372036854775808"): loose for the 32-bit fields, but obviously an upper bound. */
#define NUM_MAX                      20u
#define ARRAY_JSON_MAX(type, member) JSON_STRING_MAX(FIELD_SIZE(type, member) - 1)

/* Type names are short identifiers ("connect", "unknown"); 32 leaves room for new ones. */
#define TYPE_NAME_MAX 32u
#define COMMON_JSON_MAX                                                                                  \
	(LITLEN("{\"type\":\"") + TYPE_NAME_MAX + 1 + KEYLEN("ts") + NUM_MAX + KEYLEN("cpu") + NUM_MAX + \
	 KEYLEN("seq") + NUM_MAX + KEYLEN("producer") + NUM_MAX)
#define HEX64_JSON_MAX 18u /* "0123456789abcdef" */
#define TAIL_JSON_MAX                                                                                   \
	(KEYLEN("euid") + NUM_MAX + KEYLEN("exec_id") + KEYLEN("parent_exec_id") + 2 * HEX64_JSON_MAX + \
	 KEYLEN("lineage_incomplete") + LITLEN("true") + KEYLEN("unit") +                               \
	 JSON_STRING_MAX(ENCODE_UNIT_MAX) + ENCODE_CONTAINER_JSON_MAX + LITLEN("}\n"))

#define ANCESTOR_JSON_MAX                                                                      \
	(LITLEN("{\"exec_id\":") + HEX64_JSON_MAX + KEYLEN("pid") + NUM_MAX + KEYLEN("comm") + \
	 ARRAY_JSON_MAX(struct perfrelay_exec, ancestors[0].comm) + LITLEN("},"))
#define EXEC_CONTEXT_JSON_MAX                                                                       \
	(KEYLEN("ancestors") + 2 + PERFRELAY_ANCESTORS_MAX * ANCESTOR_JSON_MAX + KEYLEN("exe") +    \
	 ARRAY_JSON_MAX(struct perfrelay_exec, exe) + KEYLEN("exe_dev") + 2 + 2 * NUM_MAX + 1 +     \
	 KEYLEN("exe_ino") + NUM_MAX + KEYLEN("cwd") + ARRAY_JSON_MAX(struct perfrelay_exec, cwd) + \
	 KEYLEN("prev_exec_id") + HEX64_JSON_MAX)
#define EXEC_JSON_MAX                                                                                     \
	(COMMON_JSON_MAX + KEYLEN("pid") + KEYLEN("ppid") + KEYLEN("uid") + KEYLEN("gid") + 4 * NUM_MAX + \
	 KEYLEN("comm") + ARRAY_JSON_MAX(struct perfrelay_exec, comm) + KEYLEN("filename") +              \
	 ARRAY_JSON_MAX(struct perfrelay_exec, filename) + KEYLEN("argv") +                               \
	 ARGV_JSON_MAX(PERFRELAY_ARGV_LEN) + KEYLEN("argc") + NUM_MAX + KEYLEN("argv_truncated") +        \
	 LITLEN("false") + KEYLEN("cgroup_id") + NUM_MAX + EXEC_CONTEXT_JSON_MAX + TAIL_JSON_MAX)
#define EXIT_JSON_MAX                                                                             \
	(COMMON_JSON_MAX + KEYLEN("pid") + KEYLEN("ppid") + KEYLEN("uid") + KEYLEN("exit_code") + \
	 KEYLEN("signal") + KEYLEN("runtime_ns") + 6 * NUM_MAX + KEYLEN("comm") +                 \
	 ARRAY_JSON_MAX(struct perfrelay_exit, comm) + TAIL_JSON_MAX)
#define COUNTER_VALUES_JSON_MAX                                                                        \
	(KEYLEN("counters") + 2 + PERFRELAY_COUNTERS_MAX * (LITLEN("\"task_clock_ns\":,") + NUM_MAX) + \
	 KEYLEN("scaled") + LITLEN("false"))
#define EXIT_COUNTERS_JSON_MAX (EXIT_JSON_MAX + COUNTER_VALUES_JSON_MAX)
#define COUNTERS_JSON_MAX                                                              \
	(COMMON_JSON_MAX + KEYLEN("cgroup_id") + KEYLEN("interval_ns") + 2 * NUM_MAX + \
	 COUNTER_VALUES_JSON_MAX + TAIL_JSON_MAX)
#define PACKET_JSON_MAX                                                                                    \
	(COMMON_JSON_MAX + KEYLEN("capture_id") + KEYLEN("ifindex") + KEYLEN("protocol") + KEYLEN("len") + \
	 KEYLEN("caplen") + KEYLEN("cgroup_id") + 6 * NUM_MAX + KEYLEN("direction") +                      \
	 LITLEN("\"ingress\"") + KEYLEN("link") + LITLEN("\"ethernet\"") + KEYLEN("data") + 2 +            \
	 BASE64_LEN(PERFRELAY_CAPTURE_BYTES_MAX) + TAIL_JSON_MAX)
#define FORK_JSON_MAX                                                                                          \
	(COMMON_JSON_MAX + KEYLEN("parent_pid") + KEYLEN("child_pid") + KEYLEN("child_tgid") + KEYLEN("uid") + \
	 4 * NUM_MAX + KEYLEN("comm") + ARRAY_JSON_MAX(struct perfrelay_fork, comm) + TAIL_JSON_MAX)
#define OPEN_JSON_MAX                                                                                  \
	(COMMON_JSON_MAX + KEYLEN("pid") + KEYLEN("uid") + KEYLEN("flags") + KEYLEN("result") +        \
	 4 * NUM_MAX + KEYLEN("comm") + ARRAY_JSON_MAX(struct perfrelay_open, comm) + KEYLEN("path") + \
	 ARRAY_JSON_MAX(struct perfrelay_open, path) + TAIL_JSON_MAX)
#define CONNECT_JSON_MAX                                                                                    \
	(COMMON_JSON_MAX + KEYLEN("pid") + KEYLEN("uid") + KEYLEN("family") + KEYLEN("port") +              \
	 KEYLEN("result") + 5 * NUM_MAX + KEYLEN("comm") + ARRAY_JSON_MAX(struct perfrelay_connect, comm) + \
	 KEYLEN("family_name") + LITLEN("\"inet6\"") + KEYLEN("address") + 2 + INET6_ADDRSTRLEN +           \
	 TAIL_JSON_MAX)
#define BENCH_JSON_MAX (COMMON_JSON_MAX + KEYLEN("call") + KEYLEN("size") + 2 * NUM_MAX + TAIL_JSON_MAX)
/* hdr.size is a u16, so the payload is at most PERFRELAY_RECORD_MAX minus the header. */
#define UNKNOWN_JSON_MAX                                                         \
	(COMMON_JSON_MAX + KEYLEN("type_id") + NUM_MAX + KEYLEN("payload") + 2 + \
	 BASE64_LEN(PERFRELAY_RECORD_MAX - sizeof(struct perfrelay_hdr)) + TAIL_JSON_MAX)

_Static_assert(EXEC_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for exec");
_Static_assert(EXIT_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for exit");
_Static_assert(EXIT_COUNTERS_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for exit");
_Static_assert(COUNTERS_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for counters");
_Static_assert(PACKET_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for packets");
_Static_assert(FORK_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for fork");
_Static_assert(OPEN_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for open");
_Static_assert(CONNECT_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for connect");
_Static_assert(BENCH_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for bench");
_Static_assert(UNKNOWN_JSON_MAX <= ENCODE_JSON_MAX, "ENCODE_JSON_MAX too small for unknown types");
_Static_assert(
	COMMON_JSON_MAX - TYPE_NAME_MAX + BTFREC_MAX_NAME + KEYLEN("producer_name") +
			JSON_STRING_MAX(ENCODE_PRODUCER_NAME_MAX) + BTFREC_JSON_MAX + TAIL_JSON_MAX <=
		ENCODE_JSON_MAX,
	"ENCODE_JSON_MAX too small for BTF-decoded records");
