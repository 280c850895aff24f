/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The hand-off from reader threads to subscribers: each client has one bounded single-producer
 * single-consumer byte queue per reader thread. A reader encodes an event once per format and
 * copies it into the queues of the clients that want it; the main thread writes the queues to
 * the clients' fds with writev. No lock or allocation per event; a full queue drops (counted)
 * and never blocks a reader.
 *
 * Threads: hub_reader_*() and hub_publish() run on reader thread `reader` only; everything
 * else runs on the main thread. The client list of each reader is guarded by a per-reader
 * mutex that the reader holds for a whole batch, so adding or removing a client waits for at
 * most one batch and a reader never sees a client being freed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "decode.h"

typedef struct Hub Hub;
typedef struct HubClient HubClient;

typedef enum HubFormat {
	HUB_FORMAT_JSON,
	HUB_FORMAT_BINARY,
	_HUB_FORMAT_MAX,
} HubFormat;

typedef enum HubOverflow {
	HUB_OVERFLOW_DROP,        /* lose the client's own events, then tell it how many */
	HUB_OVERFLOW_DISCONNECT,  /* close the client on its first loss */
} HubOverflow;

/* Decides on a reader thread whether a client wants an event. Must not block or allocate. */
typedef bool (*HubMatchFn)(const void *filter, const DecodedEvent *ev);

typedef struct HubClientOptions {
	HubFormat format;
	HubOverflow overflow;
	uint64_t queue_bytes;     /* per client, split between the reader queues */
	HubMatchFn match;         /* NULL: every event */
	const void *filter;       /* owned by the caller; must outlive the client */
} HubClientOptions;

typedef struct HubClientStats {
	uint64_t offered;         /* events that matched the client */
	uint64_t queued;          /* events put in its queues */
	uint64_t dropped;         /* events lost because a queue was full */
	uint64_t bytes_sent;
	uint64_t queued_bytes;    /* bytes waiting in the queues now */
} HubClientStats;

int hub_new(unsigned n_readers, Hub **ret);
Hub *hub_free(Hub *h);  /* clients must have been removed */

/* An eventfd the readers signal (at most once per batch, and only when the main thread said it
 * was going to sleep) when they queued output. The main thread then calls hub_flush(). */
int hub_notify_fd(const Hub *h);

int hub_client_new(Hub *h, int fd, const HubClientOptions *o, HubClient **ret);
/* Publishes the client to every reader. */
int hub_client_attach(Hub *h, HubClient *c);
/* Removes the client from every reader; after it returns no reader touches it. */
void hub_client_detach(Hub *h, HubClient *c);
HubClient *hub_client_free(HubClient *c); /* detached clients only; does not close fd */

int hub_client_fd(const HubClient *c);
void hub_client_get_stats(const HubClient *c, HubClientStats *ret);
/* True after hub_client_flush() found the fd full; the next flush clears it. */
bool hub_client_blocked(const HubClient *c);
/* True if the client asked for HUB_OVERFLOW_DISCONNECT and lost an event. */
bool hub_client_overflowed(const HubClient *c);

/* Writes what the client's queues hold. Returns 1 if everything was written, 0 if the fd
 * would block (the caller waits for EPOLLOUT and calls again), negative errno on write errors
 * (EPIPE etc.: the caller drops the client). */
int hub_client_flush(HubClient *c);

/* Reader side. */
void hub_reader_begin(Hub *h, unsigned reader);
void hub_publish(Hub *h, unsigned reader, const DecodedEvent *ev);
void hub_reader_end(Hub *h, unsigned reader);

/* Main thread, before waiting for the notify fd: returns true if a queue still holds data
 * (then flush again instead of sleeping). Arms the readers' notification. */
bool hub_prepare_sleep(Hub *h);
/* Clients with queued data, for the flush loop: calls fn for each attached client. */
void hub_foreach_client(Hub *h, void (*fn)(HubClient *c, void *userdata), void *userdata);
