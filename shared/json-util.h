/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Cleanup functions for json-c objects, declared once for every user of json-c. */
#pragma once

#include <json-c/json.h>

#include "macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(json_object *, json_object_put);
DEFINE_TRIVIAL_CLEANUP_FUNC(json_tokener *, json_tokener_free);

/* The flags a reader of perfrelay's own JSON lines (the tests, the fuzzers) parses them with:
 * JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8, except where json-c refuses valid UTF-8 in
 * strict mode (0.18, Debian 13: a byte >= 0x80 in a string is taken for a control character,
 * json-c#892): there the UTF-8 check alone. Tried once. The daemon's request parser keeps strict
 * mode everywhere (hub/request.c hands such bytes to json-c escaped). */
static inline int json_strict_flags(void) {
	static int flags = -1;

	if (flags < 0) {
		json_tokener *tok = json_tokener_new();
		json_object *o;

		if (!tok)
			return JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8;
		json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
		o = json_tokener_parse_ex(tok, "\"\xc3\xa9\"", 4);
		flags = o ? JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8 : JSON_TOKENER_VALIDATE_UTF8;
		json_object_put(o);
		json_tokener_free(tok);
	}
	return flags;
}
