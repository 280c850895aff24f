/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* Loader of the example producer, libbpf-bootstrap style: open against perfrelayd's pin root
 * (so the pinned "events" and "counters" are reused), set the rodata knob, load, attach, make
 * N records from one CPU, report how many were emitted, destroy. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "example.skel.h"

int main(int argc, char *argv[]) {
	LIBBPF_OPTS(bpf_object_open_opts, opts);
	struct example_bpf *skel;
	struct timespec loaded;
	unsigned long n;
	cpu_set_t set;
	int r;

	if (argc != 4 &&
	    !(argc == 5 &&
	      (strcmp(argv[4], "--hold") == 0 || strcmp(argv[4], "--stdin") == 0 ||
	       strcmp(argv[4], "--timed") == 0))) {
		fprintf(stderr, "usage: %s PIN_ROOT N CPU [--hold|--stdin|--timed]\n", argv[0]);
		return 2;
	}
	opts.pin_root_path = argv[1];
	n = strtoul(argv[2], NULL, 10);
	/* One CPU: the records then arrive in emit order from one ring. */
	CPU_ZERO(&set);
	CPU_SET(atoi(argv[3]), &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0) {
		perror("sched_setaffinity");
		return 1;
	}

	skel = example_bpf__open_opts(&opts);
	if (!skel) {
		fprintf(stderr, "open example producer: %d\n", -errno);
		return 1;
	}
	/* A pinned map is only reused when its definition matches the daemon's: one slot per CPU. */
	bpf_map__set_max_entries(skel->maps.events, libbpf_num_possible_cpus());
	bpf_map__set_max_entries(skel->maps.recorder, libbpf_num_possible_cpus());
	skel->rodata->target_tgid = getpid();
	r = example_bpf__load(skel);
	clock_gettime(CLOCK_MONOTONIC, &loaded);
	if (r == 0)
		r = example_bpf__attach(skel);
	if (r < 0) {
		fprintf(stderr, "load/attach example producer: %d\n", r);
		example_bpf__destroy(skel);
		return 1;
	}
	for (unsigned long i = 0; i < n; i++)
		syscall(SYS_getppid);
	printf("{\"emitted\":%llu}\n", (unsigned long long) skel->bss->count);
	/* --stdin: after the first N, N more records for each number read from stdin, until it
	 * closes; so that a test can first see the producer discovered, then have it emit. */
	if (argc == 5 && strcmp(argv[4], "--stdin") == 0) {
		unsigned long more;

		fflush(stdout);
		while (scanf("%lu", &more) == 1) {
			for (unsigned long i = 0; i < more; i++)
				syscall(SYS_getppid);
			printf("{\"emitted\":%llu}\n", (unsigned long long) skel->bss->count);
			fflush(stdout);
		}
	} else if (argc == 5 && strcmp(argv[4], "--timed") == 0) {
		/* --timed: how long the program lived, from its load to the unload (the detach that
		 * follows waits for the programs in flight, which only makes it longer). */
		struct timespec gone;

		clock_gettime(CLOCK_MONOTONIC, &gone);
		example_bpf__destroy(skel);
		fprintf(stderr,
			"{\"loaded_ns\":%lld}\n",
			(long long) (gone.tv_sec - loaded.tv_sec) * 1000000000LL +
				(gone.tv_nsec - loaded.tv_nsec));
		return 0;
	} else if (argc == 5) {
		/* --hold keeps the program loaded until stdin closes, so it can be discovered. */
		fflush(stdout);
		while (getchar() != EOF)
			;
	}
	example_bpf__destroy(skel);
	return 0;
}
