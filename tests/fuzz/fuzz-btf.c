/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the BTF-to-decoder builder and the field decoder: the input is a BTF blob as any
 * program loader could hand to the kernel; every struct in it (and every tagged declaration)
 * is built into a decoder, and each decoder then decodes records made of the input bytes. The
 * JSON must parse with json-c and stay within the bound the builder promised. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/btf.h>
#include <json-c/json.h>

#include "json-util.h"

#include "decode/btfrec.h"
#include "hub/encode.h"

#define MAX_STRUCTS 64u

static char json[BTFREC_JSON_MAX];
static char line[BTFREC_JSON_MAX + 16];
static uint8_t rec[65536];

#define CHECK(x)                                                                \
	do {                                                                    \
		if (!(x)) {                                                     \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #x); \
			abort();                                                \
		}                                                               \
	} while (0)

static void exercise(const struct btf *btf, uint32_t id, const uint8_t *data, size_t size) {
	BtfRecError err = BTFREC_OK;
	BtfRec *r = NULL;
	int k = btfrec_build(btf, id, 0x8001, NULL, &r, &err);

	if (k < 0) {
		CHECK(!r);
		CHECK(k == -ENOMEM || (k == -EINVAL && err != BTFREC_OK && btfrec_error_to_string(err)));
		return;
	}
	CHECK(btfrec_size(r) <= sizeof(rec));
	for (size_t i = 0; i < btfrec_size(r); i++)
		rec[i] = size ? data[i % size] : 0;

	for (unsigned i = 0; i < btfrec_n_steps(r); i++) {
		BtfRecValue v;

		btfrec_get(r, rec, i, &v);
		CHECK(v.offset + v.size <= btfrec_size(r) || v.kind == BTFREC_ARRAY_END);
		CHECK(v.depth <= BTFREC_MAX_DEPTH);
	}

	ssize_t n = encode_json_btf_fields(r, rec, btfrec_size(r), json, sizeof(json));
	CHECK(n >= 0 && (size_t) n <= BTFREC_JSON_MAX);
	CHECK(encode_json_btf_fields(r, rec, btfrec_size(r) - 1, json, sizeof(json)) == -EBADMSG);

	int len = snprintf(line, sizeof(line), "{\"t\":0%.*s}", (int) n, json);
	struct json_tokener *tok = json_tokener_new_ex(BTFREC_MAX_DEPTH * 2 + 8);
	json_tokener_set_flags(tok, json_strict_flags());
	struct json_object *o = json_tokener_parse_ex(tok, line, len);
	if (!o)
		fprintf(stderr, "bad JSON: %.*s\n", 2000, line);
	CHECK(o);
	json_object_put(o);
	json_tokener_free(tok);
	btfrec_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	struct btf *btf = btf__new(data, size);
	BtfRecDecl decls[BTFREC_MAX_DECLS];
	unsigned structs = 0, bad = 0;
	size_t n;

	if (!btf)
		return 0;
	/* The daemon refuses such BTF before it reads a type (producer-scan.c). */
	if (!btfrec_btf_aligned(btf)) {
		btf__free(btf);
		return 0;
	}
	n = btfrec_find_decls(btf, decls, BTFREC_MAX_DECLS, &bad);
	CHECK(n <= BTFREC_MAX_DECLS);
	for (size_t i = 0; i < n; i++) {
		CHECK(decls[i].type >= 0x8000);
		exercise(btf, decls[i].type_id, data, size);
	}
	for (uint32_t id = 1; id < btf__type_cnt(btf) && structs < MAX_STRUCTS; id++) {
		const struct btf_type *t = btf__type_by_id(btf, id);

		if (t && btf_is_struct(t)) {
			structs++;
			exercise(btf, id, data, size);
		}
	}
	btf__free(btf);
	return 0;
}
