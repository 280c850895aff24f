/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The human-readable event line of perfrelayctl monitor: one event's JSON line (the socket's
 * schema, docs/events.md) into aligned columns, with every string escaped so that it cannot
 * drive the terminal. Pure: writes to the FILE it is given, so the unit test checks it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

/* The column header line. */
void format_header(FILE *f);
/* One event line (len bytes, without its newline) as one output line; boot_to_realtime_ns moves
 * the event's boot-time "ts" to the wall clock. Returns 0, or -EBADMSG when the line is not a
 * JSON object (nothing is written then). tok is reused between calls. */
int format_event(FILE *f, json_tokener *tok, const char *line, size_t len, int64_t boot_to_realtime_ns);
/* s with control bytes (C0, DEL, C1) escaped; with `quote`, in "" when it is empty or has
 * spaces, quotes or escapes. Returns the characters written (a UTF-8 sequence counts once). */
size_t format_escaped(FILE *f, const char *s, bool quote);

/* Members of a JSON object by type: NULL / false when absent or of another type. */
const char *jstr(json_object *o, const char *key);
bool jint(json_object *o, const char *key, int64_t *ret);
bool juint(json_object *o, const char *key, uint64_t *ret);
