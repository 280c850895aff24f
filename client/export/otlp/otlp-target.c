/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The OTLP target of perfrelay-export (docs/export.md, "OTLP"), export_target_otlp: events
 * encoded as they come into OTLP/HTTP logs requests (otlp-encode.c), posted with libcurl's
 * multi interface from the main loop, retried with back-off on 429, 502, 503, 504 and transport
 * errors (honouring Retry-After), a bounded queue, every event counted (export-stats.h). Main
 * thread only. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include "export/fields.h"
#include "export/otlp/otlp-encode.h"
#include "export/retry.h"
#include "export/target.h"
#include "macro.h"
#include "time-util.h"

/* A collector's answer is read up to this much (a partial-success message at most). */
#define RESPONSE_MAX           (64u * 1024u)
/* The longest Retry-After obeyed, in seconds. */
#define OTLP_RETRY_AFTER_MAX_S 300

typedef struct Request {
	struct Request *next;
	uint8_t *body;
	size_t len, body_size; /* the body's bytes, and its buffer's (otlp_batch_seal()) */
	uint64_t count;        /* events in it */
	uint64_t first_seq;    /* the first one's ExportEvent.seq */
	unsigned attempt;      /* 1 for the first post */
	CURL *easy;            /* while in flight */
	struct curl_slist *headers;
	char response[RESPONSE_MAX];
	size_t response_len;
} Request;

typedef struct OtlpTarget {
	const ExportConfig *cfg;
	const OtlpResource *res;
	char url[1024];
	CURLM *multi;
	OtlpResource res_storage;

	/* The batch being filled: its LogRecords, encoded as they came. */
	ExportFields fields;
	OtlpBatch *batch;
	uint64_t batch_opened_ms;
	uint64_t batch_first_seq;
	uint64_t abandoned_seq; /* the oldest event abandon() gave up on: held still */
	/* When events were observed: the wall clock, read once per millisecond of the loop's. */
	uint64_t observed_at_ms, observed_ns;

	/* Encoded requests waiting for a slot: a FIFO (retries go to the front). */
	Request *queue_head, *queue_tail;
	Request **in_flight; /* cfg->otlp_max_in_flight slots */
	size_t n_in_flight;
	uint64_t queued_events, in_flight_events;

	/* Wall clock = boot time + offset; refreshed each second, for clock steps. */
	int64_t wall_offset_ns;
	uint64_t wall_offset_at_ms;

	ExportBackoff backoff;
	ExportStats s; /* counters; queued and in_flight are filled in by get_stats */
} OtlpTarget;

/* Frees a request; its body's buffer goes back to the batch for the next requests. */
static void request_free(OtlpTarget *t, Request *r) {
	if (!r)
		return;
	if (r->easy)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->headers);
	if (t->batch)
		otlp_batch_recycle(t->batch, r->body, r->body_size);
	else
		free(r->body);
	free(r);
}

static void target_close(void *userdata) {
	OtlpTarget *t = userdata;

	if (!t)
		return;
	for (size_t i = 0; i < t->n_in_flight; i++) {
		curl_multi_remove_handle(t->multi, t->in_flight[i]->easy);
		request_free(t, t->in_flight[i]);
	}
	while (t->queue_head) {
		Request *r = t->queue_head;

		t->queue_head = r->next;
		request_free(t, r);
	}
	if (t->multi)
		curl_multi_cleanup(t->multi);
	otlp_batch_free(t->batch);
	export_fields_done(&t->fields);
	free(t->in_flight);
	free(t);
}

static int target_open(const ExportContext *ctx, void **ret) {
	const ExportConfig *cfg = ctx->cfg;
	OtlpTarget *t = calloc(1, sizeof(*t));
	size_t n;

	if (!t)
		return -ENOMEM;
	t->cfg = cfg;
	t->abandoned_seq = UINT64_MAX;
	t->res_storage = (OtlpResource){ .host = ctx->host, .boot_id = ctx->boot_id, .version = ctx->version };
	t->res = &t->res_storage;
	n = strlen(cfg->otlp_endpoint);
	while (n > 0 && cfg->otlp_endpoint[n - 1] == '/')
		n--;
	if (n + sizeof("/v1/logs") > sizeof(t->url)) {
		free(t);
		return -ENAMETOOLONG;
	}
	snprintf(t->url, sizeof(t->url), "%.*s/v1/logs", (int) n, cfg->otlp_endpoint);
	t->multi = curl_multi_init();
	t->in_flight = calloc(cfg->otlp_max_in_flight, sizeof(Request *));
	if (!t->multi || !t->in_flight ||
	    otlp_batch_new(cfg->otlp_protocol, cfg->otlp_compression, t->res, &t->batch) < 0) {
		target_close(t);
		return -ENOMEM;
	}
	t->s.stream_ready = true;
	snprintf(t->s.server, sizeof(t->s.server), "%.*s", (int) sizeof(t->s.server) - 1, t->url);
	*ret = t;
	return 0;
}

