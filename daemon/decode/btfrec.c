/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Builds flat decoder descriptions of third-party record structs from untrusted BTF, and
 * decodes records with them (see btfrec.h). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/btf.h>

#include "decode/btfrec-internal.h"
#include "event.h"
#include "macro.h"
#include "string-table.h"

/* Worst-case JSON of n bytes: as an escaped string (encode.c: 6 bytes per input byte) and as
 * quoted base64. */
#define ENCODE_JSON_STRING_MAX(n) (2u + 6u * (size_t) (n))
#define BASE64_JSON_MAX(n)        (2u + 4u * (((size_t) (n) + 2u) / 3u))

typedef struct Builder {
	const struct btf *btf;
	BtfRec *rec;
	unsigned steps_cap, enums_cap;
	BtfRecError error;
} Builder;

static const char *const btfrec_kind_table[_BTFREC_KIND_MAX] = {
	[BTFREC_UINT] = "uint",
	[BTFREC_INT] = "int",
	[BTFREC_ENUM] = "enum",
	[BTFREC_STRING] = "string",
	[BTFREC_BYTES] = "bytes",
	[BTFREC_STRUCT_BEGIN] = "struct",
	[BTFREC_STRUCT_END] = "struct_end",
	[BTFREC_ARRAY_BEGIN] = "array",
	[BTFREC_ARRAY_END] = "array_end",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(btfrec_kind, BtfRecKind);

static const char *const btfrec_error_table[_BTFREC_ERROR_MAX] = {
	[BTFREC_OK] = "ok",
	[BTFREC_BAD_TYPE] = "bad-type",
	[BTFREC_NO_HEADER] = "no-header",
	[BTFREC_TOO_DEEP] = "too-deep",
	[BTFREC_TOO_MANY_FIELDS] = "too-many-fields",
	[BTFREC_ARRAY_TOO_LARGE] = "array-too-large",
	[BTFREC_OUT_OF_BOUNDS] = "out-of-bounds",
	[BTFREC_BAD_NAME] = "bad-name",
	[BTFREC_RESERVED_NAME] = "reserved-name",
	[BTFREC_UNSUPPORTED] = "unsupported",
	[BTFREC_OUTPUT_TOO_LARGE] = "output-too-large",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(btfrec_error, BtfRecError);

BtfRec *btfrec_free(BtfRec *r) {
	if (!r)
		return NULL;
	free(r->steps);
	free(r->enums);
	free(r->names);
	free(r);
	return NULL;
}

/* Names end up as JSON keys and values unescaped, so only C identifiers are accepted. */
static bool name_is_valid(const char *s) {
	size_t n;

	if (!s || !s[0] || isdigit((unsigned char) s[0]))
		return false;
	n = strnlen(s, BTFREC_MAX_NAME + 1);
	if (n > BTFREC_MAX_NAME)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char) s[i]) || s[i] == '_'))
			return false;
	return true;
}

static int fail(Builder *b, BtfRecError e) {
	if (b->error == BTFREC_OK)
		b->error = e;
	return -EINVAL;
}

static int add_name(Builder *b, const char *s, uint32_t *ret) {
	BtfRec *r = b->rec;
	size_t n;

	if (!name_is_valid(s))
		return fail(b, BTFREC_BAD_NAME);
	n = strlen(s) + 1;
	if (r->names_len + n > r->names_cap) {
		size_t cap = MAX(r->names_cap * 2, r->names_len + n + 256);
		char *p = realloc(r->names, cap);

		if (!p)
			return -ENOMEM;
		r->names = p;
		r->names_cap = cap;
	}
	memcpy(r->names + r->names_len, s, n);
	*ret = (uint32_t) r->names_len;
	r->names_len += n;
	return 0;
}

static int add_step(
	Builder *b, BtfRecKind kind, unsigned depth, uint32_t offset, uint32_t size, const char *name, Step **ret) {
	BtfRec *r = b->rec;
	Step *s;
	int k;

	if (r->n_steps >= BTFREC_MAX_FIELDS)
		return fail(b, BTFREC_TOO_MANY_FIELDS);
	if (r->n_steps >= b->steps_cap) {
		unsigned cap = MAX(b->steps_cap * 2, 16u);
		Step *p = reallocarray(r->steps, cap, sizeof(Step));

		if (!p)
			return -ENOMEM;
		r->steps = p;
		b->steps_cap = cap;
	}
	s = &r->steps[r->n_steps];
	*s = (Step){ .kind = kind, .depth = depth, .offset = offset, .size = size, .name = NO_NAME };
	if (name) {
		k = add_name(b, name, &s->name);
		if (k < 0)
			return k;
		s->name_len = (uint32_t) strlen(name);
		/* ,"name": */
		r->json_max += strlen(name) + 4;
	} else
		r->json_max += 1; /* the comma between array elements */
	r->n_steps++;
	if (ret)
		*ret = s;
	return 0;
}

