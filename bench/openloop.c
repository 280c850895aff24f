/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The host's price of the open probe (bench/host_bench.py): N open()+close() of one file, timed,
 * optionally under programs that do nothing on the same tracepoints (--noop, the floor any
 * syscall-tracepoint tracer pays). Prints the nanoseconds per iteration. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "noop.skel.h"

static long long now_ns(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char *argv[]) {
	struct noop_bpf *skel = NULL;
	const char *path = "/etc/hostname";
	long long start, n;
	int arg = 1;

	if (argc > arg && strcmp(argv[arg], "--noop") == 0) {
		skel = noop_bpf__open_and_load();
		if (!skel || noop_bpf__attach(skel) < 0) {
			fprintf(stderr,
				"openloop: failed to load or attach the do-nothing programs: %s\n",
				strerror(errno));
			return 1;
		}
		arg++;
	}
	if (argc <= arg || (n = atoll(argv[arg])) <= 0) {
		fprintf(stderr, "usage: openloop [--noop] ITERATIONS [PATH]\n");
		return 2;
	}
	if (argc > arg + 1)
		path = argv[arg + 1];
	start = now_ns();
	for (long long i = 0; i < n; i++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			fprintf(stderr, "openloop: %s: %s\n", path, strerror(errno));
			return 1;
		}
		close(fd);
	}
	printf("%.1f\n", (double) (now_ns() - start) / (double) n);
	noop_bpf__destroy(skel);
	return 0;
}