static uint64_t wall_ns(OtlpTarget *t, uint64_t boot_ns, uint64_t now_ms) {
	if (t->wall_offset_at_ms == 0 || now_ms >= t->wall_offset_at_ms + 1000) {
		t->wall_offset_ns = (int64_t) now_nsec(CLOCK_REALTIME) - (int64_t) now_nsec(CLOCK_BOOTTIME);
		t->wall_offset_at_ms = now_ms ?: 1;
	}
	return (uint64_t) ((int64_t) boot_ns + t->wall_offset_ns);
}

static void queue_push(OtlpTarget *t, Request *r, bool front) {
	if (front) {
		r->next = t->queue_head;
		t->queue_head = r;
		if (!t->queue_tail)
			t->queue_tail = r;
	} else {
		r->next = NULL;
		if (t->queue_tail)
			t->queue_tail->next = r;
		else
			t->queue_head = r;
		t->queue_tail = r;
	}
	t->queued_events += r->count;
}

static Request *queue_pop(OtlpTarget *t) {
	Request *r = t->queue_head;

	if (!r)
		return NULL;
	t->queue_head = r->next;
	if (!t->queue_head)
		t->queue_tail = NULL;
	r->next = NULL;
	t->queued_events -= r->count;
	return r;
}

/* Makes the open batch a request on the queue. Its events stay counted as queued. */
static void batch_seal(OtlpTarget *t) {
	size_t n = otlp_batch_count(t->batch);
	Request *r;
	int k;

	if (n == 0)
		return;
	r = calloc(1, sizeof(*r));
	k = r ? otlp_batch_seal(t->batch, &r->body, &r->len, &r->body_size) : -ENOMEM;
	/* The batch's events were counted in queued_events as they came: the request takes them. */
	t->queued_events -= n;
	if (k < 0) {
		t->s.dropped_queue_full += n; /* out of memory: counted like a full queue */
		otlp_batch_clear(t->batch);
		free(r);
	} else {
		r->count = n;
		r->first_seq = t->batch_first_seq;
		r->attempt = 1;
		queue_push(t, r, false);
	}
}

static void target_offer(void *userdata, const ExportEvent *ev, uint64_t now) {
	OtlpTarget *t = userdata;

	t->s.offered++;
	if (t->queued_events >= t->cfg->queue_events) {
		t->s.dropped_queue_full++;
		return;
	}
	if (now != t->observed_at_ms || t->observed_ns == 0) {
		t->observed_ns = now_nsec(CLOCK_REALTIME);
		t->observed_at_ms = now;
	}
	/* The body is the event's fields as the socket's JSON line has them, read from the
	 * record; a record the daemon would not have sent is counted, not exported. */
	if (export_fields_walk(&t->fields, ev->rec, ev->size, ev->unit, ev->client) < 0 ||
	    otlp_batch_add(t->batch, &t->fields, wall_ns(t, ev->hdr->ts_ns, now), t->observed_ns) < 0) {
		t->s.dropped_refused++;
		return;
	}
	if (otlp_batch_count(t->batch) == 1) {
		t->batch_opened_ms = now;
		t->batch_first_seq = ev->seq;
	}
	t->queued_events++;
	if (otlp_batch_count(t->batch) >= t->cfg->otlp_batch_events)
		batch_seal(t);
}

static size_t on_body(char *p, size_t size, size_t n, void *userdata) {
	Request *r = userdata;
	size_t len = size * n, take = MIN(len, sizeof(r->response) - r->response_len);

	memcpy(r->response + r->response_len, p, take);
	r->response_len += take;
	return len; /* the rest is not needed: read and forgotten */
}

