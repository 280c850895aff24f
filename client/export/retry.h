/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The retry policy of the targets that send and wait for an answer (NATS, OTLP), written once
 * (docs/export.md, "Delivery and counters"): after a refusal, a timeout or a lost connection
 * nothing is sent for a back-off that starts at 100 ms and doubles up to AckTimeoutMSec=, never
 * shorter than the server asked for (OTLP's Retry-After); the next success resets it. A batch is
 * sent again up to MaxRetries= times, then its events are dropped (dropped_retries). A cluster
 * electing a stream leader refuses at once: retrying at once would only burn every batch's
 * attempts. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "export/export-config.h"
#include "macro.h"

#define EXPORT_BACKOFF_FIRST_MS 100u

typedef struct ExportBackoff {
	uint64_t backoff_ms;     /* 0 after a success */
	uint64_t pause_until_ms; /* nothing is sent before this (CLOCK_MONOTONIC ms) */
} ExportBackoff;

/* A refusal at now: the back-off doubles (AckTimeoutMSec= at most), and lasts at least
 * at_least_ms (a server's Retry-After). */
static inline void
	export_backoff_fail(ExportBackoff *b, const ExportConfig *cfg, uint64_t now, uint64_t at_least_ms) {
	b->backoff_ms = b->backoff_ms ? MIN(b->backoff_ms * 2, cfg->ack_timeout_ms) : EXPORT_BACKOFF_FIRST_MS;
	/* A server's Retry-After is the floor: it said when it wants us back. */
	b->pause_until_ms = MAX(b->pause_until_ms, now + MAX(b->backoff_ms, at_least_ms));
}

static inline void export_backoff_ok(ExportBackoff *b) {
	b->backoff_ms = 0;
}

static inline bool export_backoff_paused(const ExportBackoff *b, uint64_t now) {
	return now < b->pause_until_ms;
}

/* Whether a batch sent `attempts` times (1: once) may be sent again. */
static inline bool export_retry_allowed(const ExportConfig *cfg, uint64_t attempts) {
	return attempts <= cfg->max_retries;
}
