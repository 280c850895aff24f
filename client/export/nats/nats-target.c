/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JetStream target of perfrelay-export (docs/export.md, "Batches"), export_target_nats:
 * records batched per type into messages, a bounded queue, asynchronous publishes with
 * acknowledgements, retries and counted drops. Owned by the main thread; nats.c's threads only
 * run the ack/connection callbacks, which touch the atomics and the retry list below. */

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode/decode.h"
#include "common/export-frame.h"
#include "export/retry.h"
#include "export/target.h"
#include "macro.h"
#include "time-util.h"

/* Headers of a message: how often it was published (absent on the first try) and how many
 * events it carries. Read on the ack and retry paths, once per message. */
#define HDR_ATTEMPT "Perfrelay-Attempt"
#define HDR_COUNT   "Perfrelay-Count"
/* When the message was first published (the exporter's CLOCK_MONOTONIC, ms): a republish later
 * than the stream's duplicate window may be stored twice, and is counted so. */
#define HDR_FIRST   "Perfrelay-First-Published"

/* The epoch (ExportEvent.seq >> HELD_SHIFT) of a message's first event, for the exporter's
 * cursor: the ack thread takes the message off its epoch's count in held[]. */
#define HDR_EPOCH  "Perfrelay-Export-Epoch"
#define HELD_SHIFT 8
#define HELD_SLOTS 4096u

/* Between two rounds of connection attempts (plus up to 99 ms of jitter). */
#define RECONNECT_WAIT_MS 250

/* Types whose batch may be open at once; one more type seals the oldest. */
#define OPEN_BATCHES_MAX 16

/* Records of one type waiting to become one message (docs/export.md, "Batches"). */
typedef struct Batch {
	uint16_t type;
	bool open;
	uint32_t count;     /* events in it */
	uint64_t opened_ms; /* when its first record came */
	/* The first record's identity and a digest of every record's: the message id. */
	uint32_t producer, cpu;
	uint64_t seq;
	uint64_t digest;
	uint64_t first_seq; /* the first record's ExportEvent.seq */
	uint8_t *buf;       /* BatchBytes + room for one whole record and its unit frame */
	size_t len;
} Batch;

typedef struct NatsTarget {
	const ExportConfig *cfg;
	char host[256];
	char boot_id[64];
	char schema[16];

	natsOptions *opts;
	natsConnection *nc;
	jsCtx *js;
	jsPubOptions pub_opts; /* MaxWait: each message's own ack timeout */

	Batch batches[OPEN_BATCHES_MAX];

	/* Main thread only: sealed messages waiting for an in-flight slot (a ring of queue_cap). */
	natsMsg **queue;
	size_t queue_cap, queue_head, queue_len;
	uint64_t queued_events; /* in the queue's messages and the open batches */

	/* Filled by nats.c's ack thread with the messages JetStream refused or that timed out;
	 * emptied by the main thread, which decides on retry or drop. Bounded by max_in_flight: a
	 * refused message still counts in in_flight until the main thread takes it from here. */
	pthread_mutex_t lock;
	natsMsg **failed;
	size_t n_failed;
	char last_error[128]; /* JetStream's text for the last refusal, for the stats file */
	char connect_error[sizeof(((ExportStats *) 0)->last_error)]; /* why no server was taken */

	/* Written by the ack thread, read by the main thread. in_flight counts messages,
	 * in_flight_events their events; exported and duplicates count events. */
	atomic_uint_fast64_t in_flight, in_flight_events, exported, duplicates, reconnects, acks;
	atomic_uint_fast64_t connect_failures; /* nats.c's reconnect thread and the main loop */
	atomic_bool reclaim; /* set on reconnect: what was in flight before will never be acked */

	/* Main thread only; events. */
	uint64_t offered, dropped_queue_full, dropped_retries, dropped_shutdown, retried;
	uint64_t retried_late;        /* of retried, republished after the duplicate window */
	uint64_t duplicate_window_ms; /* the stream's (its info), else DuplicateWindowSec= */
	uint64_t messages;            /* messages published (first tries) */
	bool stream_ready;
	uint64_t next_stream_try_ms;
	uint64_t next_connect_ms; /* while nc is NULL: the first connection failed for good */
	/* After a refusal or a timeout nothing is published for a while (export/retry.h), reset
	 * by the next ack. */
	ExportBackoff backoff;
	uint64_t acks_seen;

	/* What is held, for oldest_held() (target.h): messages (queued, in flight, failed, or
	 * abandoned at exit) counted by the epoch of their first event, slot epoch % HELD_SLOTS. A
	 * message counts from its seal until it is acknowledged or dropped for good; the ack thread
	 * takes it off. held_low: no message of an earlier epoch is held; every held one's epoch
	 * is below held_low + HELD_SLOTS (one further is counted in the last slot: an older epoch
	 * than its own only holds the cursor back further). Main thread, but held[]. */
	atomic_uint_fast32_t *held; /* HELD_SLOTS, apart: the offer path never touches it */
	uint64_t held_low;
} NatsTarget;

