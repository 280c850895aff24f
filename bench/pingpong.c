/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The counters' cost (docs/counters.md): two threads (or, with "processes", two processes) pass
 * a byte back and forth over two pipes for a while, both pinned to the same CPU so that every
 * pass is a context switch, and the rate of switches is printed as JSON. bench.py runs it beside
 * a daemon with counters on and off: the ratio is what the sched_switch program costs a
 * switch-heavy workload. Threads of one process share the running slice's owner, so their
 * switches cost the program a comparison; processes make it read the counters at each one. */
#include <signal.h>
#include <sys/wait.h>
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2];
static volatile int stop;

static double now(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void pin(int cpu) {
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	(void) sched_setaffinity(0, sizeof(set), &set);
}

static int cpu_arg = -1;

static void *echo(void *arg) {
	char c;

	pin(cpu_arg);
	while (read(ping[0], &c, 1) == 1 && c != 'q')
		if (write(pong[1], &c, 1) != 1)
			break;
	return NULL;
}

int main(int argc, char *argv[]) {
	double duration = argc > 1 ? atof(argv[1]) : 2.0, start, end;
	unsigned long long trips = 0;
	pthread_t t;
	char c = 'x';

	bool processes = argc > 3 && strcmp(argv[3], "processes") == 0;
	pid_t child = -1;

	cpu_arg = argc > 2 ? atoi(argv[2]) : -1;
	if (duration <= 0 || pipe(ping) < 0 || pipe(pong) < 0) {
		fprintf(stderr, "usage: pingpong SECONDS [CPU [threads|processes]]\n");
		return 1;
	}
	pin(cpu_arg);
	if (processes) {
		child = fork();
		if (child < 0)
			return 1;
		if (child == 0) {
			echo(NULL);
			_exit(0);
		}
	} else if (pthread_create(&t, NULL, echo, NULL) != 0)
		return 1;
	start = now();
	end = start + duration;
	for (;;) {
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
		trips++;
		if ((trips & 1023) == 0 && now() >= end)
			break;
	}
	end = now();
	c = 'q';
	(void) !write(ping[1], &c, 1);
	if (processes)
		waitpid(child, NULL, 0);
	else
		pthread_join(t, NULL);
	/* Two switches per round trip: ping's writer to the echo thread and back. */
	printf("{\"round_trips\":%llu,\"seconds\":%.6f,\"switches_per_s\":%.1f}\n",
	       trips,
	       end - start,
	       2.0 * (double) trips / (end - start));
	return 0;
}
