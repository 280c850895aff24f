/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The third-party decoders the reader threads use: the main thread publishes an immutable
 * ProducerScan (producer-scan.h), readers take the current one for the length of a batch, and a
 * replaced scan is freed once no reader holds it (one hazard pointer per reader).
 *
 * A record of a third-party type the held scan has no decoder for may come from a program that
 * loaded after the scan was made. decoders_missing() tells the reader whether to publish it as
 * "unknown" or to hold it (leave it in its ring) until a scan that started after the record was
 * emitted has completed: the load watch thread (loadwatch.h) learns of program loads from the
 * kernel (a ring per CPU of PERF_RECORD_BPF_EVENT records) and asks the main thread for a scan,
 * and readers ask for one when they hold a record. docs/producers.md, "Producers that load late". */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"
#include "decode/producer-scan.h"
#include "kernel/ring.h"

typedef enum DecoderVerdict {
	DECODER_UNKNOWN, /* no decoder exists that a scan could find: publish it as "unknown" */
	DECODER_HOLD,    /* one may: leave the record in its ring and look again shortly */
} DecoderVerdict;

typedef struct Decoders Decoders;

int decoders_new(unsigned n_readers, unsigned n_cpus, Decoders **ret);
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
/* Main thread. Whether a scan was asked for since the last call (and clears the eventfd the
 * request signals, decoders_want_fd()). */
bool decoders_take_want(Decoders *d);
/* Main thread: readable when a scan is asked for. Owned by d. */
int decoders_want_fd(const Decoders *d);
/* Main thread: a scan that started at CLOCK_BOOTTIME `started_ns` (the clock of the records'
 * ts_ns) has completed, and decoders_current() is its result. */
void decoders_scan_done(Decoders *d, uint64_t started_ns);
/* Main thread: `ring`, CPU `cpu`'s watch of program loads (not owned; it must outlive the
 * readers), whose reader (loadwatch.h) consumes a record only after calling
 * decoders_note_load() for a load that matters. Readers then hold records while a load record
 * waits to be consumed. */
void decoders_set_watch(Decoders *d, unsigned cpu, const Ring *ring);
/* Any thread: a program that writes into the events map has loaded (before the watch ring's
 * tail moves past its load record). */
void decoders_note_load(Decoders *d);
/* Any thread: asks the main thread for a scan (decoders_want_fd()). */
void decoders_want_scan(Decoders *d);

/* Reader thread `reader`: the current scan (or NULL), held until decoders_leave(). */
const ProducerScan *decoders_enter(Decoders *d, unsigned reader);
void decoders_leave(Decoders *d, unsigned reader);
/* Reader thread `reader`, between decoders_enter() and _leave(): a record of third-party `type`,
 * emitted at `ts_ns`, has no decoder in the scan it holds. Asks for a scan when the verdict is
 * DECODER_HOLD and one is needed. */
DecoderVerdict decoders_missing(Decoders *d, unsigned reader, uint16_t type, uint64_t ts_ns);
/* Reader thread: `type` is published as "unknown" without further holds until a scan or a
 * program load changes what could decode it (a hold that ran out of time). */
void decoders_settle(Decoders *d, unsigned reader, uint16_t type);
