/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stderr logging with sd-daemon priority prefixes. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

int log_max_level = LOG_INFO;
int log_prefix_priority = 0;

void log_setup(void) {
	log_prefix_priority = getenv("JOURNAL_STREAM") != NULL;
}

void log_internal(int level, const char *fmt, ...) {
	int saved = errno;
	char buf[2048];
	va_list ap;

	if (level > log_max_level)
		return;
	va_start(ap, fmt);
	errno = saved; /* so %m works */
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (log_prefix_priority)
		fprintf(stderr, "<%d>%s\n", level, buf);
	else
		fprintf(stderr, "perfrelayd: %s\n", buf);
	errno = saved;
}
