/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An event's fields as a flat list, for the exporter's targets that want them one by one (OTLP's
 * body, the journal's fields): the same keys, values and nesting as the socket's JSON line
 * (docs/events.md), read straight from the decoded record. Built-in types are walked here;
 * a third-party type through the schema its producer's BTF gave (libperfrelay's
 * perfrelay_record_field()). Every string is valid UTF-8 (an invalid byte becomes U+FFFD, as in
 * the JSON line); bytes stay bytes (the JSON line's base64). Pure, and allocation-free once the
 * list has grown to the largest event seen: tests/unit/test-otlp-encode.c checks it against
 * encode_json() for every type. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "decode/decode.h"
#include "lib/perfrelay.h"

typedef enum ExportFieldKind {
	EXPORT_FIELD_UINT,
	EXPORT_FIELD_INT,
	EXPORT_FIELD_BOOL,
	EXPORT_FIELD_STRING, /* s, len: valid UTF-8, no NUL */
	EXPORT_FIELD_BYTES,  /* s, len */
	EXPORT_FIELD_OBJECT, /* members follow, up to its END */
	EXPORT_FIELD_ARRAY,  /* elements (key NULL) follow, up to its END */
	EXPORT_FIELD_END,
} ExportFieldKind;

typedef struct ExportField {
	const char *key; /* NULL for array elements and END */
	uint32_t klen;   /* strlen(key), 0 without one */
	ExportFieldKind kind;
	uint32_t len; /* STRING, BYTES */
	union {
		uint64_t u;
		int64_t i;
		bool b;
		const char *s; /* STRING, BYTES: into the record, the list's scratch, or a constant */
	};
} ExportField;

/* An event's fields, and what the targets want of it beside them. */
typedef struct ExportFields {
	ExportField *f;
	size_t n, allocated;
	char *scratch; /* formatted values (exec ids, devices, addresses) and mended strings */
	size_t scratch_used, scratch_size;

	const char *type; /* the body's "type" (a third-party type's declared name) */
	bool has_pid;
	uint32_t pid;
	const char *unit; /* NULL if none */
} ExportFields;

/* Decodes a record the socket carried (rec, size bytes), the daemon's own counters records
 * included. Returns 0 or -EBADMSG. */
int export_decode(const void *rec, size_t size, DecodedEvent *ret);

/* Walks the record (rec, size bytes: header, payload, a packet's bytes) into *out, replacing
 * what it held. client: the socket's, for third-party types' schemas (NULL: such records are
 * "unknown" with their payload, as a JSON client without a decoder sees them). unit: the
 * record's systemd unit or NULL. Returns 0, -EBADMSG for a record decode_event() refuses, or
 * -ENOMEM. Pointers in *out point into rec, client and *out: valid until the next walk, or the
 * next record read from client. */
int export_fields_walk(
	ExportFields *out, const void *rec, size_t size, const char *unit, const perfrelay_client *client);

void export_fields_done(ExportFields *f);

/* How deep fields nest, at most (a third-party type's structs and arrays; built-in types: 2). */
#define EXPORT_FIELDS_DEPTH_MAX 32u

/* The fields as the socket's JSON line ("{...}\n", strings escaped as encode_json() does,
 * bytes in base64) into buf. Returns its length, -ENOBUFS when it does not fit, -EBADMSG for
 * fields that do not nest. */
ssize_t export_fields_json(const ExportFields *f, char *buf, size_t size);