/* Follows typedef/const/volatile/restrict/type_tag links, a bounded number of times because
 * BTF can contain cycles. Returns NULL for a dangling or too long chain. */
static const struct btf_type *resolve(const struct btf *btf, uint32_t id, uint32_t *ret_id) {
	for (unsigned i = 0; i < BTFREC_MAX_RESOLVE; i++) {
		const struct btf_type *t = btf__type_by_id(btf, id);

		if (!t || id == 0)
			return NULL;
		if (!(btf_is_typedef(t) || btf_is_const(t) || btf_is_volatile(t) || btf_is_restrict(t) ||
		      btf_is_type_tag(t))) {
			if (ret_id)
				*ret_id = id;
			return t;
		}
		id = t->type;
	}
	return NULL;
}

/* The size of a type, bounded in depth, or -EINVAL on anything it cannot size. */
static int64_t type_size(const struct btf *btf, uint32_t id, unsigned depth) {
	const struct btf_type *t;
	int64_t es;

	if (depth > BTFREC_MAX_DEPTH + 1)
		return -EINVAL;
	t = resolve(btf, id, NULL);
	if (!t)
		return -EINVAL;
	if (btf_is_int(t) || btf_is_any_enum(t) || btf_is_composite(t) || btf_is_float(t))
		return t->size;
	if (btf_is_ptr(t))
		return 8;
	if (btf_is_array(t)) {
		es = type_size(btf, btf_array(t)->type, depth + 1);
		if (es < 0)
			return es;
		/* Nested arrays multiply: a size beyond 4 GiB is no record's field (records are at
		 * most 64 KiB), so it is refused before the product can overflow (the fuzzer found
		 * [0xffffffff][0xfd000010]...). */
		if (es > UINT32_MAX || (es > 0 && btf_array(t)->nelems > UINT32_MAX / (uint64_t) es))
			return -E2BIG;
		return es * (int64_t) btf_array(t)->nelems;
	}
	return -EINVAL;
}

static bool is_char(const struct btf *btf, const struct btf_type *t) {
	const char *n;

	if (!btf_is_int(t) || t->size != 1)
		return false;
	if (btf_int_encoding(t) & BTF_INT_CHAR)
		return true;
	n = btf__name_by_offset(btf, t->name_off);
	return n && strcmp(n, "char") == 0;
}

static int add_type(Builder *b, uint32_t id, const char *name, unsigned depth, uint32_t offset, uint32_t room);

static int add_enum(Builder *b, const struct btf_type *t, const char *name, unsigned depth, uint32_t offset) {
	BtfRec *r = b->rec;
	unsigned vlen = btf_vlen(t);
	size_t longest = 0;
	Step *s;
	int k;

	if (t->size != 1 && t->size != 2 && t->size != 4 && t->size != 8)
		return fail(b, BTFREC_UNSUPPORTED);
	if (r->n_enums + vlen > BTFREC_MAX_ENUMS)
		return fail(b, BTFREC_TOO_MANY_FIELDS);
	k = add_step(b, BTFREC_ENUM, depth, offset, t->size, name, &s);
	if (k < 0)
		return k;
	s->is_signed = btf_kflag(t);
	s->enum_first = r->n_enums;
	s->enum_count = vlen;
	if (r->n_enums + vlen > b->enums_cap) {
		unsigned cap = MAX(b->enums_cap * 2, r->n_enums + vlen);
		EnumVal *p = reallocarray(r->enums, cap, sizeof(EnumVal));

		if (!p)
			return -ENOMEM;
		r->enums = p;
		b->enums_cap = cap;
	}
	for (unsigned i = 0; i < vlen; i++) {
		EnumVal *e = &r->enums[r->n_enums];
		const char *en;

		if (btf_is_enum(t)) {
			const struct btf_enum *v = btf_enum(t) + i;

			en = btf__name_by_offset(b->btf, v->name_off);
			/* Sign-extend signed 32-bit enumerators so they compare with the decoded value. */
			e->value = btf_kflag(t) ? (uint64_t) (int64_t) v->val : (uint64_t) (uint32_t) v->val;
		} else {
			const struct btf_enum64 *v = btf_enum64(t) + i;

			en = btf__name_by_offset(b->btf, v->name_off);
			e->value = btf_enum64_value(v);
		}
		k = add_name(b, en, &e->name);
		if (k < 0)
			return k;
		longest = MAX(longest, strlen(en));
		r->n_enums++;
	}
	r->json_max += MAX(longest + 2, (size_t) 20);
	return 0;
}

