/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* hub.c under real concurrency (and ThreadSanitizer in build-tsan): reader threads publish while
 * the main thread flushes, reads statistics, attaches and detaches clients; every client ends
 * with offered = sent + dropped, sent = the events its peer read, per-CPU order, and (drop
 * clients) "lost" notices that add up to the drops, (disconnect clients) nothing after the first
 * loss and no notice. */

#include <endian.h>
#include <inttypes.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hub/hub.h"
#include "macro.h"

#include "unit-test.h"

#define N_READERS         2u
#define EVENTS_PER_READER 20000u
#define BATCH             64u
#define MIN_CHURNED       20u

static Hub *hub;
static atomic_uint readers_done;
static atomic_bool enough_churn;       /* main: readers may stop once they published their share */
static atomic_uint_fast64_t published; /* events, all readers */

typedef struct Peer {
	HubClient *c;
	HubFormat format;
	HubOverflow overflow;
	int fds[2]; /* [0]: the hub writes, [1]: the test reads */
	uint8_t *buf;
	size_t len, size;
} Peer;

static void peer_new(Peer *p, HubFormat format, HubOverflow overflow, uint64_t queue_bytes) {
	HubClientOptions o = { .format = format, .overflow = overflow, .queue_bytes = queue_bytes };

	*p = (Peer){ .format = format, .overflow = overflow, .size = 64u << 20 };
	p->buf = malloc(p->size);
	ASSERT(p->buf);
	ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p->fds) == 0);
	ASSERT(hub_client_new(hub, p->fds[0], &o, &p->c) == 0);
	ASSERT(hub_client_attach(hub, p->c) == 0);
}

/* One flush, then whatever it wrote into p->buf. Returns the flush's result. */
static int peer_pump_once(Peer *p) {
	int r = hub_client_flush(p->c);
	ssize_t n;

	ASSERT(r >= 0);
	while ((n = read(p->fds[1], p->buf + p->len, p->size - p->len)) > 0)
		p->len += (size_t) n;
	return r;
}

static void peer_pump(Peer *p) {
	while (peer_pump_once(p) == 0)
		;
}

typedef struct Seen {
	uint64_t events, lost_notices, lost;
	uint64_t next_seq[N_READERS]; /* per CPU (= reader here): the seq the next event must have at least */
	bool gap;                     /* a seq skipped on some CPU */
} Seen;

static void seen_event(Seen *s, uint32_t cpu, uint64_t seq) {
	ASSERT(cpu < N_READERS);
	ASSERT(seq >= s->next_seq[cpu]); /* per-CPU order, no duplicate */
	if (seq != s->next_seq[cpu])
		s->gap = true;
	s->next_seq[cpu] = seq + 1;
	s->events++;
}

/* Parses the whole frames the peer read; a partly written last frame is not an event. */
static Seen peer_parse(const Peer *p) {
	Seen s = {};
	size_t pos = 0;

	if (p->format == HUB_FORMAT_BINARY) {
		while (p->len - pos >= sizeof(uint32_t)) {
			uint32_t len;
			struct perfrelay_hdr hdr;

			memcpy(&len, p->buf + pos, sizeof(len));
			len = le32toh(len);
			if (p->len - pos - sizeof(len) < len)
				break;
			ASSERT(len >= sizeof(hdr));
			memcpy(&hdr, p->buf + pos + sizeof(len), sizeof(hdr));
			if (hdr.type == PERFRELAY_TYPE_LOST) {
				uint64_t count;

				memcpy(&count, p->buf + pos + sizeof(len) + sizeof(hdr), sizeof(count));
				s.lost_notices++;
				s.lost += count;
			} else
				seen_event(&s, hdr.cpu, hdr.seq);
			pos += sizeof(len) + len;
		}
		return s;
	}
	for (;;) {
		const uint8_t *nl = memchr(p->buf + pos, '\n', p->len - pos);
		_cleanup_free_ char *line = NULL;
		struct json_object *o, *v;
		const char *type;

		if (!nl)
			break;
		line = strndup((const char *) p->buf + pos, (size_t) (nl - (p->buf + pos)));
		ASSERT(line);
		o = json_tokener_parse(line);
		ASSERT(o);
		ASSERT(json_object_object_get_ex(o, "type", &v));
		type = json_object_get_string(v);
		if (streq(type, "lost")) {
			ASSERT(json_object_object_get_ex(o, "count", &v));
			s.lost_notices++;
			s.lost += (uint64_t) json_object_get_int64(v);
		} else {
			struct json_object *cpu, *seq;

			ASSERT(json_object_object_get_ex(o, "cpu", &cpu));
			ASSERT(json_object_object_get_ex(o, "seq", &seq));
			seen_event(
				&s,
				(uint32_t) json_object_get_int64(cpu),
				(uint64_t) json_object_get_int64(seq));
		}
		json_object_put(o);
		pos = (size_t) (nl - p->buf) + 1;
	}
	return s;
}

