/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The subscription request of the socket protocol (docs/protocol.md): one JSON line parsed with
 * json-c into a Subscription, or into a protocol error code and a message for the client. Pure:
 * no I/O, no logging. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hub/subscription.h"

/* Room for a message naming the field at fault and a cut-down copy of the bad value. */
#define REQUEST_MESSAGE_MAX 256u

/* The "error" values of error lines. The first ones come from request_parse(); the others are
 * decided by the server and listed here so that every code has one spelling. */
typedef enum ProtocolError {
	PROTOCOL_OK = 0,
	PROTOCOL_BAD_REQUEST,      /* malformed JSON, wrong field, value out of range */
	PROTOCOL_TOO_LARGE,        /* request line over MaxRequestBytes= */
	PROTOCOL_TOO_DEEP,         /* nesting over MaxJsonDepth= */
	PROTOCOL_TIMEOUT,          /* no complete request line within RequestTimeoutMs= */
	PROTOCOL_TOO_MANY_CLIENTS, /* MaxClients= or MaxClientsPerUid= reached */
	PROTOCOL_FD_PASSED,        /* the client sent file descriptors (they were closed) */
	PROTOCOL_OVERFLOW,         /* on_overflow=disconnect and the client's queue overflowed */
	PROTOCOL_ACCESS_REVOKED,   /* a reload took away the AllowGroups= access it had */
	_PROTOCOL_ERROR_MAX,
} ProtocolError;
const char *protocol_error_to_string(ProtocolError e); /* "bad-request", ... or NULL */

typedef struct RequestError {
	ProtocolError code;
	char message[REQUEST_MESSAGE_MAX]; /* one line, UTF-8 apart from cut multi-byte characters */
} RequestError;

typedef struct RequestLimits {
	size_t max_bytes;   /* MaxRequestBytes=: the whole line, its '\n' included */
	unsigned max_depth; /* MaxJsonDepth=: `{}` is depth 1, {"subscribe":{"pid":[1]}} depth 3 */
} RequestLimits;

/* Parses one request line: `text` is the line without its '\n' (len bytes, need not be
 * NUL-terminated). Returns 0 and a new Subscription in *ret (access NONE: the caller sets it),
 * -EINVAL with *ret_error filled for anything the client got wrong, or -ENOMEM. */
int request_parse(
	const char *text, size_t len, const RequestLimits *limits, Subscription **ret, RequestError *ret_error);