static uint64_t msg_count(natsMsg *m) {
	const char *v = NULL;

	if (natsMsgHeader_Get(m, HDR_COUNT, &v) != NATS_OK || !v)
		return 0;
	return strtoull(v, NULL, 10);
}

/* A message is no longer held: acknowledged or dropped for good. Any thread. */
static void held_release(NatsTarget *e, natsMsg *m) {
	const char *v = NULL;

	if (natsMsgHeader_Get(m, HDR_EPOCH, &v) == NATS_OK && v)
		/* Release: the main thread that sees the slot's count fall to 0 moves the cursor
		 * past events this message carried. */
		atomic_fetch_sub_explicit(
			&e->held[strtoull(v, NULL, 10) % HELD_SLOTS], 1, memory_order_release);
}

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *userdata) {
	NatsTarget *e = userdata;
	uint64_t n = msg_count(msg);

	if (pa) {
		atomic_fetch_add(&e->exported, n);
		if (pa->Duplicate)
			atomic_fetch_add(&e->duplicates, n);
		held_release(e, msg);
		natsMsg_Destroy(msg);
		atomic_fetch_sub(&e->in_flight_events, n);
		atomic_fetch_sub(&e->in_flight, 1);
	} else {
		pthread_mutex_lock(&e->lock);
		e->failed[e->n_failed++] = msg; /* consumed: the main thread retries or drops it */
		snprintf(
			e->last_error,
			sizeof(e->last_error),
			"%s (%d)",
			pae->ErrText ?: natsStatus_GetText(pae->Err),
			(int) pae->ErrCode);
		pthread_mutex_unlock(&e->lock);
	}
	atomic_fetch_add(&e->acks, 1);
}

/* A round without a connection, counted (connect_failures), and why, for the stats' last_error:
 * nats.c's text for status s, else its status's name, else (s NATS_OK: nats.c kept no error)
 * if_ok. Any thread. */
static void connect_failed(NatsTarget *e, natsStatus s, const char *text, const char *if_ok) {
	atomic_fetch_add(&e->connect_failures, 1);
	pthread_mutex_lock(&e->lock);
	snprintf(
		e->connect_error,
		sizeof(e->connect_error),
		"connect: %s",
		s == NATS_OK          ? if_ok :
			text && *text ? text :
					natsStatus_GetText(s));
	pthread_mutex_unlock(&e->lock);
}

static void on_connected(natsConnection *nc, void *userdata) {
	/* The first connection, made late: nothing was in flight, nothing to reclaim. */
}

/* nats.c's reconnect thread, once every server has been tried and none taken, with the
 * connection unlocked: counts the round and keeps its reason (a refused certificate is "SSL
 * Error"), then waits as SetReconnectWait() would, with a little jitter. */
static int64_t on_connect_failed(natsConnection *nc, int attempts, void *userdata) {
	NatsTarget *e = userdata;
	const char *text = NULL;
	natsStatus why = natsConnection_GetLastError(nc, &text);

	connect_failed(e, why, text, "no server answered");
	return RECONNECT_WAIT_MS + (int64_t) (perfrelay_mix64((uintptr_t) e, (uint64_t) attempts) % 100);
}

static void on_reconnected(natsConnection *nc, void *userdata) {
	NatsTarget *e = userdata;

	atomic_fetch_add(&e->reconnects, 1);
	atomic_store(&e->reclaim, true);
}

static NatsTarget *nats_target_free(NatsTarget *e) {
	if (!e)
		return NULL;
	if (e->nc)
		natsConnection_Close(e->nc);
	jsCtx_Destroy(e->js);
	natsConnection_Destroy(e->nc);
	natsOptions_Destroy(e->opts);
	for (size_t i = 0; i < e->queue_len; i++)
		natsMsg_Destroy(e->queue[(e->queue_head + i) % e->queue_cap]);
	for (size_t i = 0; i < e->n_failed; i++)
		natsMsg_Destroy(e->failed[i]);
	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		free(e->batches[i].buf);
	free(e->queue);
	free(e->failed);
	free((void *) e->held);
	pthread_mutex_destroy(&e->lock);
	free(e);
	return NULL;
}

