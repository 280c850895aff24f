/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libbpf perf_buffer consumers for the baseline rows: counting callbacks and a poll thread. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <linux/perf_event.h>

#include "event.h"
#include "load.h"
#include "macro.h"
#include "perfbuf.h"
#include "kernel/perfring-open.h"

/* Only for noticing the stop request: wakeups come from the rings. */
#define PERFBUF_POLL_MS 20

struct Perfbuf {
	struct perf_buffer *pb;
	int cpu;
	pthread_t thread;
	bool started;
	atomic_bool stop;
	ConsumerResult result; /* written by the thread, read after the join */
};

static void sample(Perfbuf *p, const void *data, size_t size) {
	uint64_t ts;

	/* Counting is all a baseline callback does; one record in LATENCY_SAMPLE_EVERY also
	 * pays for a clock read. */
	if (_likely_(p->result.events++ % LATENCY_SAMPLE_EVERY != 0))
		return;
	if (size < sizeof(struct perfrelay_hdr))
		return;
	memcpy(&ts, (const uint8_t *) data + offsetof(struct perfrelay_hdr, ts_ns), sizeof(ts));
	histogram_add(&p->result.latency, boottime_ns() - ts);
}

static enum bpf_perf_event_ret on_raw_event(void *ctx, int cpu, struct perf_event_header *e) {
	Perfbuf *p = ctx;
	const uint8_t *rec = (const uint8_t *) e;
	uint32_t size;
	uint64_t lost;

	if (e->type == PERF_RECORD_SAMPLE) {
		/* perf_event_header, u32 size, then the raw bytes (PERF_SAMPLE_RAW). */
		memcpy(&size, rec + sizeof(*e), sizeof(size));
		sample(p, rec + sizeof(*e) + sizeof(size), size);
	} else if (e->type == PERF_RECORD_LOST) {
		/* perf_event_header, u64 id, u64 lost. */
		memcpy(&lost, rec + sizeof(*e) + sizeof(uint64_t), sizeof(lost));
		p->result.lost += lost;
	}
	return LIBBPF_PERF_EVENT_CONT;
}

static void on_sample(void *ctx, int cpu, void *data, __u32 size) {
	sample(ctx, data, size);
}

static void on_lost(void *ctx, int cpu, __u64 count) {
	Perfbuf *p = ctx;

	p->result.lost += count;
}

static void *perfbuf_thread(void *userdata) {
	Perfbuf *p = userdata;
	uint64_t cpu0;
	int r;

	r = consumer_pin_self(p->cpu);
	if (r < 0) {
		p->result.error = r;
		return NULL;
	}
	cpu0 = thread_cpu_ns();
	while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
		r = perf_buffer__poll(p->pb, PERFBUF_POLL_MS);
		if (r < 0 && r != -EINTR) {
			p->result.error = r;
			break;
		}
	}
	/* What the producer published before it stopped. */
	r = perf_buffer__consume(p->pb);
	if (r < 0 && p->result.error == 0)
		p->result.error = r;
	p->result.cpu_ns = thread_cpu_ns() - cpu0;
	return NULL;
}

Perfbuf *perfbuf_free(Perfbuf *p) {
	if (!p)
		return NULL;
	if (p->started) {
		atomic_store(&p->stop, true);
		pthread_join(p->thread, NULL);
	}
	perf_buffer__free(p->pb);
	free(p);
	return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Perfbuf *, perfbuf_free);

int perfbuf_start(int map_fd, PerfbufKind kind, unsigned pages, uint32_t watermark, int cpu, Perfbuf **ret) {
	_cleanup_(perfbuf_freep) Perfbuf *p = NULL;
	long page = sysconf(_SC_PAGESIZE);
	int r;

	if (pages == 0 || (pages & (pages - 1)))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cpu = cpu;

	if (kind == PERFBUF_RAW) {
		/* Exactly what perfrelayd's ring_open() asks for (perfring-open.h). */
		struct perf_event_attr attr;

		perf_ring_attr(
			&(PerfRingAttr){ .pages = pages,
					 .watermark = watermark ?: (uint32_t) ((uint64_t) page * pages / 4) },
			&attr);
		LIBBPF_OPTS(perf_buffer_raw_opts, o);

		p->pb = perf_buffer__new_raw(map_fd, pages, &attr, on_raw_event, p, &o);
	} else
		p->pb = perf_buffer__new(map_fd, pages, on_sample, on_lost, p, NULL);
	if (!p->pb)
		return negative_errno();

	r = -pthread_create(&p->thread, NULL, perfbuf_thread, p);
	if (r < 0)
		return r;
	p->started = true;
	*ret = TAKE_PTR(p);
	return 0;
}

void perfbuf_stop(Perfbuf *p, ConsumerResult *ret) {
	if (p->started) {
		atomic_store(&p->stop, true);
		pthread_join(p->thread, NULL);
		p->started = false;
	}
	*ret = p->result;
}
