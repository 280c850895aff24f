/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Linked at configure time (meson.build) to learn whether clang's libFuzzer and sanitizer
 * runtimes are there: a fuzz target with nothing in it. */
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	(void) data;
	(void) size;
	return 0;
}