/* The client will never be written again: what is queued is dropped. Checks the accounting. */
static Seen peer_finish(Peer *p) {
	HubClientStats st;
	Seen s;

	hub_client_detach(hub, p->c);
	hub_client_discard(p->c);
	hub_client_get_stats(p->c, &st);
	s = peer_parse(p);
	if (st.offered != st.sent + st.dropped || st.sent != s.events)
		fprintf(stderr,
			"format %d overflow %d: offered %" PRIu64 " queued %" PRIu64 " sent %" PRIu64
			" dropped %" PRIu64 ", read %" PRIu64 " events %" PRIu64 " notices %" PRIu64 " lost\n",
			p->format,
			p->overflow,
			st.offered,
			st.queued,
			st.sent,
			st.dropped,
			s.events,
			s.lost_notices,
			s.lost);
	ASSERT(st.offered == st.sent + st.dropped);
	ASSERT(st.sent == s.events);
	ASSERT(st.queued_bytes == 0);
	if (p->overflow == HUB_OVERFLOW_DISCONNECT) {
		ASSERT(s.lost_notices == 0);
		ASSERT(!s.gap); /* nothing after its first loss on any CPU */
	}
	hub_client_free(p->c);
	close(p->fds[0]);
	close(p->fds[1]);
	free(p->buf);
	p->c = NULL;
	return s;
}

static void *reader_main(void *userdata) {
	unsigned id = (unsigned) (uintptr_t) userdata;

	uint64_t seq = 0;

	/* EVENTS_PER_READER events, then empty batches (the "lost" notices' path) until the
	 * main thread has seen enough clients come and go. */
	while (seq < EVENTS_PER_READER || !atomic_load(&enough_churn)) {
		hub_reader_begin(hub, id);
		for (unsigned i = 0; i < BATCH && seq < EVENTS_PER_READER; i++, seq++) {
			struct perfrelay_open r = {
				.hdr = {
					.magic = PERFRELAY_MAGIC,
					.version = PERFRELAY_VERSION,
					.type = PERFRELAY_TYPE_OPEN,
					.size = sizeof(r),
					.producer = PERFRELAY_PRODUCER_OPEN,
					.cpu = id,
					.seq = seq,
					.ts_ns = seq,
				},
				.pid = 42,
				.result = 3,
			};
			DecodedEvent ev;

			strcpy(r.comm, "stress");
			strcpy(r.path, "/stress");
			ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
			hub_publish(
				hub, id, &ev, &(HubOrigin){ .unit = (seq & 1) ? "stress.service" : NULL }, NULL);
		}
		hub_reader_end(hub, id);
		if (seq >= EVENTS_PER_READER)
			sched_yield();
	}
	atomic_fetch_add(&published, seq);
	atomic_fetch_add(&readers_done, 1);
	return NULL;
}

