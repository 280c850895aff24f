/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Thread helpers shared by the benchmark consumers. */
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "consumer.h"

int consumer_pin_self(int cpu) {
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

uint64_t thread_cpu_ns(void) {
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}