static int request_start(OtlpTarget *t, Request *r) {
	const ExportConfig *c = t->cfg;
	CURL *e = curl_easy_init();

	if (!e)
		return -ENOMEM;
	r->response_len = 0;
	if (!r->headers) {
		struct curl_slist *h = curl_slist_append(
			NULL,
			c->otlp_protocol == OTLP_PROTOCOL_JSON ? "Content-Type: application/json" :
								 "Content-Type: application/x-protobuf");
		/* No "Expect: 100-continue" round trip before each body: the collector takes it. */
		if (h)
			h = curl_slist_append(h, "Expect:");
		if (h && c->otlp_compression == OTLP_COMPRESSION_GZIP)
			h = curl_slist_append(h, "Content-Encoding: gzip");
		for (size_t i = 0; h && i < c->n_otlp_headers; i++)
			h = curl_slist_append(h, c->otlp_headers[i]);
		if (!h) {
			curl_easy_cleanup(e);
			return -ENOMEM;
		}
		r->headers = h;
	}
	curl_easy_setopt(e, CURLOPT_URL, t->url);
	/* The endpoint's scheme only: no redirect or proxy turns https into http. */
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, startswith(t->url, "https://") ? "https" : "http");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) r->len);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long) c->otlp_timeout_ms);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	if (c->otlp_tls_ca)
		curl_easy_setopt(e, CURLOPT_CAINFO, c->otlp_tls_ca);
	if (c->otlp_tls_cert) {
		curl_easy_setopt(e, CURLOPT_SSLCERT, c->otlp_tls_cert);
		curl_easy_setopt(e, CURLOPT_SSLKEY, c->otlp_tls_key);
	}
	if (curl_multi_add_handle(t->multi, e) != CURLM_OK) {
		curl_easy_cleanup(e);
		return -ENOMEM;
	}
	r->easy = e;
	return 0;
}

static void retry_or_drop(OtlpTarget *t, Request *r) {
	if (!export_retry_allowed(t->cfg, r->attempt)) {
		t->s.dropped_retries += r->count;
		request_free(t, r);
		return;
	}
	r->attempt++;
	t->s.retried += r->count;
	queue_push(t, r, true);
}

/* A request's outcome: counted, retried or dropped. */
static void request_done(OtlpTarget *t, Request *r, CURLcode result, uint64_t now) {
	long status = 0;
	curl_off_t retry_after = 0;

	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(r->easy, CURLINFO_RETRY_AFTER, &retry_after);
	curl_multi_remove_handle(t->multi, r->easy);
	curl_easy_cleanup(r->easy);
	r->easy = NULL;
	t->in_flight_events -= r->count;

	if (result != CURLE_OK) {
		t->s.connected = false;
		snprintf(t->s.last_error, sizeof(t->s.last_error), "%s", curl_easy_strerror(result));
		export_backoff_fail(&t->backoff, t->cfg, now, 0);
		retry_or_drop(t, r);
		return;
	}
	t->s.connected = true;
	if (status >= 200 && status < 300) {
		uint64_t rejected = 0;
		char msg[sizeof(t->s.last_error)];

		if (otlp_parse_response(
			    t->cfg->otlp_protocol,
			    (const uint8_t *) r->response,
			    r->response_len,
			    &rejected,
			    msg,
			    sizeof(msg)) < 0)
			rejected = 0; /* a 2xx is success; an unreadable body says nothing more */
		rejected = MIN(rejected, r->count);
		t->s.exported += r->count - rejected;
		t->s.dropped_refused += rejected;
		if (rejected > 0)
			snprintf(t->s.last_error, sizeof(t->s.last_error), "%s", msg[0] ? msg : "partial success");
		export_backoff_ok(&t->backoff);
		request_free(t, r);
		return;
	}
	snprintf(t->s.last_error, sizeof(t->s.last_error), "HTTP status %ld", status);
	/* The OTLP/HTTP specification's retryable answers; anything else will not get better. */
	if (status == 429 || status == 502 || status == 503 || status == 504) {
		/* The server's word, bounded: a huge or hostile value would stop the target for
		 * good (or overflow the pause), and the queue behind it fills and drops. */
		export_backoff_fail(
			&t->backoff,
			t->cfg,
			now,
			(uint64_t) MIN(MAX(retry_after, (curl_off_t) 0), (curl_off_t) OTLP_RETRY_AFTER_MAX_S) *
				1000);
		retry_or_drop(t, r);
		return;
	}
	t->s.dropped_refused += r->count;
	request_free(t, r);
}

static void target_flush(void *userdata) {
	OtlpTarget *t = userdata;

	batch_seal(t);
}

