/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What an export target is to perfrelay-export's main loop (docs/export.md, "Targets"): a
 * name (as Targets= says it, and the key of its figures) and a handful of operations. The loop
 * reads events, offers each to every target, runs them, saves their figures and drains them at
 * exit; a target keeps its own batches, queue and connection, and counts every event it was
 * offered (export-stats.h). A target is a folder (nats/, otlp/, file/, journal/) and one line
 * in EXPORT_TARGETS (export-config.h). Main thread only. */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "export/export-config.h"
#include "export/export-stats.h"
#include "lib/perfrelay.h"

/* One event, as the loop offers it. */
typedef struct ExportEvent {
	const struct perfrelay_hdr *hdr; /* aligned */
	const void *rec;                 /* the whole record: hdr->size bytes and a packet's bytes */
	size_t size;
	const char *unit;               /* its systemd unit, or NULL */
	const perfrelay_client *client; /* the socket's, for third-party schemas; NULL with --input */
	uint64_t seq;                   /* the loop's number for it: 1, 2, ... in the order offered */
} ExportEvent;

/* What every target may know. */
typedef struct ExportContext {
	const ExportConfig *cfg;
	const char *host;
	const char *boot_id;
	const char *version;
} ExportContext;

typedef struct ExportTargetType {
	const char *name;
	/* ctx outlives the target. Errors are printed by open, which returns a negative errno. */
	int (*open)(const ExportContext *ctx, void **ret);
	/* The event goes into the target's batch or queue, or is dropped and counted. now:
	 * CLOCK_MONOTONIC ms. */
	void (*offer)(void *t, const ExportEvent *ev, uint64_t now);
	/* The work that is due: sealing batches, sending, reading answers, retries. Never blocks
	 * for long. */
	void (*poll)(void *t, uint64_t now);
	/* Seals what is batched now: the input ended. */
	void (*flush)(void *t);
	/* Makes progress when waiting for room (--input) cannot: optional. */
	void (*unstick)(void *t);
	bool (*idle)(void *t);     /* nothing batched, queued or in flight */
	bool (*has_room)(void *t); /* another event would not be dropped for room */
	/* Gives up on everything still held, counted as dropped_shutdown. */
	void (*abandon)(void *t);
	void (*figures)(void *t, ExportStats *ret);
	/* The seq of the oldest event it still holds (batched, queued, in flight, waiting for a
	 * retry), UINT64_MAX when none: every event before it was exported or dropped for good,
	 * so the exporter's cursor may move past it (export-resume.h). newest: the seq of the last
	 * event offered. An event abandon() gave up on stays held. Optional: a target without it
	 * holds nothing once offer() returned. */
	uint64_t (*oldest_held)(void *t, uint64_t newest);
	/* The descriptors the target waits on (a connection to write a request to or read an
	 * answer from) into fds, at most max of them; returns how many, and lowers *timeout_ms to
	 * when its poll is due next. Optional: a target without it is polled each round. */
	size_t (*wait_fds)(void *t, struct pollfd *fds, size_t max, int *timeout_ms);
	/* SIGHUP: reopen what an administrator may have moved (a file): optional. */
	void (*reopen)(void *t);
	void (*close)(void *t);
} ExportTargetType;

/* Each target's type, export_target_<name>: EXPORT_TARGETS (export-config.h) lists them. */
#define EXPORT_TARGET_DECLARE(name) extern const ExportTargetType export_target_##name;
EXPORT_TARGETS(EXPORT_TARGET_DECLARE)
#undef EXPORT_TARGET_DECLARE
