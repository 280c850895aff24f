/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* JetStream publishing for perfrelay-export: queue → async publish → ack, retry or counted drop. */
#include "exporter.h"

#include <errno.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode.h"
#include "macro.h"
#include "time-util.h"

/* The header that carries how often a message was published; absent on the first try. It is
 * only read and written on the retry path. */
#define HDR_ATTEMPT "Perfrelay-Attempt"

struct Exporter {
	const ExportConfig *cfg;
	char host[256];
	char boot_id[64];
	char schema[16];

	natsOptions *opts;
	natsConnection *nc;
	jsCtx *js;

	/* Main thread only: events waiting for an in-flight slot (a ring of queue_cap). */
	natsMsg **queue;
	size_t queue_cap, queue_head, queue_len;

	/* Filled by nats.c's ack thread with the messages JetStream refused; emptied by the main
	 * thread, which decides on retry or drop. Bounded by max_in_flight: a refused message
	 * still counts in in_flight until the main thread takes it from here. */
	pthread_mutex_t lock;
	natsMsg **failed;
	size_t n_failed;
	char last_error[128]; /* JetStream's text for the last refusal, for the stats file */

	/* Written by the ack thread, read by the main thread. */
	atomic_uint_fast64_t in_flight, exported, duplicates, last_progress_ms, reconnects;
	atomic_bool reclaim; /* set on reconnect: what was in flight before will never be acked */