static void target_poll(void *userdata, uint64_t now) {
	OtlpTarget *t = userdata;
	CURLMsg *m;
	int running, left;

	if (otlp_batch_count(t->batch) > 0 &&
	    (now - t->batch_opened_ms >= t->cfg->batch_delay_ms ||
	     (!t->queue_head && t->n_in_flight == 0 && t->queued_events >= t->cfg->queue_events)))
		batch_seal(t); /* waited long enough, or it alone fills the queue */
	while (!export_backoff_paused(&t->backoff, now) && t->queue_head &&
	       t->n_in_flight < t->cfg->otlp_max_in_flight) {
		Request *r = queue_pop(t);

		if (request_start(t, r) < 0) {
			queue_push(t, r, true);
			break;
		}
		if (r->attempt == 1)
			t->s.messages++;
		t->in_flight[t->n_in_flight++] = r;
		t->in_flight_events += r->count;
	}
	curl_multi_perform(t->multi, &running);
	while ((m = curl_multi_info_read(t->multi, &left))) {
		Request *r = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **) &r);
		for (size_t i = 0; i < t->n_in_flight; i++)
			if (t->in_flight[i] == r) {
				t->in_flight[i] = t->in_flight[--t->n_in_flight];
				break;
			}
		request_done(t, r, m->data.result, now);
	}
}

/* curl's connections: writable while a request goes out, readable for its answer. */
static size_t target_wait_fds(void *userdata, struct pollfd *fds, size_t max, int *timeout_ms) {
	OtlpTarget *t = userdata;
	fd_set r, w, x;
	int max_fd = -1;
	long due = -1;
	size_t n = 0;

	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_ZERO(&x);
	if (curl_multi_fdset(t->multi, &r, &w, &x, &max_fd) != CURLM_OK)
		return 0;
	for (int fd = 0; fd <= max_fd && n < max; fd++)
		if (FD_ISSET(fd, &r) || FD_ISSET(fd, &w))
			fds[n++] = (struct pollfd){
				.fd = fd,
				.events = (short) ((FD_ISSET(fd, &r) ? POLLIN : 0) | (FD_ISSET(fd, &w) ? POLLOUT : 0)),
			};
	if (curl_multi_timeout(t->multi, &due) == CURLM_OK && due >= 0 && due < *timeout_ms)
		*timeout_ms = (int) due;
	return n;
}

static bool target_idle(void *userdata) {
	OtlpTarget *t = userdata;

	return otlp_batch_count(t->batch) == 0 && !t->queue_head && t->n_in_flight == 0;
}

static bool target_has_room(void *userdata) {
	OtlpTarget *t = userdata;

	return t->queued_events < t->cfg->queue_events;
}

static uint64_t target_oldest_held(void *userdata, uint64_t newest) {
	OtlpTarget *t = userdata;
	uint64_t low = t->abandoned_seq;

	if (otlp_batch_count(t->batch) > 0)
		low = MIN(low, t->batch_first_seq);
	for (const Request *r = t->queue_head; r; r = r->next)
		low = MIN(low, r->first_seq);
	for (size_t i = 0; i < t->n_in_flight; i++)
		low = MIN(low, t->in_flight[i]->first_seq);
	return low;
}

static void target_abandon(void *userdata) {
	OtlpTarget *t = userdata;
	Request *r;

	t->abandoned_seq = target_oldest_held(t, UINT64_MAX);
	t->s.dropped_shutdown += otlp_batch_count(t->batch);
	t->queued_events -= otlp_batch_count(t->batch);
	otlp_batch_clear(t->batch);
	while ((r = queue_pop(t))) {
		t->s.dropped_shutdown += r->count;
		request_free(t, r);
	}
	for (size_t i = 0; i < t->n_in_flight; i++) {
		r = t->in_flight[i];
		curl_multi_remove_handle(t->multi, r->easy);
		t->s.dropped_shutdown += r->count;
		t->in_flight_events -= r->count;
		request_free(t, r);
	}
	t->n_in_flight = 0;
}

static void target_figures(void *userdata, ExportStats *ret) {
	OtlpTarget *t = userdata;

	*ret = t->s;
	ret->dropped = t->s.dropped_queue_full + t->s.dropped_retries + t->s.dropped_refused +
		t->s.dropped_shutdown;
	ret->queued = t->queued_events;
	ret->in_flight = t->in_flight_events;
	ret->in_flight_messages = t->n_in_flight;
}

const ExportTargetType export_target_otlp = {
	.name = "otlp",
	.open = target_open,
	.offer = target_offer,
	.poll = target_poll,
	.flush = target_flush,
	.wait_fds = target_wait_fds,
	.idle = target_idle,
	.oldest_held = target_oldest_held,
	.has_room = target_has_room,
	.abandon = target_abandon,
	.figures = target_figures,
	.close = target_close,
};
