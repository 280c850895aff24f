/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Logging for the daemon's glue code (main, manager, pins, probes, bus): stderr with sd-daemon
 * priority prefixes, which journald turns into priorities. Library code never logs. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>

#include "macro.h"

extern int log_max_level;       /* LOG_INFO by default; --verbose raises it to LOG_DEBUG */
extern int log_prefix_priority; /* 1 under journald (JOURNAL_STREAM set), else 0 */

void log_setup(void);
_printf_(2, 3) void log_internal(int level, const char *fmt, ...);

/* Returns r (negative errno) so callers can `return log_error_errno(r, "...: %m")`: %m prints
 * strerror(-r), because errno is set from r first. */
#define log_full_errno(level, r, ...)                       \
	({                                                  \
		int _r = (r);                               \
		if ((level) <= log_max_level) {             \
			errno = _r < 0 ? -_r : _r;          \
			log_internal((level), __VA_ARGS__); \
		}                                           \
		_r < 0 ? _r : -_r;                          \
	})
#define log_error_errno(r, ...)   log_full_errno(LOG_ERR, r, __VA_ARGS__)
#define log_warning_errno(r, ...) log_full_errno(LOG_WARNING, r, __VA_ARGS__)
#define log_notice_errno(r, ...)  log_full_errno(LOG_NOTICE, r, __VA_ARGS__)
#define log_info_errno(r, ...)    log_full_errno(LOG_INFO, r, __VA_ARGS__)
#define log_debug_errno(r, ...)   log_full_errno(LOG_DEBUG, r, __VA_ARGS__)
/* Out of memory: said once in one wording, and -ENOMEM to return. */
#define log_oom()                 log_error_errno(-ENOMEM, "Out of memory.")
#define log_error(...)            log_internal(LOG_ERR, __VA_ARGS__)
#define log_warning(...)          log_internal(LOG_WARNING, __VA_ARGS__)
#define log_notice(...)           log_internal(LOG_NOTICE, __VA_ARGS__)
#define log_info(...)             log_internal(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                        \
	do {                                                  \
		if (log_max_level >= LOG_DEBUG)               \
			log_internal(LOG_DEBUG, __VA_ARGS__); \
	} while (0)