static int nats_errno(natsStatus s) {
	switch (s) {
	case NATS_OK:
		return 0;
	case NATS_NO_MEMORY:
		return -ENOMEM;
	case NATS_INVALID_ARG:
		return -EINVAL;
	case NATS_NOT_FOUND:
		return -ENOENT;
	case NATS_TIMEOUT:
		return -ETIMEDOUT;
	default:
		return -EIO;
	}
}

/* The first connection. nats.c retries a refused one in its own thread, but gives up on a
 * failed TLS handshake (a certificate refused) and closes the connection: that one is tried
 * again from nats_target_run() every RECONNECT_WAIT_MS, counted like a round of its thread's. */
static int connect_now(NatsTarget *e, uint64_t now) {
	jsOptions jso;
	natsStatus s;

	s = natsConnection_Connect(&e->nc, e->opts);
	if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
		connect_failed(e, s, nats_GetLastError(NULL), NULL);
		natsConnection_Destroy(e->nc);
		e->nc = NULL;
		e->next_connect_ms = now + RECONNECT_WAIT_MS;
		return 0;
	}
	jsOptions_Init(&jso);
	/* Our own MaxInFlight is the bound; nats.c's must never stall us before it. */
	jso.PublishAsync.MaxPending = (int64_t) e->cfg->max_in_flight * 2;
	jso.PublishAsync.AckHandler = on_ack;
	jso.PublishAsync.AckHandlerClosure = e;
	s = natsConnection_JetStream(&e->js, e->nc, &jso);
	if (s != NATS_OK) {
		natsConnection_Destroy(e->nc);
		e->nc = NULL;
	}
	return nats_errno(s);
}

static int nats_target_new(
	const ExportConfig *cfg, const char *hostname, const char *boot_id, unsigned schema, NatsTarget **ret) {
	NatsTarget *e;
	natsStatus s;
	int r;

	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->lock, NULL);
	e->cfg = cfg;
	e->duplicate_window_ms = cfg->duplicate_window_sec * 1000;
	snprintf(e->host, sizeof(e->host), "%s", hostname);
	/* A subject token cannot hold '.', '*', '>' or spaces. */
	for (char *p = e->host; *p; p++)
		if (*p == '.' || *p == '*' || *p == '>' || *p == ' ')
			*p = '_';
	snprintf(e->boot_id, sizeof(e->boot_id), "%s", boot_id);
	snprintf(e->schema, sizeof(e->schema), "%u", schema);
	/* A message holds at least one event, so QueueEvents bounds the queued messages; room for
	 * every in-flight message beyond that: a retry is never dropped because new events filled
	 * the queue meanwhile. */
	e->queue_cap = cfg->queue_events + cfg->max_in_flight;
	jsPubOptions_Init(&e->pub_opts);
	e->pub_opts.MaxWait = (int64_t) cfg->ack_timeout_ms;
	e->queue = calloc(e->queue_cap, sizeof(natsMsg *));
	e->failed = calloc(cfg->max_in_flight, sizeof(natsMsg *));
	e->held = calloc(HELD_SLOTS, sizeof(*e->held));
	if (!e->queue || !e->failed || !e->held) {
		nats_target_free(e);
		return -ENOMEM;
	}

	s = natsOptions_Create(&e->opts);
	if (s == NATS_OK)
		s = natsOptions_SetServers(e->opts, (const char **) cfg->servers, (int) cfg->n_servers);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(e->opts, -1);
	if (s == NATS_OK)
		s = natsOptions_SetCustomReconnectDelay(e->opts, on_connect_failed, e);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(e->opts, 2000);
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(e->opts, 2000);
	if (s == NATS_OK)
		/* With a connected callback nats.c retries in its own thread; without one,
		 * natsConnection_Connect() retries in place until a server answers, deaf to
		 * SIGTERM and never reading the socket. */
		s = natsOptions_SetRetryOnFailedConnect(e->opts, true, on_connected, e);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(e->opts, on_reconnected, e);
	if (s == NATS_OK && cfg->credentials_file)
		s = natsOptions_SetUserCredentialsFromFiles(e->opts, cfg->credentials_file, NULL);
	/* Without TLSCA= the system's CAs are trusted (nats.c loads OpenSSL's default paths). The
	 * expected name is always set: without it nats.c checks no name at all. */
	if (s == NATS_OK && cfg->tls)
		s = natsOptions_SetSecure(e->opts, true);
	if (s == NATS_OK && cfg->tls && cfg->tls_server_name)
		s = natsOptions_SetExpectedHostname(e->opts, cfg->tls_server_name);
	if (s == NATS_OK && cfg->tls_ca)
		s = natsOptions_LoadCATrustedCertificates(e->opts, cfg->tls_ca);
	if (s == NATS_OK && cfg->tls_cert)
		s = natsOptions_LoadCertificatesChain(e->opts, cfg->tls_cert, cfg->tls_key);
	if (s != NATS_OK) {
		r = nats_errno(s);
		nats_target_free(e);
		return r;
	}
	r = connect_now(e, now_msec(CLOCK_MONOTONIC));
	if (r < 0) {
		nats_target_free(e);
		return r;
	}
	*ret = e;
	return 0;
}

