/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Benchmark subscribers on perfrelayd's event socket (libperfrelay), one thread each. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "macro.h"
#include "subscriber.h"

/* How long a read waits before the thread looks at its stop conditions again. */
#define SUBSCRIBER_POLL_MS 20

struct Subscriber {
	perfrelay_client *client;
	enum perfrelay_format format;
	int cpu;
	pthread_t thread;
	bool started;
	/* Set by the main thread after the load: UINT64_MAX until then. */
	_Atomic uint64_t expected;
	_Atomic uint64_t deadline_ns;
	ConsumerResult result; /* written by the thread, read after the join */
};

/* The decimal number after `key` in a JSON line, or 0. The daemon writes "type" then "ts" first,
 * so the search ends within the first few dozen bytes. */
static uint64_t json_number(const char *line, size_t len, const char *key) {
	const char *p = memmem(line, len, key, strlen(key)), *end = line + len;
	uint64_t v = 0;

	if (!p)
		return 0;
	for (p += strlen(key); p < end && *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (uint64_t) (*p - '0');
	return v;
}

static void on_json(Subscriber *s, const char *line, size_t len) {
	static const char lost[] = "{\"type\":\"lost\"";

	if (_unlikely_(len >= sizeof(lost) - 1 && memcmp(line, lost, sizeof(lost) - 1) == 0)) {
		s->result.lost += json_number(line, len, "\"count\":");
		return;
	}
	if (_likely_(s->result.events++ % LATENCY_SAMPLE_EVERY != 0))
		return;
	histogram_add(&s->result.latency, boottime_ns() - json_number(line, len, "\"ts\":"));
}

static void on_record(Subscriber *s, const struct perfrelay_hdr *h, const void *payload, size_t size) {
	if (_unlikely_(h->type == PERFRELAY_TYPE_LOST)) {
		uint64_t n;

		if (size >= sizeof(n)) {
			memcpy(&n, payload, sizeof(n));
			s->result.lost += n;
		}
		return;
	}
	if (_likely_(s->result.events++ % LATENCY_SAMPLE_EVERY != 0))
		return;
	histogram_add(&s->result.latency, boottime_ns() - h->ts_ns);
}

static bool subscriber_done(Subscriber *s) {
	uint64_t expected = atomic_load_explicit(&s->expected, memory_order_acquire);

	if (s->result.events + s->result.lost >= expected) {
		s->result.complete = s->result.events + s->result.lost == expected;
		return true;
	}
	return expected != UINT64_MAX &&
		now_ns() >= atomic_load_explicit(&s->deadline_ns, memory_order_relaxed);
}

static void *subscriber_thread(void *userdata) {
	Subscriber *s = userdata;
	uint64_t cpu0, n = 0;
	int r;

	r = consumer_pin_self(s->cpu);
	if (r < 0) {
		s->result.error = r;
		return NULL;
	}
	cpu0 = thread_cpu_ns();
	for (;;) {
		if (s->format == PERFRELAY_FORMAT_JSON) {
			const char *line;
			size_t len;

			r = perfrelay_next_json(s->client, &line, &len, SUBSCRIBER_POLL_MS);
			if (r > 0)
				on_json(s, line, len);
		} else {
			const struct perfrelay_hdr *h;
			const void *payload;
			size_t size;

			r = perfrelay_next_record(s->client, &h, &payload, &size, SUBSCRIBER_POLL_MS);
			if (r > 0)
				on_record(s, h, payload, size);
		}
		if (r < 0 && r != -EINTR) {
			s->result.error = r;
			break;
		}
		/* The stop conditions cost an atomic load: look at them on every timeout and
		 * every so often while events flow. */
		if ((r == 0 || ++n % 1024 == 0) && subscriber_done(s))
			break;
	}
	s->result.cpu_ns = thread_cpu_ns() - cpu0;
	return NULL;
}

Subscriber *subscriber_free(Subscriber *s) {
	if (!s)
		return NULL;
	if (s->started) {
		atomic_store(&s->deadline_ns, 0);
		atomic_store(&s->expected, 0);
		pthread_join(s->thread, NULL);
	}
	perfrelay_close(s->client);
	free(s);
	return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Subscriber *, subscriber_free);

int subscriber_start(const char *socket_path, enum perfrelay_format format, int cpu, Subscriber **ret) {
	static const char *const types[] = { "bench" };
	struct perfrelay_subscription sub = {
		.types = types,
		.n_types = 1,
		.format = format,
		.on_overflow = PERFRELAY_OVERFLOW_DROP,
	};
	_cleanup_(subscriber_freep) Subscriber *s = NULL;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->format = format;
	s->cpu = cpu;
	atomic_init(&s->expected, UINT64_MAX);
	atomic_init(&s->deadline_ns, UINT64_MAX);
	r = perfrelay_client_new(&s->client);
	if (r < 0)
		return r;
	r = perfrelay_connect(s->client, socket_path, &sub);
	if (r < 0)
		return r;
	r = -pthread_create(&s->thread, NULL, subscriber_thread, s);
	if (r < 0)
		return r;
	s->started = true;
	*ret = TAKE_PTR(s);
	return 0;
}

void subscriber_finish(Subscriber *s, uint64_t expected, uint64_t deadline_ns, ConsumerResult *ret) {
	if (s->started) {
		atomic_store_explicit(&s->deadline_ns, deadline_ns, memory_order_relaxed);
		atomic_store_explicit(&s->expected, expected, memory_order_release);
		pthread_join(s->thread, NULL);
		s->started = false;
	}
	*ret = s->result;
}

uint64_t subscriber_client_id(const Subscriber *s) {
	return perfrelay_client_hello(s->client)->client_id;
}

int subscriber_fence(const char *socket_path) {
	/* A built-in probe type: the benchmark runs the daemon with Probes=none. Even if some
	 * came, the connection is closed right after the hello. */
	static const char *const types[] = { "exec" };
	struct perfrelay_subscription sub = { .types = types, .n_types = 1 };
	perfrelay_client *c = NULL;
	int r;

	r = perfrelay_client_new(&c);
	if (r < 0)
		return r;
	r = perfrelay_connect(c, socket_path, &sub);
	perfrelay_close(c);
	return r;
}