static int add_struct(Builder *b, const struct btf_type *t, unsigned depth, uint32_t offset, bool top) {
	const struct btf_member *m = btf_members(t);
	unsigned vlen = btf_vlen(t);

	for (unsigned i = 0; i < vlen; i++) {
		uint32_t bits = btf_member_bit_offset(t, i);
		const char *mname = btf__name_by_offset(b->btf, m[i].name_off);
		int64_t msize;
		int k;

		if (btf_member_bitfield_size(t, i) != 0 || bits % 8 != 0)
			return fail(b, BTFREC_UNSUPPORTED);
		msize = type_size(b->btf, m[i].type, depth);
		if (msize < 0)
			return fail(b, BTFREC_BAD_TYPE);
		if (bits / 8 + (uint64_t) msize > t->size)
			return fail(b, BTFREC_OUT_OF_BOUNDS);
		/* The header is the envelope of every event (ts, cpu, seq, producer): not a field. */
		if (top && i == 0)
			continue;
		if (!mname || !mname[0])
			/* Anonymous struct/union members: their content has no name to publish under. */
			mname = NULL;
		k = add_type(b, m[i].type, mname ? mname : "_anon", depth, offset + bits / 8, (uint32_t) msize);
		if (k < 0)
			return k;
	}
	return 0;
}

/* Adds the steps of type id, `room` bytes at offset (already checked to lie in the record). */
static int add_type(Builder *b, uint32_t id, const char *name, unsigned depth, uint32_t offset, uint32_t room) {
	const struct btf_type *t;
	int k;

	if (depth > BTFREC_MAX_DEPTH)
		return fail(b, BTFREC_TOO_DEEP);
	t = resolve(b->btf, id, &id);
	if (!t)
		return fail(b, BTFREC_BAD_TYPE);

	if (btf_is_int(t)) {
		Step *s;

		if ((t->size != 1 && t->size != 2 && t->size != 4 && t->size != 8) ||
		    btf_int_offset(t) != 0 || btf_int_bits(t) != t->size * 8)
			return fail(b, BTFREC_UNSUPPORTED);
		k = add_step(
			b,
			(btf_int_encoding(t) & BTF_INT_SIGNED) ? BTFREC_INT : BTFREC_UINT,
			depth,
			offset,
			t->size,
			name,
			&s);
		b->rec->json_max += 20;
		return k;
	}
	if (btf_is_ptr(t)) {
		/* An address of the producer's kernel: a number, nothing we could follow. */
		b->rec->json_max += 20;
		return add_step(b, BTFREC_UINT, depth, offset, 8, name, NULL);
	}
	if (btf_is_any_enum(t))
		return add_enum(b, t, name, depth, offset);
	if (btf_is_struct(t)) {
		k = add_step(b, BTFREC_STRUCT_BEGIN, depth, offset, t->size, name, NULL);
		if (k < 0)
			return k;
		b->rec->json_max += 1;
		k = add_struct(b, t, depth + 1, offset, false);
		if (k < 0)
			return k;
		b->rec->json_max += 1;
		return add_step(b, BTFREC_STRUCT_END, depth, offset, t->size, NULL, NULL);
	}
	if (btf_is_union(t) || btf_is_float(t)) {
		/* Which union member is live is the producer's knowledge, not the BTF's. */
		b->rec->json_max += BASE64_JSON_MAX(t->size);
		return add_step(b, BTFREC_BYTES, depth, offset, t->size, name, NULL);
	}
	if (btf_is_array(t)) {
		const struct btf_array *a = btf_array(t);
		const struct btf_type *et;
		uint32_t eid;
		int64_t es;

		et = resolve(b->btf, a->type, &eid);
		if (!et)
			return fail(b, BTFREC_BAD_TYPE);
		if (is_char(b->btf, et)) {
			if (a->nelems > room)
				return fail(b, BTFREC_OUT_OF_BOUNDS);
			b->rec->json_max += MAX(ENCODE_JSON_STRING_MAX(a->nelems), BASE64_JSON_MAX(a->nelems));
			return add_step(b, BTFREC_STRING, depth, offset, a->nelems, name, NULL);
		}
		if (a->nelems > BTFREC_MAX_ARRAY)
			return fail(b, BTFREC_ARRAY_TOO_LARGE);
		es = type_size(b->btf, eid, depth + 1);
		if (es < 0)
			return fail(b, BTFREC_BAD_TYPE);
		if ((uint64_t) es * a->nelems > room)
			return fail(b, BTFREC_OUT_OF_BOUNDS);
		k = add_step(b, BTFREC_ARRAY_BEGIN, depth, offset, (uint32_t) (es * a->nelems), name, NULL);
		if (k < 0)
			return k;
		b->rec->json_max += 2;
		for (uint32_t i = 0; i < a->nelems; i++) {
			k = add_type(b, eid, NULL, depth + 1, offset + (uint32_t) (i * es), (uint32_t) es);
			if (k < 0)
				return k;
		}
		return add_step(b, BTFREC_ARRAY_END, depth, offset, 0, NULL, NULL);
	}
	return fail(b, BTFREC_UNSUPPORTED);
}

