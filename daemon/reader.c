/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reader threads: epoll over a CPU group's rings, batch draining, decoding, hand-off to the hub. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "perfrelay-config.h"

#include "cgroup.h"
#include "decode.h"
#include "macro.h"
#include "reader.h"

struct Reader {
	unsigned id;
	CpuSet cpus;
	Ring **rings;
	size_t n_rings;
	CpuStats *cpu_stats;      /* one per ring; written by the thread */
	uint64_t *drained_usec;   /* one per ring; the thread's: when it last consumed records */
	ReaderStats *stats;       /* written by the thread */
	Hub *hub;
	CgroupCache *units;       /* the thread's own: cgroup id -> unit; NULL without cgroup2 */
	unsigned flush_interval_ms;
	int epoll_fd;
	int stop_fd;              /* eventfd: the main thread asks the thread to finish */
	pthread_t thread;
	bool started;
	atomic_int frozen;        /* fault injection only */
};

/* What the record callback needs; lives on the thread's stack for one drain. */
typedef struct DrainCtx {
	Reader *reader;
	CpuStats *cpu;
	uint64_t records, received, lost, malformed, other;
} DrainCtx;

int reader_new(unsigned id, const CpuSet *cpus, Ring **rings, size_t n_rings, Hub *hub, CgroupFs *cgroups,
               unsigned flush_interval_ms, Reader **ret) {
	Reader *r = calloc(1, sizeof(*r));

	if (!r) {
		for (size_t i = 0; i < n_rings; i++)
			ring_free(rings[i]);
		free(rings);
		return -ENOMEM;
	}
	r->id = id;
	r->cpus = *cpus;
	r->rings = rings;
	r->n_rings = n_rings;
	r->hub = hub;
	r->flush_interval_ms = flush_interval_ms;
	r->epoll_fd = r->stop_fd = -EBADF;

	r->cpu_stats = calloc(n_rings ?: 1, sizeof(CpuStats));
	r->drained_usec = calloc(n_rings ?: 1, sizeof(uint64_t));
	r->stats = calloc(1, sizeof(ReaderStats));
	if (!r->cpu_stats || !r->drained_usec || !r->stats) {
		reader_free(r);
		return -ENOMEM;
	}
	if (cgroups) {
		int k = cgroup_cache_new(READER_UNIT_CACHE_ENTRIES, cgroup_fs_resolve, cgroups, &r->units);
		if (k < 0) {
			reader_free(r);
			return k;
		}
	}
	r->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->epoll_fd < 0 || r->stop_fd < 0) {
		int k = negative_errno();
		reader_free(r);
		return k;
	}
	for (size_t i = 0; i <= n_rings; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = i };
		int fd = i < n_rings ? ring_fd(rings[i]) : r->stop_fd;

		if (epoll_ctl(r->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			int k = negative_errno();
			reader_free(r);
			return k;
		}
	}
	*ret = r;
	return 0;
}

Reader *reader_free(Reader *r) {
	if (!r)
		return NULL;
	reader_stop(r);
	for (size_t i = 0; i < r->n_rings; i++)
		ring_free(r->rings[i]);
	free(r->rings);
	free(r->cpu_stats);
	free(r->drained_usec);
	free(r->stats);
	cgroup_cache_free(r->units);
	safe_close(r->epoll_fd);
	safe_close(r->stop_fd);
	free(r);
	return NULL;
}

unsigned reader_id(const Reader *r) { return r->id; }
const CpuSet *reader_cpus(const Reader *r) { return &r->cpus; }
size_t reader_n_rings(const Reader *r) { return r->n_rings; }
const Ring *reader_ring(const Reader *r, size_t i) { return r->rings[i]; }
const CpuStats *reader_cpu_stats(const Reader *r, size_t i) { return &r->cpu_stats[i]; }
const ReaderStats *reader_stats(const Reader *r) { return r->stats; }

void reader_unit_cache_stats(const Reader *r, CgroupCacheStats *ret) {
	if (r->units)
		cgroup_cache_get_stats(r->units, ret);
	else
		*ret = (CgroupCacheStats) {};
}

void reader_set_frozen(Reader *r, int frozen) {
	atomic_store(&r->frozen, frozen);
}

