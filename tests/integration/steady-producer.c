/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Loads the steady producer against a pin root on one CPU and takes commands on standard input,
 * one per line, answering each with one line when it is done:
 *   rate R    emit R records a second from now on (0: pause)       -> "ok"
 *   burst N   emit N records as fast as possible                   -> "ok"
 *   big S     emit one record of S bytes (then back to the small one) -> "ok"
 *   counts    the producer's own counts                            -> {"calls":C,"accepted":A}
 * End of input detaches the program and exits. */
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "steady.skel.h"

static double now(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

int main(int argc, char *argv[]) {
	LIBBPF_OPTS(bpf_object_open_opts, opts);
	struct steady_bpf *skel;
	double rate = 0, t0 = 0, done = 0;
	char line[256];
	cpu_set_t set;
	int r;

	if (argc != 3) {
		fprintf(stderr, "usage: %s PIN_ROOT CPU\n", argv[0]);
		return 2;
	}
	opts.pin_root_path = argv[1];
	CPU_ZERO(&set);
	CPU_SET(atoi(argv[2]), &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0) {
		perror("sched_setaffinity");
		return 1;
	}
	skel = steady_bpf__open_opts(&opts);
	if (!skel) {
		perror("open steady producer");
		return 1;
	}
	bpf_map__set_max_entries(skel->maps.events, libbpf_num_possible_cpus());
	bpf_map__set_max_entries(skel->maps.recorder, libbpf_num_possible_cpus());
	skel->rodata->target_tgid = getpid();
	r = steady_bpf__load(skel);
	if (r == 0)
		r = steady_bpf__attach(skel);
	if (r < 0) {
		fprintf(stderr, "load/attach steady producer: %d\n", r);
		steady_bpf__destroy(skel);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	for (;;) {
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		/* Behind the rate: only a look at stdin between two batches of calls. */
		int timeout = rate > 0 ? (done < (now() - t0) * rate ? 0 : 1) : -1;

		if (poll(&p, 1, timeout) > 0) {
			unsigned long n;

			if (!fgets(line, sizeof(line), stdin))
				break;
			if (sscanf(line, "rate %lu", &n) == 1) {
				rate = (double) n;
				t0 = now();
				done = 0;
				puts("ok");
			} else if (sscanf(line, "burst %lu", &n) == 1) {
				for (unsigned long i = 0; i < n; i++)
					syscall(SYS_getppid);
				puts("ok");
			} else if (sscanf(line, "big %lu", &n) == 1) {
				skel->bss->big_size = (__u32) n;
				syscall(SYS_getppid);
				skel->bss->big_size = 0;
				puts("ok");
			} else if (strncmp(line, "counts", 6) == 0)
				printf("{\"calls\":%llu,\"accepted\":%llu}\n",
				       (unsigned long long) skel->bss->calls,
				       (unsigned long long) skel->bss->accepted);
			else
				printf("error: unknown command\n");
		}
		/* Catch up with the rate: the calls due since the rate was set, in batches, so
		 * that a rate above what this CPU can make (flat out) still reads its commands. */
		if (rate > 0) {
			double due = (now() - t0) * rate;

			for (unsigned k = 0; done < due && k < 4096; k++, done++)
				syscall(SYS_getppid);
		}
	}
	steady_bpf__detach(skel);
	steady_bpf__destroy(skel);
	return 0;
}