static bool queue_push(NatsTarget *e, natsMsg *m, bool front) {
	if (e->queue_len >= e->queue_cap)
		return false;
	if (front) {
		e->queue_head = (e->queue_head + e->queue_cap - 1) % e->queue_cap;
		e->queue[e->queue_head] = m;
	} else
		e->queue[(e->queue_head + e->queue_len) % e->queue_cap] = m;
	e->queue_len++;
	return true;
}

static natsMsg *queue_pop(NatsTarget *e) {
	natsMsg *m;

	if (e->queue_len == 0)
		return NULL;
	m = e->queue[e->queue_head];
	e->queue_head = (e->queue_head + 1) % e->queue_cap;
	e->queue_len--;
	return m;
}

static void subject_format(const NatsTarget *e, const char *type, char *buf, size_t size) {
	const char *t = e->cfg->subject_template;
	size_t n = 0;

	for (; *t && n + 1 < size; t++) {
		const char *ins = NULL;

		if (*t == '%' && t[1] == 'h')
			ins = e->host;
		else if (*t == '%' && t[1] == 't')
			ins = type;
		if (ins) {
			n += (size_t) snprintf(buf + n, size - n, "%s", ins);
			if (n >= size)
				n = size - 1;
			t++;
		} else
			buf[n++] = *t;
	}
	buf[n] = 0;
}

/* The batch digest after one more record: order-sensitive, over each record's identity and
 * time, so that two batches with the same first record and count but other records (two
 * exporters with overlapping filters; a counters pin made again within a boot, whose seq starts
 * over) get different message ids, while a republish or a replay of the same batch gets the
 * same. docs/export.md gives it, for readers that check it. */
static uint64_t digest_add(uint64_t d, const struct perfrelay_hdr *h) {
	/* event.h's mix (splitmix64's finalizer of h ^ v), as exec ids are made. */
	uint64_t r = perfrelay_mix64(
		perfrelay_mix64(0, (uint64_t) h->producer << 32 | h->cpu) ^
			perfrelay_mix64(0, h->ts_ns + h->type),
		h->seq);

	return (d << 7 | d >> 57) ^ r;
}

/* Turns a batch into a message on the queue (its events stay counted in queued_events). */
static void batch_seal(NatsTarget *e, Batch *b) {
	char subject[512], id[160], tbuf[16], count[24], epoch_text[24];
	uint64_t epoch = MIN(b->first_seq >> HELD_SHIFT, e->held_low + HELD_SLOTS - 1);
	const char *type;
	natsMsg *m = NULL;
	natsStatus s;

	if (!b->open)
		return;
	b->open = false;
	type = event_type_to_string(b->type);
	if (!type) {
		snprintf(tbuf, sizeof(tbuf), "t%u", b->type);
		type = tbuf;
	}
	subject_format(e, type, subject, sizeof(subject));
	/* The id the duplicate window keys on: the batch's first record (unique per boot), how
	 * many records follow it and a digest of them all; the same on every republish. */
	snprintf(
		id,
		sizeof(id),
		"%s.%" PRIu32 ".%" PRIu32 ".%" PRIu64 ".%" PRIu32 ".%016" PRIx64,
		e->boot_id,
		b->producer,
		b->cpu,
		b->seq,
		b->count,
		b->digest);
	snprintf(count, sizeof(count), "%" PRIu32, b->count);
	snprintf(epoch_text, sizeof(epoch_text), "%" PRIu64, epoch);
	s = natsMsg_Create(&m, subject, NULL, (const char *) b->buf, (int) b->len);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Nats-Msg-Id", id);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Perfrelay-Host", e->host);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Perfrelay-Boot-Id", e->boot_id);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Perfrelay-Schema", e->schema);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Perfrelay-Type", type);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Perfrelay-Batch", EXPORT_BATCH_FORMAT);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, HDR_COUNT, count);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, HDR_EPOCH, epoch_text);
	if (s != NATS_OK || !queue_push(e, m, false)) {
		/* Out of memory: nothing else can be done with these events, and they are counted. */
		natsMsg_Destroy(m);
		e->dropped_queue_full += b->count;
		e->queued_events -= b->count;
	} else
		atomic_fetch_add_explicit(&e->held[epoch % HELD_SLOTS], 1, memory_order_relaxed);
	b->count = 0;
	b->len = 0;
}

