/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libperfrelay's view of the daemon's schema frames: a third-party record type's fields,
 * parsed from the frame's JSON (bounded and validated: the daemon is trusted, the bytes are
 * checked anyway), and the field iterator over a record. Internal to the library. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "lib/perfrelay.h"

#define SCHEMA_MAX_FIELDS 512u  /* the daemon's BTFREC_MAX_FIELDS */
#define SCHEMA_MAX_ENUMS  1024u /* enumerators over one schema (BTFREC_MAX_ENUMS) */
#define SCHEMA_MAX_KEPT   256u  /* schemas one client keeps (the daemon's PRODUCERS_MAX_TYPES) */

typedef struct Schema Schema;

/* Parses a schema frame's payload: 0 and *ret, -EBADMSG for anything malformed, -ENOMEM. */
int schema_parse(const char *json, size_t len, Schema **ret);
Schema *schema_free(Schema *s);

uint16_t schema_type(const Schema *s);
const char *schema_name(const Schema *s);
const char *schema_producer_name(const Schema *s); /* NULL if the frame had none */

/* perfrelay_record_field() for a record of s's type (size bytes). */
int schema_field(const Schema *s, const void *record, size_t size, unsigned *iter, struct perfrelay_field *f);
