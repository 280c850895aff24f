/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes perfrelay-metrics' HTTP request parser: any bytes, never a read beyond len or a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/http-request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	/* An exact-size copy so ASan sees any read past the end. */
	char *buf = malloc(size ? size : 1);
	HttpRequest r;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	(void) http_request_parse(buf, size, &r);
	free(buf);
	return 0;
}
