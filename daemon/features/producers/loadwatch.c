/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The watch of BPF program loads (loadwatch.h): a PERF_RECORD_BPF_EVENT ring per CPU and the
 * thread that reads them. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "features/producers/loadwatch.h"
#include "decode/producer-scan.h"
#include "core/reader.h"
#include "kernel/ring.h"

/* A load record is 32 bytes: a page holds 128 loads between two wakeups of the thread. */
#define LOAD_WATCH_PAGES    1u
/* Programs held for the next scan; beyond, a load is not held (counted as missed). */
#define LOAD_WATCH_HELD_MAX 1024u
#define STOP_KEY            UINT64_MAX

struct LoadWatch {
	unsigned n_cpus;
	/* Rings by CPU: stored by the main thread (release) before their fd joins the epoll set,
	 * read by the thread (acquire); freed only after the thread stopped. */
	_Atomic(Ring *) *rings;
	unsigned n_rings; /* main thread */
	Decoders *decoders;
	uint32_t events_map_id;
	int epoll_fd;
	int stop_fd;
	int nice;
	pthread_t thread;
	bool started;
	/* The programs held since the last load_watch_take(), under lock. */
	pthread_mutex_t lock;
	int *held;
	size_t n_held;
	_Atomic uint64_t loads, missed;
};

static void hold(LoadWatch *w, int fd) {
	pthread_mutex_lock(&w->lock);
	if (w->n_held < LOAD_WATCH_HELD_MAX) {
		w->held[w->n_held++] = fd;
		fd = -EBADF;
	}
	pthread_mutex_unlock(&w->lock);
	if (fd >= 0) {
		close(fd);
		atomic_fetch_add(&w->missed, 1);
	}
}

/* A program loaded: if it writes into the events map, held open (its BTF with it, so that a
 * producer that unloads at once is still described), and the load noted for the readers
 * before the ring's tail moves past its record. */
static void on_program_load(LoadWatch *w, uint32_t id) {
	int fd = bpf_prog_get_fd_by_id(id);

	if (fd < 0) {
		/* Gone already. Whether it was a producer nobody can tell any more. */
		atomic_fetch_add(&w->missed, 1);
		return;
	}
	if (producers_prog_uses_map(fd, w->events_map_id) <= 0) {
		close(fd);
		return;
	}
	atomic_fetch_add(&w->loads, 1);
	hold(w, fd);
	decoders_note_load(w->decoders);
	decoders_want_scan(w->decoders);
}

static bool on_record(void *userdata, const uint8_t *rec, uint32_t size) {
	const struct perf_event_header *h = (const void *) rec;
	struct {
		struct perf_event_header header;
		uint16_t type;
		uint16_t flags;
		uint32_t id;
		uint8_t tag[8];
	} ev;
	LoadWatch *w = userdata;

	if (h->type == PERF_RECORD_BPF_EVENT && size >= sizeof(ev)) {
		memcpy(&ev, rec, sizeof(ev));
		if (ev.type == PERF_BPF_EVENT_PROG_LOAD)
			on_program_load(w, ev.id);
	} else if (h->type == PERF_RECORD_LOST)
		atomic_fetch_add(&w->missed, 1); /* loads of some programs; at least one */
	return true;
}

static void *watch_thread(void *userdata) {
	LoadWatch *w = userdata;
	struct epoll_event evs[16];
	int e;

	/* It must open a program before a quick producer unloads it: a reader's priority. Without
	 * CAP_SYS_NICE it runs at the daemon's (the readers say so). */
	(void) reader_schedule((pid_t) syscall(SYS_gettid), w->nice, 0, &e);

	for (;;) {
		int n = epoll_wait(w->epoll_fd, evs, ELEMENTSOF(evs), -1);

		for (int i = 0; i < n; i++) {
			uint64_t skipped;
			Ring *ring;

			if (evs[i].data.u64 == STOP_KEY)
				return NULL;
			ring = atomic_load_explicit(&w->rings[evs[i].data.u64], memory_order_acquire);
			if (ring)
				(void) ring_drain(ring, 0, on_record, w, &skipped);
		}
	}
}