static void on_record(void *userdata, const uint8_t *rec, uint32_t size) {
	DrainCtx *d = userdata;
	ReaderStats *st = d->reader->stats;
	PerfRecordView v;
	DecodedEvent ev;
	DecodeError e;

	d->records++;
	decode_perf_record(rec, size, &v);
	switch (v.kind) {
	case PERF_REC_SAMPLE:
		e = decode_event(v.raw, v.raw_size, &ev);
		if (_likely_(e == DECODE_OK)) {
			Reader *r = d->reader;
			const char *unit = NULL;

			d->received++;
			STAT_ADD(st->received_by_producer[ev.hdr.producer], 1);
			/* Filters and JSON lines need the unit; a cache hit is a hash and a compare,
			 * a miss a syscall pair once per cgroup. Not worth it without clients. */
			if (ev.cgroup_id != 0 && r->units && hub_reader_has_clients(r->hub, r->id))
				unit = cgroup_cache_lookup(r->units, ev.cgroup_id);
			hub_publish(r->hub, r->id, &ev, unit);
			return;
		}
		d->malformed++;
		STAT_ADD(st->malformed_by_reason[e], 1);
		if (v.raw_size >= offsetof(struct perfrelay_hdr, producer) + sizeof(uint32_t)) {
			uint32_t producer;

			memcpy(&producer, v.raw + offsetof(struct perfrelay_hdr, producer), sizeof(producer));
			if (producer < PERFRELAY_MAX_PRODUCERS)
				STAT_ADD(st->malformed_by_producer[producer], 1);
		}
		return;
	case PERF_REC_LOST:
		d->lost += v.lost;
		return;
	case PERF_REC_OTHER:
		d->other++;
		return;
	case PERF_REC_MALFORMED:
		d->malformed++;
		STAT_ADD(st->malformed_by_reason[DECODE_TRUNCATED], 1);
		return;
	}
}

/* Whether a ring trickles: it filled since its last drain (`bytes` and `records` in `elapsed`
 * microseconds) at a pace at which the kernel would not wake the reader within
 * READER_BUSY_FLUSH_MS, but fast enough that a look every READER_BUSY_FLUSH_MS would find at
 * least READER_BUSY_MIN_RECORDS records. */
static bool ring_trickles(const Ring *ring, uint64_t bytes, uint64_t records, uint64_t elapsed_usec) {
	uint64_t window_usec = READER_BUSY_FLUSH_MS * 1000u;

	if (records * window_usec < READER_BUSY_MIN_RECORDS * elapsed_usec)
		return false; /* too few to be worth a wakeup of their own: the idle flush serves them */
	if (ring_watermark(ring) > 0)
		return bytes * window_usec < (uint64_t) ring_watermark(ring) * elapsed_usec;
	return records * window_usec < (uint64_t) ring_wakeup_events(ring) * elapsed_usec;
}

/* Drains every ring of the group that has data, once. Returns 1 if a ring was left with data
 * (its budget ran out), 0 if all were drained; *ret_any tells whether anything was consumed and
 * *ret_trickle whether a ring fills too slowly to wake the reader soon (see ring_trickles()). */
static int drain_all(Reader *r, uint64_t now_usec, bool *ret_any, bool *ret_trickle) {
	bool any = false, more = false, trickle = false;

	hub_reader_begin(r->hub, r->id);
	for (size_t i = 0; i < r->n_rings; i++) {
		DrainCtx d = { .reader = r, .cpu = &r->cpu_stats[i] };
		uint64_t budget = ring_data_size(r->rings[i]) / 2;
		uint64_t skipped;
		int64_t n;

		if (!ring_pending(r->rings[i]))
			continue;
		/* Half a ring per turn keeps one busy CPU from starving the others of the group. */
		n = ring_drain(r->rings[i], budget, on_record, &d, &skipped);
		if (_unlikely_(skipped > 0)) {
			STAT_ADD(d.cpu->corrupt, 1);
			STAT_ADD(d.cpu->corrupt_bytes, skipped);
			any = true;
		}
		if (n > 0) {
			any = true;
			more |= (uint64_t)n >= budget;
			trickle |= ring_trickles(r->rings[i], (uint64_t) n, d.records, now_usec - r->drained_usec[i]);
			r->drained_usec[i] = now_usec;
			STAT_ADD(r->stats->batches, 1);
			STAT_ADD(d.cpu->bytes, (uint64_t)n);
		}
		if (d.received) {
			STAT_ADD(d.cpu->received, d.received);
			STAT_ADD(r->stats->events, d.received);
		}
		if (d.lost)
			STAT_ADD(d.cpu->lost, d.lost);
		if (d.malformed)
			STAT_ADD(d.cpu->malformed, d.malformed);
		if (d.other)
			STAT_ADD(d.cpu->other, d.other);
	}
	hub_reader_end(r->hub, r->id);
	*ret_any = any;
	*ret_trickle = trickle;
	return more;
}