static void batch_append(Batch *b, const void *p, size_t n) {
	memcpy(b->buf + b->len, p, n);
	b->len += n;
}

/* The open batch of type `type`, or a new one (sealing the oldest when all are taken). */
static Batch *batch_for(NatsTarget *e, uint16_t type) {
	Batch *free_slot = NULL, *oldest = NULL;

	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++) {
		Batch *b = &e->batches[i];

		if (b->open && b->type == type)
			return b;
		if (!b->open && !free_slot)
			free_slot = b;
		if (b->open && (!oldest || b->opened_ms < oldest->opened_ms))
			oldest = b;
	}
	if (!free_slot) {
		batch_seal(e, oldest);
		free_slot = oldest;
	}
	if (!free_slot->buf) {
		free_slot->buf = malloc(e->cfg->batch_bytes + EXPORT_FRAME_MAX);
		if (!free_slot->buf)
			return NULL;
	}
	free_slot->type = type;
	return free_slot;
}

static void nats_target_offer(
	NatsTarget *e,
	const struct perfrelay_hdr *hdr,
	const void *rec,
	size_t rec_size,
	const char *unit,
	uint64_t loop_seq,
	uint64_t now) {
	uint8_t frame[EXPORT_UNIT_FRAME_MAX];
	size_t frame_len = export_unit_frame(hdr, rec, rec_size, unit, frame);
	uint32_t le = htole32((uint32_t) rec_size);
	Batch *b;

	e->offered++;
	if (e->queued_events >= e->cfg->queue_events) {
		e->dropped_queue_full++;
		return;
	}
	b = batch_for(e, hdr->type);
	if (!b) {
		e->dropped_queue_full++; /* out of memory, counted like a full queue */
		return;
	}
	/* A record never waits: a batch that cannot take it goes first (buf has room for one
	 * whole record beyond BatchBytes, so a batch always takes its first). */
	if (b->open && b->len + frame_len + sizeof(le) + rec_size > e->cfg->batch_bytes)
		batch_seal(e, b);
	if (!b->open) {
		b->open = true;
		b->type = hdr->type;
		b->opened_ms = now;
		b->producer = hdr->producer;
		b->cpu = hdr->cpu;
		b->seq = hdr->seq;
		b->first_seq = loop_seq;
		b->digest = 0;
	}
	b->digest = digest_add(b->digest, hdr);
	batch_append(b, frame, frame_len);
	batch_append(b, &le, sizeof(le));
	batch_append(b, rec, rec_size);
	b->count++;
	e->queued_events++;
	if (b->len >= e->cfg->batch_bytes)
		batch_seal(e, b);
}

/* A message of n events that was not acknowledged: publish it again (ahead of newer ones, to keep the
 * order as far as possible) unless it ran out of attempts. Its events go back to the queue's. */
static void retry_or_drop(NatsTarget *e, natsMsg *m, uint64_t n) {
	const char *v = NULL;
	char buf[16];
	unsigned long attempt = 1;

	if (natsMsgHeader_Get(m, HDR_ATTEMPT, &v) == NATS_OK && v)
		attempt = strtoul(v, NULL, 10);
	if (!export_retry_allowed(e->cfg, attempt)) {
		e->dropped_retries += n;
		held_release(e, m);
		natsMsg_Destroy(m);
		return;
	}
	snprintf(buf, sizeof(buf), "%lu", attempt + 1);
	if (natsMsgHeader_Set(m, HDR_ATTEMPT, buf) != NATS_OK || !queue_push(e, m, true)) {
		e->dropped_queue_full += n;
		held_release(e, m);
		natsMsg_Destroy(m);
		return;
	}
	e->queued_events += n;
	e->retried += n;
	/* JetStream keeps a message id only for its duplicate window: past it, a republish of a
	 * message an earlier try stored (its ack lost) is stored again. */
	if (natsMsgHeader_Get(m, HDR_FIRST, &v) == NATS_OK && v &&
	    now_msec(CLOCK_MONOTONIC) - strtoull(v, NULL, 10) >= e->duplicate_window_ms)
		e->retried_late += n;
}