	/* Main thread only. */
	uint64_t offered, dropped_queue_full, dropped_retries, dropped_shutdown, retried, daemon_lost;
	bool stream_ready;
	uint64_t next_stream_try_ms;
	/* After a refusal or a timeout nothing is published for backoff_ms (doubling up to
	 * AckTimeoutMSec, reset by the next ack): a cluster electing a stream leader refuses at
	 * once, and retrying at once would only burn every event's attempts. */
	uint64_t backoff_ms, pause_until_ms, exported_seen;
};

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *userdata) {
	Exporter *e = userdata;

	if (pa) {
		atomic_fetch_add(&e->exported, 1);
		if (pa->Duplicate)
			atomic_fetch_add(&e->duplicates, 1);
		natsMsg_Destroy(msg);
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
	atomic_store(&e->last_progress_ms, now_msec(CLOCK_MONOTONIC));
	if (pa)
		atomic_fetch_sub(&e->in_flight, 1);
}

static void on_reconnected(natsConnection *nc, void *userdata) {
	Exporter *e = userdata;

	atomic_fetch_add(&e->reconnects, 1);
	atomic_store(&e->reclaim, true);
}

Exporter *exporter_free(Exporter *e) {
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
	free(e->queue);
	free(e->failed);
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

int exporter_new(
	const ExportConfig *cfg, const char *hostname, const char *boot_id, unsigned schema, Exporter **ret) {
	Exporter *e;
	jsOptions jso;
	natsStatus s;
	int r;

	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->lock, NULL);
	e->cfg = cfg;
	snprintf(e->host, sizeof(e->host), "%s", hostname);
	/* A subject token cannot hold '.', '*', '>' or spaces. */
	for (char *p = e->host; *p; p++)
		if (*p == '.' || *p == '*' || *p == '>' || *p == ' ')
			*p = '_';
	snprintf(e->boot_id, sizeof(e->boot_id), "%s", boot_id);
	snprintf(e->schema, sizeof(e->schema), "%u", schema);
	/* Room for every in-flight message beyond QueueEvents: a retry is never dropped because
	 * new events filled the queue meanwhile. */
	e->queue_cap = cfg->queue_events + cfg->max_in_flight;
	e->queue = calloc(e->queue_cap, sizeof(natsMsg *));
	e->failed = calloc(cfg->max_in_flight, sizeof(natsMsg *));
	if (!e->queue || !e->failed) {
		exporter_free(e);
		return -ENOMEM;
	}

	s = natsOptions_Create(&e->opts);
	if (s == NATS_OK)
		s = natsOptions_SetServers(e->opts, (const char **) cfg->servers, (int) cfg->n_servers);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(e->opts, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(e->opts, 250);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(e->opts, 2000);
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(e->opts, 2000);
	if (s == NATS_OK)
		s = natsOptions_SetRetryOnFailedConnect(e->opts, true, NULL, NULL);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(e->opts, on_reconnected, e);
	if (s == NATS_OK && cfg->credentials_file)
		s = natsOptions_SetUserCredentialsFromFiles(e->opts, cfg->credentials_file, NULL);
	if (s == NATS_OK && cfg->tls_ca) {
		s = natsOptions_SetSecure(e->opts, true);
		if (s == NATS_OK)
			s = natsOptions_LoadCATrustedCertificates(e->opts, cfg->tls_ca);
	}
	if (s != NATS_OK) {
		r = nats_errno(s);
		exporter_free(e);
		return r;
	}
	s = natsConnection_Connect(&e->nc, e->opts);
	if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
		exporter_free(e);
		return nats_errno(s);
	}
	jsOptions_Init(&jso);
	/* Our own MaxInFlight is the bound; nats.c's must never stall us before it. */
	jso.PublishAsync.MaxPending = (int64_t) cfg->max_in_flight * 2;
	jso.PublishAsync.AckHandler = on_ack;
	jso.PublishAsync.AckHandlerClosure = e;
	s = natsConnection_JetStream(&e->js, e->nc, &jso);
	if (s != NATS_OK) {
		exporter_free(e);
		return nats_errno(s);
	}
	*ret = e;
	return 0;
}

static bool queue_push(Exporter *e, natsMsg *m, bool front) {
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

static natsMsg *queue_pop(Exporter *e) {
	natsMsg *m;

	if (e->queue_len == 0)
		return NULL;
	m = e->queue[e->queue_head];
	e->queue_head = (e->queue_head + 1) % e->queue_cap;
	e->queue_len--;
	return m;
}

static void subject_format(const Exporter *e, const char *type, char *buf, size_t size) {
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

void exporter_offer(Exporter *e, const struct perfrelay_hdr *hdr, const void *rec) {
	char subject[512], id[128], tbuf[16];
	const char *type;
	natsMsg *m = NULL;
	natsStatus s;

	e->offered++;
	if (e->queue_len >= e->cfg->queue_events) {
		e->dropped_queue_full++;
		return;
	}
	type = event_type_to_string(hdr->type);
	if (!type) {
		snprintf(tbuf, sizeof(tbuf), "t%u", hdr->type);
		type = tbuf;
	}
	subject_format(e, type, subject, sizeof(subject));
	/* The id the duplicate window keys on: unique per boot, stable across republishes. */
	snprintf(id, sizeof(id), "%s.%u.%u.%" PRIu64, e->boot_id, hdr->producer, hdr->cpu, (uint64_t) hdr->seq);
	s = natsMsg_Create(&m, subject, NULL, rec, hdr->size);
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
	if (s != NATS_OK) {
		/* Out of memory: nothing else can be done with this event, and it is counted. */
		natsMsg_Destroy(m);
		e->dropped_queue_full++;
		return;
	}
	queue_push(e, m, false);
}

void exporter_daemon_lost(Exporter *e, uint64_t count) {
	e->daemon_lost += count;
}

/* A message that was not acknowledged: publish it again (ahead of newer events, to keep the
 * order as far as possible) unless it ran out of attempts. */
static void retry_or_drop(Exporter *e, natsMsg *m) {
	const char *v = NULL;
	char buf[16];
	unsigned long attempt = 1;

	if (natsMsgHeader_Get(m, HDR_ATTEMPT, &v) == NATS_OK && v)
		attempt = strtoul(v, NULL, 10);
	if (attempt > e->cfg->max_retries) {
		e->dropped_retries++;
		natsMsg_Destroy(m);
		return;
	}
	snprintf(buf, sizeof(buf), "%lu", attempt + 1);
	if (natsMsgHeader_Set(m, HDR_ATTEMPT, buf) != NATS_OK || !queue_push(e, m, true)) {
		e->dropped_queue_full++;
		natsMsg_Destroy(m);
		return;
	}
	e->retried++;
}

/* Takes back every message nats.c still waits an ack for: after a reconnect or a silence of
 * AckTimeoutMSec their acks are not coming. Republishing one that did arrive is harmless: the
 * duplicate window acknowledges it as a duplicate. */
static void reclaim_in_flight(Exporter *e) {
	natsMsgList list = {};

	if (js_PublishAsyncGetPendingList(&list, e->js) != NATS_OK)
		return;
	for (int i = 0; i < list.Count; i++) {
		natsMsg *m = list.Msgs[i];

		list.Msgs[i] = NULL; /* consumed */
		atomic_fetch_sub(&e->in_flight, 1);
		retry_or_drop(e, m);
	}
	natsMsgList_Destroy(&list);
}

static void stream_setup(Exporter *e, uint64_t now) {
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

static void back_off(Exporter *e, uint64_t now) {
	e->backoff_ms = e->backoff_ms ? MIN(e->backoff_ms * 2, e->cfg->ack_timeout_ms) : 100;
	e->pause_until_ms = now + e->backoff_ms;
}

void exporter_run(Exporter *e, uint64_t now) {
	natsMsg *failed[256];
	uint64_t exported;
	bool refused = false;
	size_t n;

	/* Refused messages first: they are older than anything in the queue. */
	do {
		pthread_mutex_lock(&e->lock);
		n = MIN(e->n_failed, ELEMENTSOF(failed));
		e->n_failed -= n;
		memcpy(failed, e->failed + e->n_failed, n * sizeof(natsMsg *));
		pthread_mutex_unlock(&e->lock);
		atomic_fetch_sub(&e->in_flight, n);
		for (size_t i = 0; i < n; i++)
			retry_or_drop(e, failed[i]);
		refused = refused || n > 0;
	} while (n > 0);
	exported = atomic_load(&e->exported);
	if (refused)
		back_off(e, now);
	else if (exported != e->exported_seen)
		e->backoff_ms = 0;
	e->exported_seen = exported;

	if (natsConnection_Status(e->nc) != NATS_CONN_STATUS_CONNECTED)
		return; /* nothing is sent while nats.c reconnects; the queue bounds what waits */

	if (!e->stream_ready) {
		stream_setup(e, now);
		if (!e->stream_ready)
			return;
	}

	if (atomic_exchange(&e->reclaim, false) ||
	    (atomic_load(&e->in_flight) > 0 &&
	     now > atomic_load(&e->last_progress_ms) + e->cfg->ack_timeout_ms)) {
		reclaim_in_flight(e);
		back_off(e, now);
	}
	if (now < e->pause_until_ms)
		return;

	while (e->queue_len > 0 && atomic_load(&e->in_flight) < e->cfg->max_in_flight) {
		natsMsg *m = queue_pop(e);

		if (atomic_fetch_add(&e->in_flight, 1) == 0)
			atomic_store(&e->last_progress_ms, now);
		if (js_PublishMsgAsync(e->js, &m, NULL) != NATS_OK) {
			/* Not sent (the connection went away meanwhile): m is still ours. */
			atomic_fetch_sub(&e->in_flight, 1);
			retry_or_drop(e, m);
			break;
		}
	}
}

bool exporter_idle(Exporter *e) {
	bool failed;

	pthread_mutex_lock(&e->lock);
	failed = e->n_failed > 0;
	pthread_mutex_unlock(&e->lock);
	return e->queue_len == 0 && atomic_load(&e->in_flight) == 0 && !failed;
}

void exporter_abandon(Exporter *e) {
	natsMsgList list = {};
	natsMsg *m;

	if (js_PublishAsyncGetPendingList(&list, e->js) == NATS_OK) {
		atomic_fetch_sub(&e->in_flight, (uint64_t) list.Count);
		e->dropped_shutdown += (uint64_t) list.Count;
		natsMsgList_Destroy(&list);
	}
	while ((m = queue_pop(e))) {
		e->dropped_shutdown++;
		natsMsg_Destroy(m);
	}
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < e->n_failed; i++)
		natsMsg_Destroy(e->failed[i]);
	atomic_fetch_sub(&e->in_flight, e->n_failed);
	e->dropped_shutdown += e->n_failed;
	e->n_failed = 0;
	pthread_mutex_unlock(&e->lock);
}

void exporter_get_stats(Exporter *e, ExportStats *ret) {
	*ret = (ExportStats){
		.offered = e->offered,
		.exported = atomic_load(&e->exported),
		.duplicates = atomic_load(&e->duplicates),
		.dropped_queue_full = e->dropped_queue_full,
		.dropped_retries = e->dropped_retries,
		.dropped_shutdown = e->dropped_shutdown,
		.dropped = e->dropped_queue_full + e->dropped_retries + e->dropped_shutdown,
		.retried = e->retried,
		.daemon_lost = e->daemon_lost,
		.queued = e->queue_len,
		.in_flight = atomic_load(&e->in_flight),
		.reconnects = atomic_load(&e->reconnects),
		.connected = natsConnection_Status(e->nc) == NATS_CONN_STATUS_CONNECTED,
		.stream_ready = e->stream_ready,
	};
	pthread_mutex_lock(&e->lock);
	snprintf(ret->last_error, sizeof(ret->last_error), "%s", e->last_error);
	pthread_mutex_unlock(&e->lock);
	if (!ret->connected ||
	    natsConnection_GetConnectedUrl(e->nc, ret->server, sizeof(ret->server)) != NATS_OK)
		ret->server[0] = 0;
}

int export_stats_write_json(const ExportStats *s, FILE *f) {
	fprintf(f,
		"{\"offered\":%" PRIu64 ",\"exported\":%" PRIu64 ",\"duplicates\":%" PRIu64
		",\"export_dropped\":%" PRIu64 ",\"dropped_queue_full\":%" PRIu64 ",\"dropped_retries\":%" PRIu64
		",\"dropped_shutdown\":%" PRIu64 ",\"export_retried\":%" PRIu64 ",\"daemon_lost\":%" PRIu64
		",\"queued\":%" PRIu64 ",\"in_flight\":%" PRIu64 ",\"reconnects\":%" PRIu64
		",\"connected\":%s,\"stream_ready\":%s,\"server\":\"%s\",\"last_error\":\"",
		s->offered,
		s->exported,
		s->duplicates,
		s->dropped,
		s->dropped_queue_full,
		s->dropped_retries,
		s->dropped_shutdown,
		s->retried,
		s->daemon_lost,
		s->queued,
		s->in_flight,
		s->reconnects,
		s->connected ? "true" : "false",
		s->stream_ready ? "true" : "false",
		s->server);
	/* JSON-safe: the server's text is ASCII prose; anything else becomes '?'. */
	for (const char *p = s->last_error; *p; p++)
		fputc(*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\' ? *p : '?', f);
	fputs("\"}\n", f);
	return ferror(f) ? -EIO : 0;
}

bool exporter_has_room(Exporter *e) {
	return e->queue_len < e->cfg->queue_events;
}
