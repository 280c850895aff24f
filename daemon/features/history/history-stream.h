/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A subscriber's stream out of the history (docs/history.md, "Reading"): from a cursor, a time or
 * an end of the history, block by block, each event decoded, matched with the subscription's
 * filter and access exactly as a live one, and written as a JSON line with its cursor. Gaps
 * (writer behind, disk full, retention, a damaged block) become "lost" lines with their count.
 * Main thread. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "features/history/history-store.h"
#include "hub/subscription.h"

typedef struct HistoryStream HistoryStream;

/* err (err_size bytes) gets the client's message on -EINVAL (a cursor that is not one of this
 * history, or is ahead of it). */
int history_stream_open(
	HistoryStore *store, const Subscription *sub, HistoryStream **ret, char *err, size_t err_size);
/* Whole lines into buf: bytes, 0 at the end (without "follow"), -EAGAIN when the history has
 * nothing more yet, -EINPROGRESS after HISTORY_READ_BLOCKS blocks read without a line for this
 * subscriber. A read reads at most HISTORY_READ_BLOCKS blocks (those a unit filter passes over
 * count a 64th each): a filter that matches little must not hold the main thread. */
#define HISTORY_READ_BLOCKS 8u
/* What a stream holds in memory (its buffers and zstd's context). */
uint64_t history_stream_bytes(void);
ssize_t history_stream_read(HistoryStream *h, char *buf, size_t size);
uint64_t history_stream_events(const HistoryStream *h); /* event lines given */
HistoryStream *history_stream_free(HistoryStream *h);