/* A message taken back from in flight (failed, timed out, or pending across a reconnect). */
static void take_back(NatsTarget *e, natsMsg *m) {
	uint64_t n = msg_count(m);

	atomic_fetch_sub(&e->in_flight_events, n);
	atomic_fetch_sub(&e->in_flight, 1);
	retry_or_drop(e, m, n);
}

/* Takes back every message nats.c still waits an ack for: after a reconnect their acks are
 * not coming. Republishing one that did arrive is harmless: the duplicate window acknowledges
 * it as a duplicate. */
static void reclaim_in_flight(NatsTarget *e) {
	natsMsgList list = {};

	if (js_PublishAsyncGetPendingList(&list, e->js) != NATS_OK)
		return;
	for (int i = 0; i < list.Count; i++) {
		natsMsg *m = list.Msgs[i];

		list.Msgs[i] = NULL; /* consumed */
		take_back(e, m);
	}
	natsMsgList_Destroy(&list);
}

/* nats.c gave up on the connection (it does after a failed TLS handshake on the first
 * connection, reconnect thread or not): what was in flight goes back to the queue, and a new
 * connection is made after RECONNECT_WAIT_MS. */
static void connection_closed(NatsTarget *e, uint64_t now) {
	const char *text = NULL;
	natsStatus why = natsConnection_GetLastError(e->nc, &text);

	connect_failed(e, why, text, "closed");
	if (e->messages > 0)
		reclaim_in_flight(e);
	jsCtx_Destroy(e->js);
	e->js = NULL;
	natsConnection_Destroy(e->nc);
	e->nc = NULL;
	e->next_connect_ms = now + RECONNECT_WAIT_MS;
}

static void stream_setup(NatsTarget *e, uint64_t now) {
	jsStreamInfo *si = NULL;
	jsStreamConfig sc;
	jsErrCode jerr = 0;
	const char *subjects[1];
	natsStatus s;

	if (now < e->next_stream_try_ms)
		return;
	e->next_stream_try_ms = now + 1000;
	s = js_GetStreamInfo(&si, e->js, e->cfg->stream, NULL, &jerr);
	if (s == NATS_OK) {
		if (si->Config && si->Config->Duplicates > 0)
			e->duplicate_window_ms = (uint64_t) si->Config->Duplicates / 1000000;
		jsStreamInfo_Destroy(si);
		e->stream_ready = true;
		return;
	}
	if (s != NATS_NOT_FOUND || !e->cfg->create_stream)
		return; /* the operator's stream is not there (yet): try again in a second */
	jsStreamConfig_Init(&sc);
	sc.Name = e->cfg->stream;
	subjects[0] = e->cfg->stream_subjects;
	sc.Subjects = subjects;
	sc.SubjectsLen = 1;
	sc.Storage = js_FileStorage;
	sc.Replicas = (int64_t) e->cfg->replicas;
	sc.MaxAge = (int64_t) e->cfg->max_age_sec * 1000000000;
	sc.MaxBytes = e->cfg->max_bytes ? (int64_t) e->cfg->max_bytes : -1;
	sc.Duplicates = (int64_t) e->cfg->duplicate_window_sec * 1000000000;
	s = js_AddStream(&si, e->js, &sc, NULL, &jerr);
	if (s == NATS_OK) {
		jsStreamInfo_Destroy(si);
		e->stream_ready = true;
	}
}

