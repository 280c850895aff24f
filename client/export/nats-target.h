/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JetStream target of perfrelay-export: records batched per type into messages
 * (docs/export.md, "Batches"), a bounded queue, asynchronous publishes with acknowledgements,
 * retries and counted drops. Owned by the main thread; nats.c's threads only run the
 * ack/connection callbacks, which touch the atomics and the retry list documented in
 * nats-target.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "export/export-config.h"
#include "export/export-stats.h"

typedef struct NatsTarget NatsTarget;

int nats_target_new(
	const ExportConfig *cfg, const char *hostname, const char *boot_id, unsigned schema, NatsTarget **ret);
NatsTarget *nats_target_free(NatsTarget *e);

/* Offers one record (rec_size bytes at rec: hdr->size, and a packet's bytes) for export, with
 * its unit (or NULL): added to its type's batch, or dropped and counted. now: CLOCK_MONOTONIC ms. */
void nats_target_offer(
	NatsTarget *e,
	const struct perfrelay_hdr *hdr,
	const void *rec,
	size_t rec_size,
	const char *unit,
	uint64_t now);

/* Does the work that is due: batches that waited long enough, stream set-up, retries, publishing
 * from the queue. Never blocks for long (a publish may stall while nats.c's own buffers are full). */
void nats_target_run(NatsTarget *e, uint64_t now_ms);

/* Seals every open batch now (the input ended: nothing more will fill them). */
void nats_target_flush(NatsTarget *e);

/* Seals the open batches if nothing else is queued or in flight: the queue is full of open
 * batches alone (QueueEvents= below what they hold) and only sealing them makes progress. */
void nats_target_seal_if_stuck(NatsTarget *e);

/* True when nothing is batched, queued or in flight. */
bool nats_target_idle(NatsTarget *e);

/* Gives up on everything still batched, queued or in flight (counted as dropped_shutdown). */
void nats_target_abandon(NatsTarget *e);

void nats_target_get_stats(NatsTarget *e, ExportStats *ret);

/* True when the queue can take another event without dropping it. */
bool nats_target_has_room(NatsTarget *e);
