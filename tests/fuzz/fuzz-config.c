/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the INI config parser: errors must name the file and line, never crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capture-config.h"
#include "config.h"
#include "counters-config.h"
#include "macro.h"
#include "probes-config.h"
#include "recorder-config.h"

/* The features' sections too, as the daemon parses them. */
static const ConfigPart *const parts[] = { &probes_config, &recorder_config, &counters_config, &capture_config };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	Config *c = NULL;
	char *error = NULL;
	int r;

	if (config_new(parts, ELEMENTSOF(parts), &c) < 0)
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
