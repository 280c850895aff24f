/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JetStream target of perfrelay-export, export_target_nats: records batched per type into
 * messages (docs/export.md, "Batches"), a bounded queue, asynchronous publishes with
 * acknowledgements, retries and counted drops. Owned by the main thread; nats.c's threads only
 * run the ack/connection callbacks, which touch the atomics and the retry list documented in
 * nats-target.c. */
#pragma once

typedef struct NatsTarget NatsTarget;
