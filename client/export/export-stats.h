/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's counters (docs/export.md, "Delivery and counters"): one ExportStats per
 * target, all in events unless named messages, and the stats file that shows them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One target's figures. After the exporter has exited, exported + dropped = offered exactly. */
typedef struct ExportStats {
	uint64_t offered;    /* events given to this target */
	uint64_t exported;   /* acknowledged (JetStream: duplicates included; OTLP: accepted) */
	uint64_t duplicates; /* JetStream: acknowledged as duplicates of a message id already stored */
	uint64_t dropped;    /* given up: the sum of the five below */
	uint64_t dropped_queue_full;
	uint64_t dropped_retries;  /* MaxRetries republishes without an ack */
	uint64_t dropped_refused;  /* OTLP: refused for good (a 4xx other than 429, rejected_log_records) */
	uint64_t dropped_shutdown; /* still unacknowledged when DrainTimeoutMSec ran out */
	uint64_t dropped_rate;     /* journal: above RateLimitPerSec= */
	uint64_t retried;          /* events republished */
	uint64_t retried_late;     /* JetStream: of those, republished after the stream's duplicate
				    * window (stored twice if an earlier try was stored) */
	uint64_t queued;           /* events batched or waiting now */
	uint64_t in_flight;        /* events published and not yet acknowledged */
	uint64_t messages;         /* messages (JetStream) or requests (OTLP) sent, first tries */
	uint64_t in_flight_messages;
	uint64_t reconnects;       /* file: reopened on SIGHUP */
	uint64_t rotations;        /* file: rotated for MaxBytes= */
	uint64_t connect_failures; /* NATS: rounds in which no server could be connected to */
	bool connected;
	bool stream_ready;    /* JetStream: the stream exists; OTLP: always true */
	char server[256];     /* URL of the server connected to, "" if none */
	char last_error[128]; /* the last refusal's reason, "" if none */
} ExportStats;

struct ExportResume;

/* Writes the stats file's JSON object: offered and daemon_lost (the socket's), with Resume=yes
 * the cursor's figures under "resume" (resume NULL: none), the first target's figures at the top
 * level (as before targets existed), and each of the n targets' under its name. */
int export_stats_write_json(
	uint64_t offered,
	uint64_t daemon_lost,
	const struct ExportResume *resume,
	const char *const *names,
	const ExportStats *stats,
	size_t n,
	FILE *f);
