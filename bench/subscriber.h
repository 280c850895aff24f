/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A perfrelayd subscriber for the benchmark: libperfrelay on the event socket, subscribed to
 * "bench" records in JSON or binary format, counting events and lost notices in its own thread
 * and sampling the latency from each record's timestamp. */
#pragma once

#include <stdint.h>

#include "consumer.h"
#include "lib/perfrelay.h"

typedef struct Subscriber Subscriber;

/* Connects and subscribes (the daemon has answered when this returns), then starts the reading
 * thread, pinned to `cpu` (< 0: not pinned). */
int subscriber_start(const char *socket_path, enum perfrelay_format format, int cpu, Subscriber **ret);
/* Waits until the subscriber has accounted for `expected` events (received + reported lost) or
 * until CLOCK_MONOTONIC reaches deadline_ns, stops and joins the thread, returns its figures. */
void subscriber_finish(Subscriber *s, uint64_t expected, uint64_t deadline_ns, ConsumerResult *ret);
Subscriber *subscriber_free(Subscriber *s);

uint64_t subscriber_client_id(const Subscriber *s);

/* Connects, subscribes to a type the benchmark never emits and closes: when its hello arrives,
 * the daemon's main thread has finished attaching every subscriber whose hello came before. */
int subscriber_fence(const char *socket_path);
