/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* OTLP/HTTP logs requests from perfrelay events (docs/export.md, "OTLP"): one LogRecord per
 * event, its body the event's fields as the JSON line has them (export/fields.h), attributes
 * for type, pid and unit, resource attributes for the host. http/protobuf: each LogRecord is
 * written in the protobuf wire format as it is offered, into the batch's one buffer, sized
 * exactly beforehand (no message structs, no second pass over the events); the request's
 * envelope (resource and scope, packed once by protobuf-c's code generated from the
 * OpenTelemetry project's own .proto files) is put in front when the batch is sealed, and
 * Compression=gzip deflates it then. http/json: the OTLP JSON mapping through json-c, from the
 * same fields. Pure: no I/O, unit-tested against protobuf-c's decoder. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "export/export-config.h"
#include "export/fields.h"

typedef struct OtlpResource {
	const char *host;    /* host.name */
	const char *boot_id; /* perfrelay.boot_id */
	const char *version; /* service.version */
} OtlpResource;

/* The LogRecords of one request, as they are offered. */
typedef struct OtlpBatch OtlpBatch;

/* res's strings must outlive the batch. */
int otlp_batch_new(OtlpProtocol protocol, OtlpCompression compression, const OtlpResource *res, OtlpBatch **ret);
OtlpBatch *otlp_batch_free(OtlpBatch *b);

/* Adds one event's LogRecord: its fields, when it happened and when it was observed (wall
 * clock ns). Returns 0, -ENOMEM, or -EBADMSG (fields nested deeper than OTLP_DEPTH_MAX). */
#define OTLP_DEPTH_MAX EXPORT_FIELDS_DEPTH_MAX
int otlp_batch_add(OtlpBatch *b, const ExportFields *f, uint64_t time_ns, uint64_t observed_ns);
size_t otlp_batch_count(const OtlpBatch *b);

/* The request of the batch's records: *ret (malloc'd, *ret_len bytes, in an allocation of
 * *ret_size bytes that otlp_batch_recycle() may take back; 0: free() it); the batch is empty
 * again. Returns 0, -ENOMEM, or -EINVAL when it is empty. */
int otlp_batch_seal(OtlpBatch *b, uint8_t **ret, size_t *ret_len, size_t *ret_size);
/* Takes back the buffer of a request that is done (its size as seal said), for a next batch;
 * frees it when enough are kept. */
#define OTLP_SPARE_MAX 8u
void otlp_batch_recycle(OtlpBatch *b, uint8_t *buf, size_t size);
/* Forgets the batch's records. */
void otlp_batch_clear(OtlpBatch *b);

/* Reads a 2xx response's body: how many log records the collector rejected (partial success)
 * and its message. An empty body is full success. Returns 0, or -EBADMSG for a body that is
 * not a response. */
int otlp_parse_response(
	OtlpProtocol protocol, const uint8_t *body, size_t len, uint64_t *ret_rejected, char *msg, size_t msg_size);
