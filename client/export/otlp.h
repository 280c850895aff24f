/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The OTLP target of perfrelay-export (docs/export.md, "OTLP"): events batched into OTLP/HTTP
 * logs requests (otlp-encode.c), posted with libcurl's multi interface from the main loop,
 * retried with back-off on 429, 502, 503, 504 and transport errors (honouring Retry-After), a
 * bounded queue, every event counted (export-stats.h). Main thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "export/export-config.h"
#include "export/export-stats.h"
#include "export/otlp-encode.h"

typedef struct OtlpTarget OtlpTarget;

/* res's strings must outlive the target. */
int otlp_target_new(const ExportConfig *cfg, const OtlpResource *res, OtlpTarget **ret);
OtlpTarget *otlp_target_free(OtlpTarget *t);

/* As nats_target_offer(): the record becomes a LogRecord of the open batch, or is dropped, counted. */
void otlp_target_offer(
	OtlpTarget *t,
	const struct perfrelay_hdr *hdr,
	const void *rec,
	size_t size,
	const char *unit,
	uint64_t now);
/* Makes the open batch a request now (the input ended). */
void otlp_target_flush(OtlpTarget *t);
void otlp_target_run(OtlpTarget *t, uint64_t now);
bool otlp_target_idle(OtlpTarget *t);
bool otlp_target_has_room(OtlpTarget *t);
void otlp_target_abandon(OtlpTarget *t);
void otlp_target_get_stats(OtlpTarget *t, ExportStats *ret);
