/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes libperfrelay's schema frame parser and field iterator (client/lib/schema.c): any bytes as
 * the frame's JSON, and the same bytes as a record to iterate; never a read beyond a record's
 * size, a crash or a leak, and every field the iterator returns lies within the record. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/schema.h"

#define CHECK(x)                 \
	do {                     \
		if (!(x))        \
			abort(); \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	/* Exact-size copies so ASan sees any read past the end. */
	char *json = malloc(size ? size : 1);
	Schema *s = NULL;

	if (!json)
		return 0;
	memcpy(json, data, size);
	if (schema_parse(json, size, &s) == 0) {
		size_t rsize = size < 32 ? 32 : size;
		uint8_t *rec = calloc(1, rsize);
		struct perfrelay_field f;
		unsigned iter = 0;
		int r;

		if (rec) {
			memcpy(rec, data, size);
			while ((r = schema_field(s, rec, rsize, &iter, &f)) > 0) {
				CHECK((size_t) f.offset + f.size <= rsize);
				if (f.bytes)
					CHECK((const uint8_t *) f.bytes + f.len <= rec + rsize);
			}
			CHECK(r == 0 || r == -EBADMSG);
			free(rec);
		}
		schema_free(s);
	}
	free(json);
	return 0;
}
