/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of btfrec.c: a record type built with libbpf's BTF writer is decoded to the
 * values that were written (every integer width and sign, an enum, strings, a nested struct,
 * an array), declarations are found from their tags, and hostile BTF (deep nesting, huge
 * arrays, members beyond their struct, no header, cycles) is refused with its reason. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/btf.h>
#include <json-c/json.h>

#include "decode/btfrec.h"
#include "decode/decode.h"
#include "hub/encode.h"
#include "event.h"
#include "macro.h"

#include "unit-test.h"

static void btf_freep(struct btf **b) {
	btf__free(*b);
}

/* The record the tests decode, as a producer would declare it. */
struct inner {
	__u32 x;
	__s16 y;
	__u16 pad;
};
struct test_rec {
	struct perfrelay_hdr hdr;
	__u8 a;
	__s8 b;
	__u16 c;
	__s16 d;
	__u16 _pad;
	__u32 e;
	__s32 f;
	__u64 g;
	__s64 h;
	__s32 col; /* enum color */
	char name[16];
	struct inner in;
	__u32 arr[3];
	char raw[4];
};

typedef struct Ids {
	int u8, s8, u16, s16, u32, s32, u64, s64, chr, hdr, color, inner, arr_u32, name16, raw4, rec;
} Ids;

static struct btf *make_btf(Ids *ids) {
	struct btf *btf = btf__new_empty();

	ids->u8 = btf__add_int(btf, "unsigned char", 1, 0);
	ids->s8 = btf__add_int(btf, "signed char", 1, BTF_INT_SIGNED);
	ids->u16 = btf__add_int(btf, "unsigned short", 2, 0);
	ids->s16 = btf__add_int(btf, "short", 2, BTF_INT_SIGNED);
	ids->u32 = btf__add_int(btf, "unsigned int", 4, 0);
	ids->s32 = btf__add_int(btf, "int", 4, BTF_INT_SIGNED);
	ids->u64 = btf__add_int(btf, "unsigned long long", 8, 0);
	ids->s64 = btf__add_int(btf, "long long", 8, BTF_INT_SIGNED);
	ids->chr = btf__add_int(btf, "char", 1, BTF_INT_SIGNED);

	ids->hdr = btf__add_struct(btf, "perfrelay_hdr", 32);
	btf__add_field(btf, "magic", ids->u16, 0, 0);
	btf__add_field(btf, "seq", ids->u64, 128, 0);
	btf__add_field(btf, "ts_ns", ids->u64, 192, 0);

	ids->color = btf__add_enum(btf, "color", 4);
	btf__add_enum_value(btf, "RED", 0);
	btf__add_enum_value(btf, "GREEN", 1);
	btf__add_enum_value(btf, "BLUE", 7);

	ids->inner = btf__add_struct(btf, "inner", 8);
	btf__add_field(btf, "x", ids->u32, 0, 0);
	btf__add_field(btf, "y", ids->s16, 32, 0);
	btf__add_field(btf, "pad", ids->u16, 48, 0);

	ids->arr_u32 = btf__add_array(btf, ids->u32, ids->u32, 3);
	ids->name16 = btf__add_array(btf, ids->u32, ids->chr, 16);
	ids->raw4 = btf__add_array(btf, ids->u32, ids->chr, 4);

	ids->rec = btf__add_struct(btf, "test_rec", sizeof(struct test_rec));
#define F(n, id) btf__add_field(btf, #n, ids->id, offsetof(struct test_rec, n) * 8, 0)
	F(hdr, hdr);
	F(a, u8);
	F(b, s8);
	F(c, u16);
	F(d, s16);
	F(_pad, u16);
	F(e, u32);
	F(f, s32);
	F(g, u64);
	F(h, s64);
	F(col, color);
	F(name, name16);
	F(in, inner);
	F(arr, arr_u32);
	F(raw, raw4);
#undef F
	return btf;
}