static void nats_target_run(NatsTarget *e, uint64_t now) {
	natsMsg *failed[256];
	uint64_t acks;
	bool refused = false;
	size_t n;

	/* A batch waits at most BatchDelayMSec for more records. */
	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		if (e->batches[i].open && now - e->batches[i].opened_ms >= e->cfg->batch_delay_ms)
			batch_seal(e, &e->batches[i]);

	/* Refused and timed-out messages first: they are older than anything in the queue. */
	do {
		pthread_mutex_lock(&e->lock);
		n = MIN(e->n_failed, ELEMENTSOF(failed));
		e->n_failed -= n;
		memcpy(failed, e->failed + e->n_failed, n * sizeof(natsMsg *));
		pthread_mutex_unlock(&e->lock);
		for (size_t i = 0; i < n; i++)
			take_back(e, failed[i]);
		refused = refused || n > 0;
	} while (n > 0);
	acks = atomic_load(&e->acks);
	if (refused)
		export_backoff_fail(&e->backoff, e->cfg, now, 0);
	else if (acks != e->acks_seen)
		export_backoff_ok(&e->backoff);
	e->acks_seen = acks;

	if (e->nc && natsConnection_Status(e->nc) == NATS_CONN_STATUS_CLOSED)
		connection_closed(e, now);
	if (!e->nc && now >= e->next_connect_ms && connect_now(e, now) < 0)
		e->next_connect_ms = now + RECONNECT_WAIT_MS; /* no memory for the JetStream context */
	if (!e->js || natsConnection_Status(e->nc) != NATS_CONN_STATUS_CONNECTED)
		return; /* nothing is sent while nats.c reconnects; the queue bounds what waits */

	if (!e->stream_ready) {
		stream_setup(e, now);
		if (!e->stream_ready)
			return;
	}

	if (atomic_exchange(&e->reclaim, false)) {
		reclaim_in_flight(e);
		export_backoff_fail(&e->backoff, e->cfg, now, 0);
	}
	if (export_backoff_paused(&e->backoff, now))
		return;

	while (e->queue_len > 0 && atomic_load(&e->in_flight) < e->cfg->max_in_flight) {
		natsMsg *m = queue_pop(e);
		uint64_t count = msg_count(m);
		const char *v = NULL;
		char first[24];

		if (natsMsgHeader_Get(m, HDR_ATTEMPT, &v) != NATS_OK || !v) {
			snprintf(first, sizeof(first), "%" PRIu64, now);
			(void) natsMsgHeader_Set(m, HDR_FIRST, first);
		}
		e->queued_events -= count;
		atomic_fetch_add(&e->in_flight_events, count);
		atomic_fetch_add(&e->in_flight, 1);
		/* MaxWait: nats.c times each message's ack out on its own and hands it back
		 * through on_ack() with NATS_TIMEOUT. */
		if (js_PublishMsgAsync(e->js, &m, &e->pub_opts) != NATS_OK) {
			/* Not sent (the connection went away meanwhile): m is still ours. */
			take_back(e, m);
			break;
		}
		e->messages++;
	}
}

static void nats_target_flush(NatsTarget *e) {
	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		batch_seal(e, &e->batches[i]);
}

static void nats_target_seal_if_stuck(NatsTarget *e) {
	if (e->queue_len > 0 || atomic_load(&e->in_flight) > 0)
		return;
	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		batch_seal(e, &e->batches[i]);
}

static bool nats_target_idle(NatsTarget *e) {
	bool failed;

	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		if (e->batches[i].open)
			return false;
	pthread_mutex_lock(&e->lock);
	failed = e->n_failed > 0;
	pthread_mutex_unlock(&e->lock);
	return e->queue_len == 0 && atomic_load(&e->in_flight) == 0 && !failed;
}

static void nats_target_abandon(NatsTarget *e) {
	natsMsgList list = {};
	natsMsg *m;

	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		batch_seal(e, &e->batches[i]);
	/* nats.c 3.4 makes its table of pending messages at the first publish and reads it
	 * unchecked here: a target that never published (never connected) has nothing pending. */
	if (e->messages > 0 && js_PublishAsyncGetPendingList(&list, e->js) == NATS_OK) {
		for (int i = 0; i < list.Count; i++) {
			uint64_t n = msg_count(list.Msgs[i]);

			atomic_fetch_sub(&e->in_flight_events, n);
			atomic_fetch_sub(&e->in_flight, 1);
			e->dropped_shutdown += n;
		}
		natsMsgList_Destroy(&list);
	}
	while ((m = queue_pop(e))) {
		uint64_t n = msg_count(m);

		e->queued_events -= n;
		e->dropped_shutdown += n;
		natsMsg_Destroy(m);
	}
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < e->n_failed; i++) {
		uint64_t n = msg_count(e->failed[i]);

		atomic_fetch_sub(&e->in_flight_events, n);
		atomic_fetch_sub(&e->in_flight, 1);
		e->dropped_shutdown += n;
		natsMsg_Destroy(e->failed[i]);
	}
	e->n_failed = 0;
	pthread_mutex_unlock(&e->lock);
}