int btfrec_build(
	const struct btf *btf,
	uint32_t type_id,
	uint16_t type,
	const char *name,
	BtfRec **ret,
	BtfRecError *ret_error) {
	_cleanup_(btfrec_freep) BtfRec *r = NULL;
	const struct btf_type *t, *ht;
	Builder b = { .btf = btf };
	const char *hname;
	int k;

	t = resolve(btf, type_id, &type_id);
	if (!t || !btf_is_struct(t)) {
		*ret_error = BTFREC_BAD_TYPE;
		return -EINVAL;
	}
	if (!name)
		name = btf__name_by_offset(btf, t->name_off);
	if (!name_is_valid(name)) {
		*ret_error = BTFREC_BAD_NAME;
		return -EINVAL;
	}
	if (t->size > PERFRELAY_RECORD_MAX) {
		*ret_error = BTFREC_OUT_OF_BOUNDS;
		return -EINVAL;
	}
	/* The record must start with the header: checked by size and name, since the producer's
	 * copy of struct perfrelay_hdr is its own BTF type. */
	ht = btf_vlen(t) > 0 ? resolve(btf, btf_members(t)[0].type, NULL) : NULL;
	hname = ht ? btf__name_by_offset(btf, ht->name_off) : NULL;
	if (!ht || !btf_is_struct(ht) || ht->size != sizeof(struct perfrelay_hdr) ||
	    btf_member_bit_offset(t, 0) != 0 || !hname || strcmp(hname, "perfrelay_hdr") != 0) {
		*ret_error = BTFREC_NO_HEADER;
		return -EINVAL;
	}

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->type = type;
	r->size = t->size;
	strcpy(r->name, name); /* name_is_valid() bounded it */
	b.rec = r;

	k = add_struct(&b, t, 0, 0, true);
	if (k == -EINVAL) {
		*ret_error = b.error;
		return k;
	}
	if (k < 0)
		return k;
	if (r->json_max > BTFREC_JSON_MAX) {
		*ret_error = BTFREC_OUTPUT_TOO_LARGE;
		return -EINVAL;
	}
	*ret = TAKE_PTR(r);
	return 0;
}

const char *btfrec_name(const BtfRec *r) {
	return r->name;
}

uint16_t btfrec_type(const BtfRec *r) {
	return r->type;
}

uint32_t btfrec_size(const BtfRec *r) {
	return r->size;
}

unsigned btfrec_n_steps(const BtfRec *r) {
	return r->n_steps;
}

void btfrec_describe(const BtfRec *r, unsigned i, BtfRecValue *ret) {
	const Step *s = &r->steps[i];

	*ret = (BtfRecValue){
		.kind = s->kind,
		.name = s->name == NO_NAME ? NULL : r->names + s->name,
		.depth = s->depth,
		.offset = s->offset,
		.size = s->size,
		.is_signed = s->is_signed,
	};
}