static struct json_object *decode_json(const BtfRec *r, const void *rec, size_t size) {
	static char buf[BTFREC_JSON_MAX];
	char line[BTFREC_JSON_MAX + 64];
	ssize_t n;

	n = encode_json_btf_fields(r, rec, size, buf, sizeof(buf));
	ASSERT(n > 0);
	if (n <= 0)
		return NULL;
	/* The output is a list of members to splice after a key of the caller's. */
	snprintf(line, sizeof(line), "{\"type\":\"test\"%.*s}", (int) n, buf);
	return json_tokener_parse(line);
}

static int64_t get_int(struct json_object *o, const char *key) {
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return INT64_MIN;
	return json_object_get_int64(v);
}

static const char *get_str(struct json_object *o, const char *key) {
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static void test_decode(void) {
	_cleanup_(btf_freep) struct btf *btf = NULL;
	_cleanup_(btfrec_freep) BtfRec *r = NULL;
	struct test_rec rec = {
		.a = 250,
		.b = -7,
		.c = 65000,
		.d = -30000,
		.e = 4000000000u,
		.f = -2000000000,
		.g = 18000000000000000000ull,
		.h = -9000000000000000000ll,
		.col = 7,
		.name = "hello",
		.in = { .x = 42, .y = -5 },
		.arr = { 1, 2, 0xffffffffu },
		.raw = { 'a', 'b', 'c', 'd' },
	};
	struct json_object *o, *v, *in;
	BtfRecError err = BTFREC_OK;
	BtfRecValue val;
	Ids ids;
	int i;

	btf = make_btf(&ids);
	ASSERT(btfrec_build(btf, ids.rec, 0x8001, "my_name", &r, &err) == 0);
	ASSERT(err == BTFREC_OK);
	if (!r)
		return;
	ASSERT(strcmp(btfrec_name(r), "my_name") == 0);
	ASSERT(btfrec_type(r) == 0x8001);
	ASSERT(btfrec_size(r) == sizeof(struct test_rec));

	o = decode_json(r, &rec, sizeof(rec));
	ASSERT(o);
	if (!o)
		return;
	ASSERT(get_int(o, "a") == 250);
	ASSERT(get_int(o, "b") == -7);
	ASSERT(get_int(o, "c") == 65000);
	ASSERT(get_int(o, "d") == -30000);
	ASSERT(get_int(o, "e") == 4000000000ll);
	ASSERT(get_int(o, "f") == -2000000000);
	ASSERT(json_object_object_get_ex(o, "g", &v) && json_object_get_uint64(v) == 18000000000000000000ull);
	ASSERT(get_int(o, "h") == -9000000000000000000ll);
	ASSERT(get_str(o, "col") && strcmp(get_str(o, "col"), "BLUE") == 0);
	ASSERT(get_str(o, "name") && strcmp(get_str(o, "name"), "hello") == 0);
	/* No NUL within the array: base64 of the 4 bytes. */
	ASSERT(get_str(o, "raw") && strcmp(get_str(o, "raw"), "YWJjZA==") == 0);
	ASSERT(json_object_object_get_ex(o, "in", &in) && json_object_is_type(in, json_type_object));
	ASSERT(get_int(in, "x") == 42);
	ASSERT(get_int(in, "y") == -5);
	ASSERT(json_object_object_get_ex(o, "arr", &v) && json_object_is_type(v, json_type_array) &&
	       json_object_array_length(v) == 3);
	ASSERT(json_object_get_int64(json_object_array_get_idx(v, 0)) == 1);
	ASSERT(json_object_get_int64(json_object_array_get_idx(v, 2)) == 0xffffffffll);
	/* The header is the envelope, not a field. */
	ASSERT(!json_object_object_get_ex(o, "hdr", NULL));
	json_object_put(o);

	/* An enum value without an enumerator is its number. */
	rec.col = 3;
	o = decode_json(r, &rec, sizeof(rec));
	ASSERT(o && get_int(o, "col") == 3);
	json_object_put(o);

	/* The iterator gives the same view. */
	i = btfrec_find_field(r, "d");
	ASSERT(i >= 0);
	btfrec_get(r, &rec, (unsigned) i, &val);
	ASSERT(val.kind == BTFREC_INT && val.value.i == -30000 && strcmp(val.name, "d") == 0 && val.depth == 0);
	i = btfrec_find_field(r, "name");
	ASSERT(i >= 0);
	btfrec_get(r, &rec, (unsigned) i, &val);
	ASSERT(val.kind == BTFREC_STRING && val.len == 5 && memcmp(val.bytes, "hello", 5) == 0);
	ASSERT(btfrec_find_field(r, "hdr") == -ENOENT);
	ASSERT(btfrec_find_field(r, "x") == -ENOENT); /* nested fields are not filterable */
	ASSERT(btfrec_find_field(r, "nope") == -ENOENT);

	/* A record shorter than its type is refused, not read past. */
	{
		char buf[BTFREC_JSON_MAX];

		ASSERT(encode_json_btf_fields(r, &rec, sizeof(rec) - 1, buf, sizeof(buf)) == -EBADMSG);
		ASSERT(encode_json_btf_fields(r, &rec, sizeof(rec), buf, 16) == -ENOBUFS);
	}
}

static void test_decls(void) {
	_cleanup_(btf_freep) struct btf *btf = NULL;
	BtfRecDecl d[4];
	unsigned bad = 99;
	Ids ids;

	btf = make_btf(&ids);
	ASSERT(btfrec_find_decls(btf, d, ELEMENTSOF(d), &bad) == 0);
	ASSERT(bad == 0);

	btf__add_decl_tag(btf, "perfrelay.type=0x8001", ids.rec, -1);
	btf__add_decl_tag(btf, "perfrelay.name=my_name", ids.rec, -1);
	btf__add_decl_tag(btf, "perfrelay.type=32769", ids.inner, -1);   /* same type id: refused */
	btf__add_decl_tag(btf, "perfrelay.type=0x10", ids.inner, -1);    /* reserved range */
	btf__add_decl_tag(btf, "perfrelay.type=0x8002x", ids.inner, -1); /* garbage */
	btf__add_decl_tag(btf, "perfrelay.type=0x8003", ids.rec, 1);     /* on a member: ignored */
	btf__add_decl_tag(btf, "unrelated", ids.inner, -1);
	ASSERT(btfrec_find_decls(btf, d, ELEMENTSOF(d), &bad) == 1);
	ASSERT(bad == 3);
	ASSERT(d[0].type == 0x8001 && d[0].type_id == (uint32_t) ids.rec);
	ASSERT(strcmp(d[0].name, "my_name") == 0);

	/* PERFRELAY_RECORD()'s form: the tags are on a variable pointing to the struct. */
	{
		int cv = btf__add_const(btf, ids.inner);
		int ptr = btf__add_ptr(btf, cv);
		int var = btf__add_var(btf, "perfrelay__record_7", BTF_VAR_GLOBAL_ALLOCATED, ptr);

		btf__add_decl_tag(btf, "perfrelay.type=0x8002", var, -1);
		btf__add_decl_tag(btf, "perfrelay.name=other", var, -1);
		ASSERT(btfrec_find_decls(btf, d, ELEMENTSOF(d), &bad) == 2);
		ASSERT(bad == 3);
		ASSERT(d[1].type == 0x8002 && d[1].type_id == (uint32_t) ids.inner);
		ASSERT(strcmp(d[1].name, "other") == 0);
		ASSERT(strcmp(d[0].name, "my_name") == 0);
	}
}

static BtfRecError refusal(struct btf *btf, int id) {
	_cleanup_(btfrec_freep) BtfRec *r = NULL;
	BtfRecError err = BTFREC_OK;
	int k = btfrec_build(btf, id, 0x8001, NULL, &r, &err);

	ASSERT(k == -EINVAL);
	ASSERT(!r);
	return err;
}

static void test_hostile(void) {
	_cleanup_(btf_freep) struct btf *btf = NULL;
	int s, prev, big, rec, arr, self;
	Ids ids;

	btf = make_btf(&ids);

	/* Nesting one level deeper than allowed. */
	prev = ids.u32;
	for (unsigned i = 0; i <= BTFREC_MAX_DEPTH + 1; i++) {
		s = btf__add_struct(btf, NULL, 4);
		btf__add_field(btf, "n", prev, 0, 0);
		prev = s;
	}
	rec = btf__add_struct(btf, "deep", 36);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "n", prev, 256, 0);
	ASSERT(refusal(btf, rec) == BTFREC_TOO_DEEP);

	/* Exactly as deep as allowed is fine. */
	prev = ids.u32;
	for (unsigned i = 0; i < BTFREC_MAX_DEPTH; i++) {
		s = btf__add_struct(btf, NULL, 4);
		btf__add_field(btf, "n", prev, 0, 0);
		prev = s;
	}
	rec = btf__add_struct(btf, "deep_ok", 36);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "n", prev, 256, 0);
	{
		_cleanup_(btfrec_freep) BtfRec *r = NULL;
		BtfRecError err = BTFREC_OK;

		ASSERT(btfrec_build(btf, rec, 0x8001, NULL, &r, &err) == 0);
	}

	/* An array with more elements than allowed, even though it fits the record. */
	big = BTFREC_MAX_ARRAY + 1;
	arr = btf__add_array(btf, ids.u32, ids.u32, big);
	rec = btf__add_struct(btf, "huge_array", 32 + 4 * big);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "a", arr, 256, 0);
	ASSERT(refusal(btf, rec) == BTFREC_ARRAY_TOO_LARGE);

	/* Nested arrays whose size overflows 64 bits (found by fuzz-btf: signed overflow in the
	 * size computation): refused, not multiplied. */
	arr = btf__add_array(btf, ids.u32, ids.u32, 0xffffffffu);
	arr = btf__add_array(btf, ids.u32, arr, 0xfd000010u);
	arr = btf__add_array(btf, ids.u32, arr, 0xffffffffu);
	rec = btf__add_struct(btf, "overflow", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "a", arr, 256, 0);
	ASSERT(refusal(btf, rec) != BTFREC_OK);

	/* A char array beyond the struct. */
	arr = btf__add_array(btf, ids.u32, ids.chr, 1000);
	rec = btf__add_struct(btf, "beyond", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "s", arr, 256, 0);
	ASSERT(refusal(btf, rec) == BTFREC_OUT_OF_BOUNDS);

	/* A member offset beyond the struct. */
	rec = btf__add_struct(btf, "beyond2", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "x", ids.u64, 64 * 8, 0);
	ASSERT(refusal(btf, rec) == BTFREC_OUT_OF_BOUNDS);

	/* A struct larger than any perf record. */
	rec = btf__add_struct(btf, "too_big", PERFRELAY_RECORD_MAX + 1);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	ASSERT(refusal(btf, rec) == BTFREC_OUT_OF_BOUNDS);

	/* No header. */
	rec = btf__add_struct(btf, "headless", 40);
	btf__add_field(btf, "x", ids.u64, 0, 0);
	ASSERT(refusal(btf, rec) == BTFREC_NO_HEADER);

	/* A bitfield. */
	rec = btf__add_struct(btf, "bits", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "x", ids.u32, 256, 3);
	ASSERT(refusal(btf, rec) == BTFREC_UNSUPPORTED);

	/* A struct that contains itself (only hostile BTF can say that). */
	self = btf__add_struct(btf, "self", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "me", self + 1, 256, 0);
	s = btf__add_struct(btf, "loop", 8);
	btf__add_field(btf, "again", s, 0, 0);
	ASSERT(s == self + 1);
	ASSERT(refusal(btf, self) != BTFREC_OK);

	/* A dangling type id. */
	rec = btf__add_struct(btf, "dangling", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	ASSERT(refusal(btf, 100000) == BTFREC_BAD_TYPE);
	ASSERT(refusal(btf, ids.u32) == BTFREC_BAD_TYPE);

	/* Many small fields: the flat description has a bound too. */
	rec = btf__add_struct(btf, "wide", 32 + BTFREC_MAX_FIELDS + 1);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	for (unsigned i = 0; i <= BTFREC_MAX_FIELDS; i++) {
		char n[16];

		snprintf(n, sizeof(n), "f%u", i);
		btf__add_field(btf, n, ids.u8, (32 + i) * 8, 0);
	}
	ASSERT(refusal(btf, rec) == BTFREC_TOO_MANY_FIELDS);

	/* Names that are not identifiers could break the JSON. */
	rec = btf__add_struct(btf, "badname", 40);
	btf__add_field(btf, "hdr", ids.hdr, 0, 0);
	btf__add_field(btf, "x\"y", ids.u64, 256, 0);
	ASSERT(refusal(btf, rec) == BTFREC_BAD_NAME);
}