/* Side-band records wake by watermark only (wakeup_events counts samples): one byte. */
static const RingOptions ring_options = { .pages = LOAD_WATCH_PAGES, .bpf_events = true, .watermark = 1 };

static int open_ring(LoadWatch *w, unsigned cpu) {
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = cpu };
	Ring *ring;
	int r;

	r = ring_open(cpu, &ring_options, &ring);
	if (r < 0)
		return r;
	atomic_store_explicit(&w->rings[cpu], ring, memory_order_release);
	if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, ring_fd(ring), &ev) < 0)
		return -errno; /* the ring stays, unwatched: freed with the rest */
	w->n_rings++;
	decoders_set_watch(w->decoders, cpu, ring);
	return 0;
}

int load_watch_new(unsigned n_cpus, uint32_t events_map_id, Decoders *decoders, int nice, LoadWatch **ret) {
	_cleanup_(load_watch_freep) LoadWatch *w = calloc(1, sizeof(*w));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = STOP_KEY };
	int r;

	if (!w)
		return -ENOMEM;
	w->n_cpus = n_cpus;
	w->nice = nice;
	w->decoders = decoders;
	w->events_map_id = events_map_id;
	w->epoll_fd = w->stop_fd = -EBADF;
	pthread_mutex_init(&w->lock, NULL);
	w->rings = calloc(n_cpus ?: 1, sizeof(*w->rings));
	w->held = calloc(LOAD_WATCH_HELD_MAX, sizeof(int));
	if (!w->rings || !w->held)
		return -ENOMEM;
	for (unsigned i = 0; i < n_cpus; i++)
		atomic_init(&w->rings[i], NULL);
	w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->epoll_fd < 0 || w->stop_fd < 0)
		return -errno;
	if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->stop_fd, &ev) < 0)
		return -errno;
	/* Offline CPUs fail: they get theirs when they come online. */
	for (unsigned cpu = 0; cpu < n_cpus; cpu++)
		(void) open_ring(w, cpu);
	if (w->n_rings == 0)
		return -ENODEV;
	r = pthread_create(&w->thread, NULL, watch_thread, w);
	if (r != 0)
		return -r;
	w->started = true;
	(void) pthread_setname_np(w->thread, "perfrelay-loads");
	*ret = TAKE_PTR(w);
	return 0;
}

LoadWatch *load_watch_free(LoadWatch *w) {
	uint64_t one = 1;

	if (!w)
		return NULL;
	if (w->started) {
		(void) !write(w->stop_fd, &one, sizeof(one));
		pthread_join(w->thread, NULL);
	}
	for (unsigned i = 0; w->rings && i < w->n_cpus; i++)
		ring_free(atomic_load(&w->rings[i]));
	free(w->rings);
	for (size_t i = 0; i < w->n_held; i++)
		close(w->held[i]);
	free(w->held);
	safe_close(w->epoll_fd);
	safe_close(w->stop_fd);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
}

void load_watch_cpu_online(LoadWatch *w, unsigned cpu) {
	if (w && cpu < w->n_cpus && !atomic_load(&w->rings[cpu]))
		(void) open_ring(w, cpu);
}

unsigned load_watch_n_rings(const LoadWatch *w) {
	return w ? w->n_rings : 0;
}

size_t load_watch_take(LoadWatch *w, int *fds, size_t max) {
	size_t n;

	if (!w)
		return 0;
	pthread_mutex_lock(&w->lock);
	n = MIN(w->n_held, max);
	memcpy(fds, w->held, n * sizeof(int));
	memmove(w->held, w->held + n, (w->n_held - n) * sizeof(int));
	w->n_held -= n;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void load_watch_stats(const LoadWatch *w, uint64_t *ret_loads, uint64_t *ret_missed) {
	*ret_loads = w ? atomic_load(&((LoadWatch *) w)->loads) : 0;
	*ret_missed = w ? atomic_load(&((LoadWatch *) w)->missed) : 0;
}
