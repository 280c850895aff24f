/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Schema frames: the JSON the daemon sends before the first record of a third-party type
 * (docs/protocol.md, "Schema frames"), and decoding a record's fields with it, the same way the
 * daemon's decoder does (daemon/decode/btfrec.c: btfrec_get()). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "json-util.h"
#include "macro.h"
#include "lib/schema.h"

#define NAME_MAX_LEN 63u

typedef struct Field {
	char *name; /* NULL for array elements and END kinds */
	enum perfrelay_field_kind kind;
	unsigned depth;
	uint32_t offset, size;
	bool is_signed;
	unsigned enum_first, enum_count;
} Field;

typedef struct Enumerator {
	uint64_t value; /* sign-extended for signed enums */
	char *name;
} Enumerator;

struct Schema {
	uint16_t type;
	uint32_t size;
	char *name;
	char *producer_name;
	Field *fields;
	unsigned n_fields;
	Enumerator *enums;
	unsigned n_enums;
};

static const char *const kind_names[] = {
	[PERFRELAY_FIELD_UINT] = "uint",
	[PERFRELAY_FIELD_INT] = "int",
	[PERFRELAY_FIELD_ENUM] = "enum",
	[PERFRELAY_FIELD_STRING] = "string",
	[PERFRELAY_FIELD_BYTES] = "bytes",
	[PERFRELAY_FIELD_STRUCT_BEGIN] = "struct",
	[PERFRELAY_FIELD_STRUCT_END] = "struct_end",
	[PERFRELAY_FIELD_ARRAY_BEGIN] = "array",
	[PERFRELAY_FIELD_ARRAY_END] = "array_end",
};

Schema *schema_free(Schema *s) {
	if (!s)
		return NULL;
	for (unsigned i = 0; i < s->n_fields; i++)
		free(s->fields[i].name);
	for (unsigned i = 0; i < s->n_enums; i++)
		free(s->enums[i].name);
	free(s->fields);
	free(s->enums);
	free(s->name);
	free(s->producer_name);
	free(s);
	return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Schema *, schema_free);

static bool get_u64(json_object *o, const char *key, uint64_t max, uint64_t *ret) {
	json_object *v;
	int64_t i;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	i = json_object_get_int64(v);
	if (i < 0 || (uint64_t) i > max)
		return false;
	*ret = (uint64_t) i;
	return true;
}

/* A name of at most NAME_MAX_LEN bytes, copied; NULL and false if absent or too long. */
static bool get_name(json_object *o, const char *key, bool optional, char **ret) {
	json_object *v;
	size_t len;

	*ret = NULL;
	if (!json_object_object_get_ex(o, key, &v))
		return optional;
	if (!json_object_is_type(v, json_type_string))
		return false;
	len = (size_t) json_object_get_string_len(v);
	if (len == 0 || len > NAME_MAX_LEN || strlen(json_object_get_string(v)) != len)
		return false;
	*ret = strdup(json_object_get_string(v));
	return *ret != NULL;
}

static int parse_enums(Schema *s, Field *f, json_object *e) {
	f->enum_first = s->n_enums;
	json_object_object_foreach(e, name, value) {
		Enumerator *n;

		if (!json_object_is_type(value, json_type_int) || strlen(name) == 0 ||
		    strlen(name) > NAME_MAX_LEN || s->n_enums >= SCHEMA_MAX_ENUMS)
			return -EBADMSG;
		n = reallocarray(s->enums, s->n_enums + 1, sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->enums = n;
		n = &s->enums[s->n_enums];
		n->value = f->is_signed ? (uint64_t) json_object_get_int64(value) :
					  json_object_get_uint64(value);
		n->name = strdup(name);
		if (!n->name)
			return -ENOMEM;
		s->n_enums++;
		f->enum_count++;
	}
	return 0;
}

static int parse_field(Schema *s, Field *f, json_object *o) {
	json_object *v;
	const char *kind;
	uint64_t depth, offset, size;
	int k = -1;

	if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "kind", &v) ||
	    !json_object_is_type(v, json_type_string))
		return -EBADMSG;
	kind = json_object_get_string(v);
	for (unsigned i = 0; i < ELEMENTSOF(kind_names); i++)
		if (streq(kind, kind_names[i]))
			k = (int) i;
	if (k < 0 || !get_u64(o, "depth", 64, &depth) || !get_u64(o, "offset", s->size, &offset) ||
	    !get_u64(o, "size", s->size, &size) || offset + size > s->size)
		return -EBADMSG;
	f->kind = (enum perfrelay_field_kind) k;
	f->depth = (unsigned) depth;
	f->offset = (uint32_t) offset;
	f->size = (uint32_t) size;
	f->is_signed = json_object_object_get_ex(o, "signed", &v) && json_object_get_boolean(v);
	if ((f->kind == PERFRELAY_FIELD_UINT || f->kind == PERFRELAY_FIELD_INT ||
	     f->kind == PERFRELAY_FIELD_ENUM) &&
	    size != 1 && size != 2 && size != 4 && size != 8)
		return -EBADMSG;
	if (!get_name(o, "name", true, &f->name))
		return json_object_object_get_ex(o, "name", &v) ? -EBADMSG : -ENOMEM;
	if (f->kind == PERFRELAY_FIELD_ENUM && json_object_object_get_ex(o, "enum", &v)) {
		if (!json_object_is_type(v, json_type_object))
			return -EBADMSG;
		return parse_enums(s, f, v);
	}
	return 0;
}

