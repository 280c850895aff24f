/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Load threads: pinned, started together, paced by the monotonic clock. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "load.h"
#include "macro.h"

/* A thread that fell behind (preempted) catches up at most this much at once, so that a stall
 * does not turn into a burst the size of the stall. */
#define LOAD_MAX_BACKLOG_NS 200000u

typedef struct LoadThread {
	pthread_t thread;
	int cpu;
	double calls_per_ns;       /* this thread's share; 0 = unpaced */
	uint64_t start_ns, end_ns; /* common to all threads */
	uint64_t calls;            /* result */
	uint64_t finished_ns;      /* result */
} LoadThread;

uint64_t now_ns(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

uint64_t boottime_ns(void) {
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static void *load_thread(void *userdata) {
	LoadThread *t = userdata;
	/* skipped: calls given up after a stall (see LOAD_MAX_BACKLOG_NS). */
	double max_backlog = (double) LOAD_MAX_BACKLOG_NS * t->calls_per_ns, skipped = 0;
	uint64_t calls = 0, now;

	while ((now = now_ns()) < t->start_ns)
		;
	for (;;) {
		now = now_ns();
		if (now >= t->end_ns)
			break;
		if (t->calls_per_ns > 0) {
			double behind = (double) (now - t->start_ns) * t->calls_per_ns -
				((double) calls + skipped);

			if (behind < 1)
				continue; /* ahead of schedule: spin, so that calls stay evenly spaced */
			if (behind > max_backlog + 1)
				skipped += behind - max_backlog - 1;
		}
		syscall(SYS_getpgid, 0);
		calls++;
	}
	t->calls = calls;
	t->finished_ns = now;
	return NULL;
}

int load_run(const LoadOptions *o, LoadResult *ret) {
	unsigned n = cpuset_count(o->cpus), i = 0;
	_cleanup_free_ LoadThread *threads = NULL;
	uint64_t start, end = 0, calls = 0;
	int r = 0;

	if (n == 0)
		return -EINVAL;
	threads = calloc(n, sizeof(*threads));
	if (!threads)
		return -ENOMEM;
	/* Far enough ahead that every thread is running and pinned before the start. */
	start = now_ns() + 20000000u;
	for (int cpu = cpuset_next(o->cpus, 0); cpu >= 0; cpu = cpuset_next(o->cpus, cpu + 1), i++) {
		pthread_attr_t attr;
		cpu_set_t set;

		threads[i] = (LoadThread){
			.cpu = cpu,
			.calls_per_ns = o->calls_per_s / 1e9 / n,
			.start_ns = start,
			.end_ns = start + o->duration_ns,
		};
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		pthread_attr_init(&attr);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
		r = -pthread_create(&threads[i].thread, &attr, load_thread, &threads[i]);
		pthread_attr_destroy(&attr);
		if (r < 0) {
			/* The started ones end at end_ns by themselves. */
			for (unsigned k = 0; k < i; k++)
				pthread_join(threads[k].thread, NULL);
			return r;
		}
	}
	for (i = 0; i < n; i++) {
		pthread_join(threads[i].thread, NULL);
		calls += threads[i].calls;
		end = MAX(end, threads[i].finished_ns);
	}
	*ret = (LoadResult){ .calls = calls, .elapsed_ns = end - start };
	return 0;
}