void btfrec_get(const BtfRec *r, const void *rec, unsigned i, BtfRecValue *ret) {
	const Step *s = &r->steps[i];
	const uint8_t *p = (const uint8_t *) rec + s->offset;

	btfrec_describe(r, i, ret);
	switch (s->kind) {
	case BTFREC_UINT:
		ret->value.u = read_uint(p, s->size);
		break;
	case BTFREC_INT:
		ret->value.i = sign_extend(read_uint(p, s->size), s->size);
		break;
	case BTFREC_ENUM: {
		uint64_t v;

		ret->value.u = read_uint(p, s->size);
		if (s->is_signed)
			ret->value.i = sign_extend(ret->value.u, s->size);
		/* Enumerators are kept sign-extended for signed enums, like value.i. */
		v = s->is_signed ? (uint64_t) ret->value.i : ret->value.u;
		for (uint32_t k = 0; k < s->enum_count; k++) {
			const EnumVal *e = &r->enums[s->enum_first + k];

			if (e->value == v) {
				ret->enum_name = r->names + e->name;
				break;
			}
		}
		break;
	}
	case BTFREC_STRING: {
		const uint8_t *nul = memchr(p, 0, s->size);

		ret->bytes = p;
		if (nul)
			ret->len = (uint32_t) (nul - p);
		else {
			ret->kind = BTFREC_BYTES;
			ret->len = s->size;
		}
		break;
	}
	case BTFREC_BYTES:
		ret->bytes = p;
		ret->len = s->size;
		break;
	default:
		break;
	}
}

unsigned btfrec_n_enums(const BtfRec *r, unsigned i) {
	return r->steps[i].kind == BTFREC_ENUM ? r->steps[i].enum_count : 0;
}

void btfrec_enum(const BtfRec *r, unsigned i, unsigned k, uint64_t *ret_value, const char **ret_name) {
	const EnumVal *e = &r->enums[r->steps[i].enum_first + k];

	*ret_value = e->value;
	*ret_name = r->names + e->name;
}

int btfrec_find_field(const BtfRec *r, const char *name) {
	for (unsigned i = 0; i < r->n_steps; i++) {
		const Step *s = &r->steps[i];

		if (s->depth != 0 || s->name == NO_NAME)
			continue;
		if (s->kind != BTFREC_UINT && s->kind != BTFREC_INT && s->kind != BTFREC_ENUM &&
		    s->kind != BTFREC_STRING)
			continue;
		if (strcmp(r->names + s->name, name) == 0)
			return (int) i;
	}
	return -ENOENT;
}

/* ---- declarations ---- */

static bool parse_type_tag(const char *v, uint16_t *ret) {
	unsigned long t;
	char *end;

	if (!v || strncmp(v, BTFREC_TAG_TYPE, strlen(BTFREC_TAG_TYPE)) != 0)
		return false;
	v += strlen(BTFREC_TAG_TYPE);
	if (!isdigit((unsigned char) v[0]))
		return false;
	errno = 0;
	t = strtoul(v, &end, 0);
	if (errno != 0 || *end != '\0' || t < PERFRELAY_TYPE_THIRD_PARTY_MIN || t > UINT16_MAX)
		return false;
	*ret = (uint16_t) t;
	return true;
}

/* The struct a declaration tag names: the tagged struct itself, or for PERFRELAY_RECORD()'s
 * anchor variable the struct its pointer points to. */
static const struct btf_type *decl_struct(const struct btf *btf, uint32_t id, uint32_t *ret_id) {
	const struct btf_type *t = btf__type_by_id(btf, id);

	if (t && btf_is_var(t)) {
		t = resolve(btf, t->type, &id);
		if (!t || !btf_is_ptr(t))
			return NULL;
		t = resolve(btf, t->type, &id);
	}
	if (!t || !btf_is_struct(t))
		return NULL;
	*ret_id = id;
	return t;
}

bool btfrec_btf_aligned(const struct btf *btf) {
	/* Every BTF type record is a multiple of 4 bytes long: the first one's place says it all. */
	const void *t = btf__type_cnt(btf) > 1 ? btf__type_by_id(btf, 1) : NULL;

	return !t || (uintptr_t) t % _Alignof(struct btf_type) == 0;
}

