/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A binary-format libperfrelay client for test_btf_producers.py: subscribes to one third-party
 * record type by name and prints each record as the JSON object perfrelay_record_field() lets it
 * rebuild (names, nested structs and arrays, enum names, strings), so the test can compare a
 * binary client's view with a JSON client's.
 *
 * usage: field-client SOCKET TYPE N
 * Prints "READY" once subscribed, then one JSON line per record ({"type":..,"producer_name":..,
 * "seq":..,<fields>}), or {"error":..} for a record whose fields cannot be had, and
 * {"notice":<the JSON>} for a notice of records lost upstream (docs/protocol.md). Exit status: 0
 * after N records, 1 on an error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "perfrelay.h"

#define MAX_DEPTH 16

static json_object *value(const struct perfrelay_field *f) {
	switch (f->kind) {
	case PERFRELAY_FIELD_UINT:
		return json_object_new_uint64(f->value.u);
	case PERFRELAY_FIELD_INT:
		return json_object_new_int64(f->value.i);
	case PERFRELAY_FIELD_ENUM:
		if (f->enum_name)
			return json_object_new_string(f->enum_name);
		return f->is_signed ? json_object_new_int64(f->value.i) : json_object_new_uint64(f->value.u);
	case PERFRELAY_FIELD_STRING:
		return json_object_new_string_len(f->bytes, (int) f->len);
	case PERFRELAY_FIELD_BYTES:
		return json_object_new_string("<bytes>");
	case PERFRELAY_FIELD_STRUCT_BEGIN:
		return json_object_new_object();
	case PERFRELAY_FIELD_ARRAY_BEGIN:
		return json_object_new_array();
	default:
		return NULL;
	}
}

static int print_record(perfrelay_client *c, const struct perfrelay_hdr *hdr) {
	json_object *stack[MAX_DEPTH + 1], *o = json_object_new_object();
	struct perfrelay_field f;
	unsigned iter = 0, depth = 0;
	int r;

	stack[0] = o;
	json_object_object_add(
		o, "type", json_object_new_string(perfrelay_record_type_name(c, hdr->type) ?: "?"));
	json_object_object_add(
		o,
		"producer_name",
		json_object_new_string(perfrelay_record_producer_name(c, hdr->type) ?: "?"));
	json_object_object_add(o, "seq", json_object_new_uint64(hdr->seq));
	while ((r = perfrelay_record_field(c, hdr, &iter, &f)) > 0) {
		json_object *v;

		if (f.kind == PERFRELAY_FIELD_STRUCT_END || f.kind == PERFRELAY_FIELD_ARRAY_END) {
			if (depth > 0)
				depth--;
			continue;
		}
		v = value(&f);
		if (json_object_is_type(stack[depth], json_type_array))
			json_object_array_add(stack[depth], v);
		else
			json_object_object_add(stack[depth], f.name ?: "?", v);
		if ((f.kind == PERFRELAY_FIELD_STRUCT_BEGIN || f.kind == PERFRELAY_FIELD_ARRAY_BEGIN) &&
		    depth < MAX_DEPTH)
			stack[++depth] = v;
	}
	if (r < 0) {
		json_object_put(o);
		printf("{\"error\":%d}\n", r);
	} else {
		puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	}
	fflush(stdout);
	return r;
}

int main(int argc, char *argv[]) {
	const char *types[1];
	struct perfrelay_subscription sub = { .types = types, .n_types = 1, .format = PERFRELAY_FORMAT_BINARY };
	perfrelay_client *c = NULL;
	unsigned long n, got = 0;
	int r;

	if (argc != 4) {
		fprintf(stderr, "usage: %s SOCKET TYPE N\n", argv[0]);
		return 1;
	}
	types[0] = argv[2];
	n = strtoul(argv[3], NULL, 10);
	if (perfrelay_client_new(&c) < 0 || (r = perfrelay_connect(c, argv[1], &sub)) < 0) {
		fprintf(stderr, "connect: %s\n", strerror(errno));
		return 1;
	}
	puts("READY");
	fflush(stdout);
	while (got < n) {
		const struct perfrelay_hdr *hdr;
		const void *payload;
		size_t size;

		r = perfrelay_next_record(c, &hdr, &payload, &size, 60000);
		if (r <= 0) {
			fprintf(stderr, "next_record: %d\n", r);
			perfrelay_close(c);
			return 1;
		}
		if (hdr->type == PERFRELAY_TYPE_LOST) {
			/* A notice of records lost upstream: the JSON behind the count. */
			if (size > sizeof(uint64_t)) {
				printf("{\"notice\":%.*s}\n",
				       (int) (size - sizeof(uint64_t)),
				       (const char *) payload + sizeof(uint64_t));
				fflush(stdout);
			}
			continue;
		}
		print_record(c, hdr);
		got++;
	}
	perfrelay_close(c);
	return 0;
}
