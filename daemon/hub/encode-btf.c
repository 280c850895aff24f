/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JSON line of a record described by its producer's BTF (issue 12): its fields by a loop over
 * the decoder's flat steps (btfrec-internal.h), bounded by the worst case computed when it was
 * built, in a line made with encode.c's primitives (this file uses encode.c, never the reverse). */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "decode/btfrec-internal.h"
#include "hub/encode.h"
#include "macro.h"


static char *put_i64(char *p, int64_t v) {
	if (v < 0) {
		*p++ = '-';
		return encode_u64_digits(p, (uint64_t) 0 - (uint64_t) v);
	}
	return encode_u64_digits(p, (uint64_t) v);
}

ssize_t encode_json_btf_fields(const BtfRec *r, const void *rec, size_t size, char *buf, size_t bufsize) {
	bool first_in_container = false;
	char *p = buf;

	if (size < r->size)
		return -EBADMSG;
	/* json_max is the worst case of this record type, computed at build time, so one check
	 * here replaces a check per field. */
	if (bufsize < r->json_max)
		return -ENOBUFS;

	for (unsigned i = 0; i < r->n_steps; i++) {
		const Step *s = &r->steps[i];
		BtfRecValue v;

		if (s->kind == BTFREC_STRUCT_END || s->kind == BTFREC_ARRAY_END) {
			*p++ = s->kind == BTFREC_STRUCT_END ? '}' : ']';
			first_in_container = false;
			continue;
		}
		if (s->depth == 0 || !first_in_container)
			*p++ = ',';
		first_in_container = false;
		if (s->name != NO_NAME) {
			*p++ = '"';
			memcpy(p, r->names + s->name, s->name_len);
			p += s->name_len;
			*p++ = '"';
			*p++ = ':';
		}
		/* Integers, the common case, are read here directly; the rest goes through the
		 * iterator so both views share one decoding. */
		if (s->kind == BTFREC_UINT) {
			p = encode_u64_digits(p, read_uint((const uint8_t *) rec + s->offset, s->size));
			continue;
		}
		if (s->kind == BTFREC_INT) {
			p = put_i64(
				p,
				sign_extend(read_uint((const uint8_t *) rec + s->offset, s->size), s->size));
			continue;
		}
		btfrec_get(r, rec, i, &v);
		switch (v.kind) {
		case BTFREC_ENUM:
			if (v.enum_name) {
				size_t n = strlen(v.enum_name);

				*p++ = '"';
				memcpy(p, v.enum_name, n);
				p += n;
				*p++ = '"';
			} else if (v.is_signed)
				p = put_i64(p, v.value.i);
			else
				p = encode_u64_digits(p, v.value.u);
			break;
		case BTFREC_STRING: {
			ssize_t k = encode_json_string(
				(const char *) v.bytes, v.len, p, bufsize - (size_t) (p - buf));
			if (k < 0)
				return k;
			p += k;
			break;
		}
		case BTFREC_BYTES:
			p = encode_base64(p, v.bytes, v.len);
			break;
		case BTFREC_STRUCT_BEGIN:
			*p++ = '{';
			first_in_container = true;
			break;
		case BTFREC_ARRAY_BEGIN:
			*p++ = '[';
			first_in_container = true;
			break;
		default:
			break;
		}
	}
	return p - buf;
}

/* Appends what encode_json_string() writes for s (cut at max bytes) after `key`. */
static char *put_key_string(char *p, char *end, const char *key, const char *s, size_t max) {
	size_t klen = strlen(key);
	ssize_t k;

	if (!p || (size_t) (end - p) < klen)
		return NULL;
	memcpy(p, key, klen);
	k = encode_json_string(s, strnlen(s, max), p + klen, (size_t) (end - p) - klen);
	return k < 0 ? NULL : p + klen + k;
}

static char *put_key_u64(char *p, char *end, const char *key, uint64_t v) {
	size_t klen = strlen(key);

	/* 20 digits at most */
	if (!p || (size_t) (end - p) < klen + 20)
		return NULL;
	memcpy(p, key, klen);
	return encode_u64_digits(p + klen, v);
}

ssize_t encode_json_btf(
	const DecodedEvent *ev,
	const BtfRec *rec,
	const char *producer_name,
	const char *unit,
	const Container *container,
	char *buf,
	size_t size) {
	char *p = buf, *end = buf + MIN(size, (size_t) SSIZE_MAX);
	const char *name = btfrec_name(rec);
	size_t n = strlen(name);
	ssize_t k;

	if ((size_t) (end - p) < n + 10)
		return -ENOBUFS;
	p = mempcpy(p, "{\"type\":\"", 9);
	p = mempcpy(p, name, n);
	*p++ = '"';
	p = put_key_u64(p, end, ",\"ts\":", ev->hdr.ts_ns);
	p = put_key_u64(p, end, ",\"cpu\":", ev->hdr.cpu);
	p = put_key_u64(p, end, ",\"seq\":", ev->hdr.seq);
	p = put_key_u64(p, end, ",\"producer\":", ev->hdr.producer);
	if (producer_name)
		p = put_key_string(p, end, ",\"producer_name\":", producer_name, ENCODE_PRODUCER_NAME_MAX);
	if (!p)
		return -ENOBUFS;
	k = encode_json_btf_fields(rec, ev->record, ev->hdr.size, p, (size_t) (end - p));
	if (k < 0)
		return k;
	p += k;
	if (unit && strnlen(unit, ENCODE_UNIT_MAX + 1) <= ENCODE_UNIT_MAX)
		p = put_key_string(p, end, ",\"unit\":", unit, ENCODE_UNIT_MAX);
	if (p && container) {
		k = encode_container_json(container, p, (size_t) (end - p));
		p = k < 0 ? NULL : p + k;
	}
	if (!p || end - p < 2)
		return -ENOBUFS;
	*p++ = '}';
	*p++ = '\n';
	return p - buf;
}