/* The whole event line: envelope from the header, producer_name, the decoded fields. */
static void test_encode_event(void) {
	_cleanup_(btf_freep) struct btf *btf = NULL;
	_cleanup_(btfrec_freep) BtfRec *r = NULL;
	static char line[ENCODE_JSON_MAX];
	struct test_rec rec = { .a = 9, .h = -1, .col = 1, .name = "x" };
	struct json_object *o, *v;
	BtfRecError err;
	DecodedEvent ev;
	ssize_t n;
	Ids ids;

	btf = make_btf(&ids);
	ASSERT(btfrec_build(btf, ids.rec, 0x8001, "my_name", &r, &err) == 0);
	if (!r)
		return;
	rec.hdr = (struct perfrelay_hdr){ .magic = PERFRELAY_MAGIC,
					  .version = PERFRELAY_VERSION,
					  .type = 0x8001,
					  .size = sizeof(rec),
					  .producer = 300,
					  .cpu = 1,
					  .seq = 77,
					  .ts_ns = 5 };
	ASSERT(decode_event(&rec, sizeof(rec), &ev) == DECODE_OK);
	n = encode_json_btf(&ev, r, "example_emit", "foo.service", NULL, line, sizeof(line));
	ASSERT(n > 0 && line[n - 1] == '\n');
	o = json_tokener_parse(line);
	ASSERT(o);
	if (!o)
		return;
	ASSERT(get_str(o, "type") && strcmp(get_str(o, "type"), "my_name") == 0);
	ASSERT(get_str(o, "producer_name") && strcmp(get_str(o, "producer_name"), "example_emit") == 0);
	ASSERT(get_str(o, "unit") && strcmp(get_str(o, "unit"), "foo.service") == 0);
	ASSERT(get_int(o, "producer") == 300 && get_int(o, "seq") == 77 && get_int(o, "ts") == 5);
	ASSERT(get_int(o, "a") == 9 && get_int(o, "h") == -1);
	ASSERT(get_str(o, "col") && strcmp(get_str(o, "col"), "GREEN") == 0);
	ASSERT(!json_object_object_get_ex(o, "payload", &v));
	json_object_put(o);

	/* A record shorter than its declared struct is the caller's to publish as unknown. */
	ev.hdr.size = sizeof(rec) - 8;
	ASSERT(encode_json_btf(&ev, r, NULL, NULL, NULL, line, sizeof(line)) == -EBADMSG);
}

int main(void) {
	test_decode();
	test_encode_event();
	test_decls();
	test_hostile();
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