int main(void) {
	pthread_t threads[N_READERS];
	Peer fast_json, fast_bin, slow, quitter, churn = {};
	bool quitter_draining = false, quitter_done = false;
	uint64_t churned = 0;
	Seen s;

	ASSERT(hub_new(N_READERS, &hub) == 0);
	/* Fast clients have room for everything: they lose nothing. */
	peer_new(&fast_json, HUB_FORMAT_JSON, HUB_OVERFLOW_DROP, 64u << 20);
	peer_new(&fast_bin, HUB_FORMAT_BINARY, HUB_OVERFLOW_DROP, 64u << 20);
	/* The smallest queues, read now and then: they lose events. */
	peer_new(&slow, HUB_FORMAT_JSON, HUB_OVERFLOW_DROP, 0);
	peer_new(&quitter, HUB_FORMAT_BINARY, HUB_OVERFLOW_DISCONNECT, 0);

	for (unsigned i = 0; i < N_READERS; i++)
		ASSERT(pthread_create(&threads[i], NULL, reader_main, (void *) (uintptr_t) i) == 0);

	for (unsigned iter = 0; atomic_load(&readers_done) < N_READERS; iter++) {
		struct pollfd pfd = { .fd = hub_notify_fd(hub), .events = POLLIN };
		HubClientStats st;

		if (!hub_prepare_sleep(hub))
			(void) poll(&pfd, 1, 1);
		peer_pump_once(&fast_json);
		peer_pump_once(&fast_bin);
		if (iter % 16 == 0)
			peer_pump_once(&slow);
		hub_client_get_stats(slow.c, &st); /* statistics while readers write them */
		ASSERT(st.offered >= st.sent + st.dropped);

		/* The server's way: an overflowed client is detached, drained, then closed. */
		if (!quitter_done && hub_client_overflowed(quitter.c)) {
			if (!quitter_draining) {
				hub_client_detach(hub, quitter.c);
				quitter_draining = true;
			}
			if (peer_pump_once(&quitter) > 0) {
				peer_finish(&quitter);
				quitter_done = true;
			}
		}

		/* A client that comes and goes; every other one leaves with its queue unwritten. */
		if (iter % 2 == 0) {
			if (churn.c) {
				if (churned % 2)
					peer_pump(&churn);
				else
					peer_pump_once(&churn);
				peer_finish(&churn);
				if (++churned >= MIN_CHURNED)
					atomic_store(&enough_churn, true);
			} else
				peer_new(
					&churn,
					churned % 2 ? HUB_FORMAT_BINARY : HUB_FORMAT_JSON,
					HUB_OVERFLOW_DROP,
					0);
		}
	}
	for (unsigned i = 0; i < N_READERS; i++)
		ASSERT(pthread_join(threads[i], NULL) == 0);

	/* The readers are gone: a last empty batch from here queues the notices of the last
	 * losses, as a reader's next batch would. */
	peer_pump(&slow);
	for (unsigned i = 0; i < N_READERS; i++) {
		hub_reader_begin(hub, i);
		hub_reader_end(hub, i);
	}
	peer_pump(&fast_json);
	peer_pump(&fast_bin);
	peer_pump(&slow);

	s = peer_finish(&fast_json);
	ASSERT(s.events == atomic_load(&published) && !s.gap && s.lost_notices == 0);
	s = peer_finish(&fast_bin);
	ASSERT(s.events == atomic_load(&published) && !s.gap && s.lost_notices == 0);
	{
		HubClientStats st;

		hub_client_get_stats(slow.c, &st);
		s = peer_finish(&slow);
		ASSERT(st.dropped > 0);       /* the path under test ran */
		ASSERT(s.lost == st.dropped); /* every drop was told */
		ASSERT(st.offered == atomic_load(&published));
	}
	ASSERT(quitter_done || hub_client_overflowed(quitter.c));
	if (!quitter_done) {
		hub_client_detach(hub, quitter.c);
		peer_pump(&quitter);
		peer_finish(&quitter);
	}
	if (churn.c)
		peer_finish(&churn);
	ASSERT(churned >= MIN_CHURNED);
	hub_free(hub);
	printf("%u events per reader, %" PRIu64 " churned clients, %d failures\n",
	       EVENTS_PER_READER,
	       churned,
	       failures);
	return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
