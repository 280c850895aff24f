/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A bounded parser for the one HTTP/1.x request perfrelay-metrics answers: pure (bytes in,
 * verdict out) so it can be unit-tested and fuzzed without sockets. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Requests larger than this are refused (431): a scraper's GET is a few hundred bytes. */
#define HTTP_REQUEST_MAX 8192

typedef enum HttpVerdict {
	HTTP_INCOMPLETE,  /* no empty line yet: read more (up to HTTP_REQUEST_MAX) */
	HTTP_METRICS,     /* GET or HEAD /metrics (query string ignored) */
	HTTP_NOT_FOUND,   /* another path */
	HTTP_BAD_METHOD,  /* not GET/HEAD */
	HTTP_BAD_REQUEST, /* not an HTTP/1.x request line, or control bytes */
	HTTP_TOO_LARGE,   /* no end of headers within HTTP_REQUEST_MAX */
} HttpVerdict;

typedef struct HttpRequest {
	bool head;        /* HEAD: headers only */
	bool openmetrics; /* the Accept header asks for application/openmetrics-text */
} HttpRequest;

/* Judges the first len bytes received on a connection. */
HttpVerdict http_request_parse(const char *buf, size_t len, HttpRequest *ret);
