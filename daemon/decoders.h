/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The third-party decoders the reader threads use: the main thread publishes an immutable
 * ProducerScan (producers.h), readers take the current one for the length of a batch, and a
 * replaced scan is freed once no reader holds it (one hazard pointer per reader). Readers also
 * report record types they found no decoder for, which asks the main thread to scan again. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"
#include "producers.h"

typedef struct Decoders Decoders;

int decoders_new(unsigned n_readers, Decoders **ret);
/* Frees every scan; the readers must have stopped. Accepts NULL. */
Decoders *decoders_free(Decoders *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(Decoders *, decoders_free);

/* Main thread. Makes scan (taken over, even on failure) the one readers get from now on and
 * numbers it (ProducerScan.generation); the one it replaces is freed when no reader holds it
 * any more (now or in a later decoders_collect()). -ENOMEM: nothing changed. */
int decoders_publish(Decoders *d, ProducerScan *scan);
/* Main thread. The scan readers get now (NULL before the first); valid until the next publish. */
const ProducerScan *decoders_current(const Decoders *d);
/* Main thread. Frees replaced scans that no reader holds. Returns how many are still held. */
size_t decoders_collect(Decoders *d);
/* Main thread. Whether a reader reported an undecodable third-party type since the last call. */
bool decoders_take_unknown(Decoders *d);

/* Reader thread `reader`: the current scan (or NULL), held until decoders_leave(). */
const ProducerScan *decoders_enter(Decoders *d, unsigned reader);
void decoders_leave(Decoders *d, unsigned reader);
/* Reader thread `reader`: record `type` (third-party) has no decoder in the scan it holds. Asks
 * for a new scan once per type and scan. */
void decoders_report_unknown(Decoders *d, unsigned reader, uint16_t type);