size_t btfrec_find_decls(const struct btf *btf, BtfRecDecl *decls, size_t max, unsigned *ret_bad) {
	uint32_t n_types = btf__type_cnt(btf);
	unsigned bad = 0;
	size_t n = 0;

	for (uint32_t id = 1; id < n_types; id++) {
		const struct btf_type *t = btf__type_by_id(btf, id), *st;
		const char *v, *sname;
		uint32_t sid = 0;
		uint16_t type;
		bool dup = false;

		if (!t || !btf_is_decl_tag(t) || btf_decl_tag(t)->component_idx != -1)
			continue;
		v = btf__name_by_offset(btf, t->name_off);
		if (!v || strncmp(v, BTFREC_TAG_TYPE, strlen(BTFREC_TAG_TYPE)) != 0)
			continue;
		st = decl_struct(btf, t->type, &sid);
		sname = st ? btf__name_by_offset(btf, st->name_off) : NULL;
		if (!parse_type_tag(v, &type) || !st || !name_is_valid(sname)) {
			bad++;
			continue;
		}
		for (size_t i = 0; i < n; i++)
			if (decls[i].type == type || decls[i].type_id == sid)
				dup = true;
		if (dup || n >= max) {
			bad++;
			continue;
		}
		decls[n] = (BtfRecDecl){ .type_id = sid, .type = type, .tag_target = t->type };
		strcpy(decls[n].name, sname);
		n++;
	}
	if (n == 0)
		goto done;

	/* Names are separate tags on the same struct; the last valid one wins. */
	for (uint32_t id = 1; id < n_types; id++) {
		const struct btf_type *t = btf__type_by_id(btf, id);
		const char *v;

		if (!t || !btf_is_decl_tag(t) || btf_decl_tag(t)->component_idx != -1)
			continue;
		v = btf__name_by_offset(btf, t->name_off);
		if (!v || strncmp(v, BTFREC_TAG_NAME, strlen(BTFREC_TAG_NAME)) != 0)
			continue;
		v += strlen(BTFREC_TAG_NAME);
		for (size_t i = 0; i < n; i++) {
			if (decls[i].tag_target != t->type)
				continue;
			if (name_is_valid(v))
				strcpy(decls[i].name, v);
			else
				bad++;
		}
	}
done:
	if (ret_bad)
		*ret_bad = bad;
	return n;
}

int btfrec_find_producer(const struct btf *btf, uint32_t *ret_id, char ret_name[static BTFREC_MAX_NAME + 1]) {
	uint32_t n_types = btf__type_cnt(btf), target = 0;
	unsigned long id = 0;
	const char *name = NULL;

	for (uint32_t i = 1; i < n_types; i++) {
		const struct btf_type *t = btf__type_by_id(btf, i);
		const char *v;

		if (!t || !btf_is_decl_tag(t) || btf_decl_tag(t)->component_idx != -1)
			continue;
		v = btf__name_by_offset(btf, t->name_off);
		if (!v || strncmp(v, BTFREC_TAG_PRODUCER, strlen(BTFREC_TAG_PRODUCER)) != 0)
			continue;
		if (target == 0) {
			char *end;

			v += strlen(BTFREC_TAG_PRODUCER);
			if (!isdigit((unsigned char) v[0]))
				return -EBADMSG;
			errno = 0;
			id = strtoul(v, &end, 0);
			if (errno != 0 || *end != '\0' || id < PERFRELAY_PRODUCER_THIRD_PARTY_MIN ||
			    id >= PERFRELAY_MAX_PRODUCERS)
				return -EBADMSG;
			target = t->type;
		}
	}
	if (target == 0)
		return 0;
	for (uint32_t i = 1; i < n_types; i++) {
		const struct btf_type *t = btf__type_by_id(btf, i);
		const char *v;

		if (!t || !btf_is_decl_tag(t) || btf_decl_tag(t)->component_idx != -1 || t->type != target)
			continue;
		v = btf__name_by_offset(btf, t->name_off);
		if (v && strncmp(v, BTFREC_TAG_PRODUCER_NAME, strlen(BTFREC_TAG_PRODUCER_NAME)) == 0)
			name = v + strlen(BTFREC_TAG_PRODUCER_NAME);
	}
	if (!name || !name_is_valid(name))
		return -EBADMSG;
	*ret_id = (uint32_t) id;
	strcpy(ret_name, name);
	return 1;
}