static uint64_t now_usec(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

static void *reader_thread(void *userdata) {
	Reader *r = userdata;
	struct epoll_event evs[64];
	bool stopping = false, any, trickle;
	int timeout = (int)r->flush_interval_ms;
	uint64_t now, trickled_usec = 0; /* when a drain last found a ring trickling */
	char name[16];

	snprintf(name, sizeof(name), "perfrelay-r%u", r->id);
	pthread_setname_np(pthread_self(), name);

	while (!stopping) {
		int n = epoll_wait(r->epoll_fd, evs, ELEMENTSOF(evs), timeout);

		if (n < 0 && errno != EINTR)
			break; /* cannot happen with a valid epoll fd; the watchdog notices the stall */
		for (int i = 0; i < n; i++)
			if (evs[i].data.u64 == r->n_rings)
				stopping = true;

#if PERFRELAY_FAULT_INJECTION
		while (atomic_load(&r->frozen) && !stopping)
			usleep(10000);
#endif
		/* Wakeups and flush timeouts alike drain every ring with data: the timeout is what
		 * delivers records that stay below the watermark. After a drain we sleep until the
		 * next watermark wakeup, like libbpf, unless a ring's budget ran out, or unless
		 * records trickle in too slowly to reach the watermark soon: then the next look is
		 * READER_BUSY_FLUSH_MS away instead of the idle flush interval, for as long as
		 * trickles keep coming within READER_BUSY_HOLD_MS (producers emit in bursts, and a
		 * look between two bursts finds nothing). */
		now = now_usec();
		if (drain_all(r, now, &any, &trickle))
			timeout = 0;
		else {
			if (trickle)
				trickled_usec = now;
			if (trickled_usec > 0 && now - trickled_usec < READER_BUSY_HOLD_MS * 1000u)
				timeout = (int) MIN(r->flush_interval_ms, READER_BUSY_FLUSH_MS);
			else
				timeout = (int) r->flush_interval_ms;
		}
		if (any)
			STAT_ADD(r->stats->wakeups, 1);
		STAT_ADD(r->stats->progress, 1);
		STAT_STORE(r->stats->alive_usec, now_usec());
	}
	/* Last drain after the stop request, so what was published before it is not lost; bounded,
	 * because producers that keep emitting would otherwise keep us here forever. */
	for (unsigned pass = 0; pass < 64; pass++)
		if (!drain_all(r, now_usec(), &any, &trickle) && !any)
			break;
	return NULL;
}

int reader_start(Reader *r) {
	pthread_attr_t attr;
	cpu_set_t set, allowed;
	int k;

	/* Alive from the start: the watchdog measures from here until the first loop ends. */
	STAT_STORE(r->stats->alive_usec, now_usec());
	CPU_ZERO(&set);
	for (int c = cpuset_next(&r->cpus, 0); c >= 0 && c < CPU_SETSIZE; c = cpuset_next(&r->cpus, c + 1))
		CPU_SET(c, &set);
	/* Only where the daemon was allowed to run (taskset, systemd's CPUAffinity=): whoever
	 * started it may have kept CPUs for other work. If none of the group's CPUs is allowed,
	 * the reader runs on the allowed ones and reads its rings from there. */
	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
		cpu_set_t both;

		CPU_AND(&both, &set, &allowed);
		set = CPU_COUNT(&both) > 0 ? both : allowed;
	}

	pthread_attr_init(&attr);
	/* Pinned to its group's CPUs: their rings' data is hot in the shared cache. */
	pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	k = pthread_create(&r->thread, &attr, reader_thread, r);
	pthread_attr_destroy(&attr);
	if (k != 0)
		return -k;
	r->started = true;
	return 0;
}

void reader_stop(Reader *r) {
	uint64_t one = 1;

	if (!r->started)
		return;
	(void)!write(r->stop_fd, &one, sizeof(one));
	pthread_join(r->thread, NULL);
	r->started = false;
}
