/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-metrics' request parser: what a scraper sends is served, everything else refused. */
#include <string.h>

#include "metrics/http-request.h"
#include "unit-test.h"

static HttpVerdict parse(const char *s, HttpRequest *r) {
	return http_request_parse(s, strlen(s), r);
}

int main(void) {
	HttpRequest r;
	char big[HTTP_REQUEST_MAX + 16];

	ASSERT(parse("GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n", &r) == HTTP_METRICS && !r.head &&
	       !r.openmetrics);
	ASSERT(parse("GET /metrics?x=1 HTTP/1.0\r\n\r\n", &r) == HTTP_METRICS);
	ASSERT(parse("HEAD /metrics HTTP/1.1\r\n\r\n", &r) == HTTP_METRICS && r.head);
	ASSERT(parse("GET /metrics HTTP/1.1\r\naccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
		     &r) == HTTP_METRICS &&
	       r.openmetrics);
	ASSERT(parse("GET /metrics HTTP/1.1\r\nHost: h\r\n", &r) == HTTP_INCOMPLETE);
	ASSERT(parse("", &r) == HTTP_INCOMPLETE);
	ASSERT(parse("GET / HTTP/1.1\r\n\r\n", &r) == HTTP_NOT_FOUND);
	ASSERT(parse("GET /metricsX HTTP/1.1\r\n\r\n", &r) == HTTP_NOT_FOUND);
	ASSERT(parse("POST /metrics HTTP/1.1\r\n\r\n", &r) == HTTP_BAD_METHOD);
	ASSERT(parse("GET /metrics\r\n\r\n", &r) == HTTP_BAD_REQUEST);
	ASSERT(parse("GET /metrics HTTP/2.0\r\n\r\n", &r) == HTTP_BAD_REQUEST);
	ASSERT(parse("GET  HTTP/1.1\r\n\r\n", &r) == HTTP_BAD_REQUEST);
	ASSERT(parse("GET /metrics HTTP/1.1\r\nX: \001\r\n\r\n", &r) == HTTP_BAD_REQUEST);
	ASSERT(parse("\r\n\r\n", &r) == HTTP_BAD_REQUEST);
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	ASSERT(http_request_parse(big, sizeof(big), &r) == HTTP_TOO_LARGE);
	ASSERT(http_request_parse(big, HTTP_REQUEST_MAX - 1, &r) == HTTP_INCOMPLETE);
	return failures ? 1 : 0;
}
