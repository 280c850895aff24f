/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the INI config parser: errors must name the file and line, never crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "features/feature-config-parts.h"
#include "macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	Config *c = NULL;
	char *error = NULL;
	int r;

	/* The features' sections too, as the daemon parses them: every feature's, found by the build. */
	if (config_new(feature_config_parts, feature_config_parts_size, &c) < 0)
		return 0;
	r = config_parse_text(c, (const char *) data, size, "fuzz.conf", &error);
	if (r < 0 && error && strncmp(error, "fuzz.conf:", 10) != 0)
		abort(); /* a text error always names file:line */
	if (r >= 0)
		(void) config_validate(c, &error);
	free(error);
	config_free(c);
	return 0;
}
