/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* OTLP/HTTP logs requests from perfrelay events (docs/export.md, "OTLP"): one LogRecord per
 * event, its body the event's fields as the JSON line has them, attributes for type, pid and
 * unit, resource attributes for the host. http/protobuf through protobuf-c's code generated
 * from the OpenTelemetry project's own .proto files; http/json through json-c, as the OTLP
 * specification maps the same messages to JSON. Pure: no I/O, unit-tested. */
#pragma once

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "export/export-config.h"

typedef struct OtlpResource {
	const char *host;    /* host.name */
	const char *boot_id; /* perfrelay.boot_id */
	const char *version; /* service.version */
} OtlpResource;

typedef struct OtlpEvent {
	json_object *fields;     /* the event's JSON object (borrowed): the body */
	uint64_t time_unix_nano; /* when it happened, wall clock */
	const char *unit;        /* systemd unit, or NULL */
} OtlpEvent;

/* Encodes a request of n events (observed now, wall clock ns) in *ret (malloc'd, *ret_len
 * bytes). Returns 0, -ENOMEM, or -EINVAL (n == 0). */
int otlp_encode_request(
	OtlpProtocol protocol,
	const OtlpResource *res,
	const OtlpEvent *events,
	size_t n,
	uint64_t observed_ns,
	uint8_t **ret,
	size_t *ret_len);

/* Reads a 2xx response's body: how many log records the collector rejected (partial success)
 * and its message. An empty body is full success. Returns 0, or -EBADMSG for a body that is
 * not a response. */
int otlp_parse_response(
	OtlpProtocol protocol, const uint8_t *body, size_t len, uint64_t *ret_rejected, char *msg, size_t msg_size);
