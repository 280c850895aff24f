/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JetStream target of perfrelay-export: records batched per type into messages
 * (docs/export.md, "Batches"), a bounded queue, asynchronous publishes with acknowledgements,
 * retries and counted drops. Owned by the main thread; nats.c's threads only run the
 * ack/connection callbacks, which touch the atomics and the retry list documented in
 * exporter.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "export/export-config.h"
#include "export/export-stats.h"

typedef struct Exporter Exporter;

int exporter_new(
	const ExportConfig *cfg, const char *hostname, const char *boot_id, unsigned schema, Exporter **ret);
Exporter *exporter_free(Exporter *e);

/* Offers one record (rec_size bytes at rec: hdr->size, and a packet's bytes) for export, with
 * its unit (or NULL): added to its type's batch, or dropped and counted. now: CLOCK_MONOTONIC ms. */
void exporter_offer(
	Exporter *e,
	const struct perfrelay_hdr *hdr,
	const void *rec,
	size_t rec_size,
	const char *unit,
	uint64_t now);

/* Does the work that is due: batches that waited long enough, stream set-up, retries, publishing
 * from the queue. Never blocks for long (a publish may stall while nats.c's own buffers are full). */
void exporter_run(Exporter *e, uint64_t now_ms);

/* Seals every open batch now (the input ended: nothing more will fill them). */
void exporter_flush(Exporter *e);

/* Seals the open batches if nothing else is queued or in flight: the queue is full of open
 * batches alone (QueueEvents= below what they hold) and only sealing them makes progress. */
void exporter_seal_if_stuck(Exporter *e);

/* True when nothing is batched, queued or in flight. */
bool exporter_idle(Exporter *e);

/* Gives up on everything still batched, queued or in flight (counted as dropped_shutdown). */
void exporter_abandon(Exporter *e);

void exporter_get_stats(Exporter *e, ExportStats *ret);

/* True when the queue can take another event without dropping it. */
bool exporter_has_room(Exporter *e);