int schema_parse(const char *json, size_t len, Schema **ret) {
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new_ex(8);
	_cleanup_(json_object_putp) json_object *o = NULL;
	_cleanup_(schema_freep) Schema *s = NULL;
	json_object *fields;
	uint64_t type, size;
	size_t n;

	if (!tok)
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, json, (int) len);
	if (!o || !json_object_is_type(o, json_type_object))
		return -EBADMSG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (!get_u64(o, "record_type", UINT16_MAX, &type) || type < PERFRELAY_TYPE_THIRD_PARTY_MIN ||
	    !get_u64(o, "size", PERFRELAY_RECORD_MAX, &size) || size < sizeof(struct perfrelay_hdr) ||
	    !get_name(o, "name", false, &s->name) || !get_name(o, "producer_name", true, &s->producer_name) ||
	    !json_object_object_get_ex(o, "fields", &fields) || !json_object_is_type(fields, json_type_array))
		return -EBADMSG;
	s->type = (uint16_t) type;
	s->size = (uint32_t) size;
	n = json_object_array_length(fields);
	if (n > SCHEMA_MAX_FIELDS)
		return -EBADMSG;
	s->fields = calloc(n ?: 1, sizeof(Field));
	if (!s->fields)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int r = parse_field(s, &s->fields[i], json_object_array_get_idx(fields, i));

		s->n_fields++;
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(s);
	return 0;
}

uint16_t schema_type(const Schema *s) {
	return s->type;
}
const char *schema_name(const Schema *s) {
	return s->name;
}
const char *schema_producer_name(const Schema *s) {
	return s->producer_name;
}

static uint64_t read_uint(const uint8_t *p, uint32_t size) {
	uint64_t v = 0;

	/* Records are in the host's byte order, as the producer wrote them. */
	switch (size) {
	case 1:
		return p[0];
	case 2: {
		uint16_t x;
		memcpy(&x, p, 2);
		return x;
	}
	case 4: {
		uint32_t x;
		memcpy(&x, p, 4);
		return x;
	}
	default:
		memcpy(&v, p, 8);
		return v;
	}
}

static int64_t sign_extend(uint64_t v, uint32_t size) {
	unsigned shift = 64 - size * 8;

	return (int64_t) (v << shift) >> shift;
}

int schema_field(const Schema *s, const void *record, size_t size, unsigned *iter, struct perfrelay_field *f) {
	const Field *d;
	const uint8_t *p;

	if (size < s->size)
		return -EBADMSG;
	if (*iter >= s->n_fields)
		return 0;
	d = &s->fields[(*iter)++];
	p = (const uint8_t *) record + d->offset;
	*f = (struct perfrelay_field){
		.name = d->name,
		.kind = d->kind,
		.depth = d->depth,
		.offset = d->offset,
		.size = d->size,
		.is_signed = d->is_signed || d->kind == PERFRELAY_FIELD_INT,
	};
	switch (d->kind) {
	case PERFRELAY_FIELD_UINT:
		f->value.u = read_uint(p, d->size);
		break;
	case PERFRELAY_FIELD_INT:
		f->value.i = sign_extend(read_uint(p, d->size), d->size);
		break;
	case PERFRELAY_FIELD_ENUM: {
		uint64_t v = read_uint(p, d->size);

		if (d->is_signed) {
			f->value.i = sign_extend(v, d->size);
			v = (uint64_t) f->value.i;
		} else
			f->value.u = v;
		for (unsigned k = 0; k < d->enum_count; k++)
			if (s->enums[d->enum_first + k].value == v) {
				f->enum_name = s->enums[d->enum_first + k].name;
				break;
			}
		break;
	}
	case PERFRELAY_FIELD_STRING:
	case PERFRELAY_FIELD_BYTES: {
		const uint8_t *nul = d->kind == PERFRELAY_FIELD_STRING ? memchr(p, 0, d->size) : NULL;

		f->bytes = p;
		if (nul)
			f->len = (size_t) (nul - p);
		else {
			f->kind = PERFRELAY_FIELD_BYTES;
			f->len = d->size;
		}
		break;
	}
	default:
		break;
	}
	return 1;
}
