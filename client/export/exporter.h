/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JetStream side of perfrelay-export: a bounded queue of events, asynchronous publishes with
 * acknowledgements, retries and counted drops. Owned by the main thread; nats.c's threads only
 * run the ack/connection callbacks, which touch the atomics and the retry list documented in
 * exporter.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "event.h"
#include "export-config.h"

typedef struct Exporter Exporter;

/* Counters as users see them (docs/export.md). At exit, exported + dropped = offered. */
typedef struct ExportStats {
	uint64_t offered;    /* events read from the socket (or --input) */
	uint64_t exported;   /* acknowledged by JetStream (duplicates included) */
	uint64_t duplicates; /* acknowledged as duplicates of a message id already stored */
	uint64_t dropped;    /* given up: the sum of the three below */
	uint64_t dropped_queue_full;
	uint64_t dropped_retries;  /* MaxRetries republishes without an ack */
	uint64_t dropped_shutdown; /* still unacknowledged when DrainTimeoutMSec ran out */
	uint64_t retried;          /* republishes */
	uint64_t daemon_lost;      /* events the daemon dropped for this client (its own counter too) */
	uint64_t queued;
	uint64_t in_flight;
	uint64_t reconnects;
	bool connected;
	bool stream_ready;
	char server[256];     /* URL of the server connected to, "" if none */
	char last_error[128]; /* JetStream's reason for the last refusal, "" if none */
} ExportStats;

int exporter_new(
	const ExportConfig *cfg, const char *hostname, const char *boot_id, unsigned schema, Exporter **ret);
Exporter *exporter_free(Exporter *e);

/* Offers one record (hdr->size bytes at rec) for export: queued, or dropped and counted. */
void exporter_offer(Exporter *e, const struct perfrelay_hdr *hdr, const void *rec);

/* Counts events the daemon dropped for this client. */
void exporter_daemon_lost(Exporter *e, uint64_t count);

/* Does the work that is due: stream set-up, retries, timeouts, publishing from the queue.
 * Never blocks for long (a publish may stall while nats.c's own buffers are full). */
void exporter_run(Exporter *e, uint64_t now_ms);

/* True when nothing is queued or in flight. */
bool exporter_idle(Exporter *e);

/* Gives up on everything still queued or in flight (counted as dropped_shutdown). */
void exporter_abandon(Exporter *e);

void exporter_get_stats(Exporter *e, ExportStats *ret);

/* Writes stats as one JSON object. */
int export_stats_write_json(const ExportStats *s, FILE *f);

/* True when the queue can take another event without dropping it. */
bool exporter_has_room(Exporter *e);
