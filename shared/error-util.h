/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Errors that carry a message for the caller to show (a D-Bus error, a configuration error):
 * one way to make the text, for the daemon and its library code alike. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "macro.h"

/* Sets *ret_error (when ret_error is not NULL) to the formatted message, malloc'd, and returns
 * r; -ENOMEM when the message could not be made. */
_printf_(3, 4) static inline int error_textf(char **ret_error, int r, const char *fmt, ...) {
	char *msg;
	va_list ap;

	if (!ret_error)
		return r;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		r = -ENOMEM;
	else
		*ret_error = msg;
	va_end(ap);
	return r;
}
