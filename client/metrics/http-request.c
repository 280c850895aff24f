/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The request parser of perfrelay-metrics: request line, then headers up to the empty line. */
#include "metrics/http-request.h"

#include <string.h>
#include <strings.h>

static const char *find_crlfcrlf(const char *buf, size_t len) {
	for (size_t i = 0; i + 3 < len; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
			return buf + i;
	return NULL;
}

static bool starts(const char *p, const char *end, const char *s) {
	size_t n = strlen(s);

	return (size_t) (end - p) >= n && memcmp(p, s, n) == 0;
}

HttpVerdict http_request_parse(const char *buf, size_t len, HttpRequest *ret) {
	const char *end, *line_end, *p, *path, *path_end;
	HttpRequest r = {};

	if (len > HTTP_REQUEST_MAX)
		len = HTTP_REQUEST_MAX;
	end = find_crlfcrlf(buf, len);
	if (!end)
		return len >= HTTP_REQUEST_MAX ? HTTP_TOO_LARGE : HTTP_INCOMPLETE;
	for (p = buf; p < end; p++)
		if ((unsigned char) *p < 0x20 && *p != '\r' && *p != '\n' && *p != '\t')
			return HTTP_BAD_REQUEST;
	line_end = memchr(buf, '\r', (size_t) (end - buf) + 1);

	p = buf;
	if (starts(p, line_end, "GET "))
		p += 4;
	else if (starts(p, line_end, "HEAD ")) {
		p += 5;
		r.head = true;
	} else {
		const char *sp = memchr(buf, ' ', (size_t) (line_end - buf));

		return sp && sp > buf ? HTTP_BAD_METHOD : HTTP_BAD_REQUEST;
	}
	path = p;
	path_end = memchr(path, ' ', (size_t) (line_end - path));
	if (!path_end || path_end == path || !starts(path_end + 1, line_end, "HTTP/1.") ||
	    line_end - (path_end + 1) != 8)
		return HTTP_BAD_REQUEST;

	/* Headers: only Accept matters (content negotiation). */
	for (p = line_end + 2; p < end;) {
		const char *e = memchr(p, '\r', (size_t) (end - p) + 1);

		if ((size_t) (e - p) > 7 && strncasecmp(p, "accept:", 7) == 0 &&
		    memmem(p, (size_t) (e - p), "application/openmetrics-text", 28))
			r.openmetrics = true;
		p = e + 2;
	}

	*ret = r;
	{
		size_t n = (size_t) (path_end - path);
		const char *q = memchr(path, '?', n);

		if (q)
			n = (size_t) (q - path);
		if (n == 8 && memcmp(path, "/metrics", 8) == 0)
			return HTTP_METRICS;
	}
	return HTTP_NOT_FOUND;
}
