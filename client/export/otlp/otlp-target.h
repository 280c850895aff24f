/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The OTLP target of perfrelay-export (docs/export.md, "OTLP"), export_target_otlp: events
 * encoded as they come into OTLP/HTTP logs requests (otlp-encode.c), posted with libcurl's
 * multi interface from the main loop, retried with back-off on 429, 502, 503, 504 and transport
 * errors (honouring Retry-After), a bounded queue, every event counted (export-stats.h). Main
 * thread only. */
#pragma once

typedef struct OtlpTarget OtlpTarget;