static void nats_target_get_stats(NatsTarget *e, ExportStats *ret) {
	*ret = (ExportStats){
		.offered = e->offered,
		.exported = atomic_load(&e->exported),
		.duplicates = atomic_load(&e->duplicates),
		.dropped_queue_full = e->dropped_queue_full,
		.dropped_retries = e->dropped_retries,
		.dropped_shutdown = e->dropped_shutdown,
		.dropped = e->dropped_queue_full + e->dropped_retries + e->dropped_shutdown,
		.retried = e->retried,
		.retried_late = e->retried_late,
		.queued = e->queued_events,
		.in_flight = atomic_load(&e->in_flight_events),
		.messages = e->messages,
		.in_flight_messages = atomic_load(&e->in_flight),
		.reconnects = atomic_load(&e->reconnects),
		.connect_failures = atomic_load(&e->connect_failures),
		.connected = e->nc && natsConnection_Status(e->nc) == NATS_CONN_STATUS_CONNECTED,
		.stream_ready = e->stream_ready,
	};
	pthread_mutex_lock(&e->lock);
	snprintf(ret->last_error, sizeof(ret->last_error), "%s", e->last_error);
	/* Not connected: why the last attempt failed. */
	if (!ret->connected && !ret->last_error[0] && e->connect_error[0])
		memcpy(ret->last_error, e->connect_error, sizeof(ret->last_error));
	pthread_mutex_unlock(&e->lock);
	if (!ret->connected ||
	    natsConnection_GetConnectedUrl(e->nc, ret->server, sizeof(ret->server)) != NATS_OK)
		ret->server[0] = 0;
	export_url_redact(ret->server); /* the stats file is world-readable */
}

static uint64_t nats_target_oldest_held(NatsTarget *e, uint64_t newest) {
	uint64_t low = UINT64_MAX, open_epoch;

	for (size_t i = 0; i < ELEMENTSOF(e->batches); i++)
		if (e->batches[i].open)
			low = MIN(low, e->batches[i].first_seq);
	/* held_low never passes an open batch: its message will be counted in its epoch. */
	open_epoch = low == UINT64_MAX ? UINT64_MAX : low >> HELD_SHIFT;
	/* Acquire: pairs with held_release(), so the events before an epoch seen empty are done. */
	while (e->held_low < (newest >> HELD_SHIFT) && e->held_low < open_epoch &&
	       atomic_load_explicit(&e->held[e->held_low % HELD_SLOTS], memory_order_acquire) == 0)
		e->held_low++;
	if (atomic_load_explicit(&e->held[e->held_low % HELD_SLOTS], memory_order_acquire) != 0)
		low = MIN(low, e->held_low << HELD_SHIFT);
	return low;
}

static bool nats_target_has_room(NatsTarget *e) {
	return e->queued_events < e->cfg->queue_events;
}

/* ---- the target's operations (export/target.h) ---- */

static int target_open(const ExportContext *ctx, void **ret) {
	NatsTarget *t = NULL;
	int r = nats_target_new(ctx->cfg, ctx->host, ctx->boot_id, 1, &t);

	if (r < 0)
		fprintf(stderr, "perfrelay-export: cannot set up the NATS connection: %s\n", strerror(-r));
	else
		*ret = t;
	return r;
}

static void target_offer(void *t, const ExportEvent *ev, uint64_t now) {
	nats_target_offer(t, ev->hdr, ev->rec, ev->size, ev->unit, ev->seq, now);
}

static void target_poll(void *t, uint64_t now) {
	nats_target_run(t, now);
}

static void target_flush(void *t) {
	nats_target_flush(t);
}

static void target_unstick(void *t) {
	nats_target_seal_if_stuck(t);
}

static bool target_idle(void *t) {
	return nats_target_idle(t);
}

static bool target_has_room(void *t) {
	return nats_target_has_room(t);
}

static void target_abandon(void *t) {
	nats_target_abandon(t);
}

static void target_figures(void *t, ExportStats *ret) {
	nats_target_get_stats(t, ret);
}

static uint64_t target_oldest_held(void *t, uint64_t newest) {
	return nats_target_oldest_held(t, newest);
}

static void target_close(void *t) {
	nats_target_free(t);
}

const ExportTargetType export_target_nats = {
	.name = "nats",
	.open = target_open,
	.offer = target_offer,
	.poll = target_poll,
	.flush = target_flush,
	.unstick = target_unstick,
	.idle = target_idle,
	.has_room = target_has_room,
	.abandon = target_abandon,
	.figures = target_figures,
	.oldest_held = target_oldest_held,
	.close = target_close,
};
