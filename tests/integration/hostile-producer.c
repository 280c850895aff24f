/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Loads the hostile producer against a pin root, makes it emit N records of each kind from one
 * CPU, and prints what the kernel accepted per kind as a JSON line. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "hostile.skel.h"

int main(int argc, char *argv[]) {
	LIBBPF_OPTS(bpf_object_open_opts, opts);
	struct hostile_bpf *skel;
	unsigned long n;
	cpu_set_t set;
	int r;

	if (argc != 4 && !(argc == 5 && strcmp(argv[4], "--hold") == 0)) {
		fprintf(stderr, "usage: %s PIN_ROOT N_PER_KIND CPU [--hold]\n", argv[0]);
		return 2;
	}
	opts.pin_root_path = argv[1];
	n = strtoul(argv[2], NULL, 10);
	CPU_ZERO(&set);
	CPU_SET(atoi(argv[3]), &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0) {
		perror("sched_setaffinity");
		return 1;
	}

	skel = hostile_bpf__open_opts(&opts);
	if (!skel) {
		perror("open hostile producer");
		return 1;
	}
	bpf_map__set_max_entries(skel->maps.events, libbpf_num_possible_cpus());
	bpf_map__set_max_entries(skel->maps.recorder, libbpf_num_possible_cpus());
	skel->rodata->target_tgid = getpid();
	r = hostile_bpf__load(skel);
	if (r == 0)
		r = hostile_bpf__attach(skel);
	if (r < 0) {
		fprintf(stderr, "load/attach hostile producer: %d\n", r);
		hostile_bpf__destroy(skel);
		return 1;
	}
	for (unsigned long i = 0; i < n * 9; i++)
		syscall(SYS_getppid);
	hostile_bpf__detach(skel);

	printf("{\"sent\":[");
	for (int k = 0; k < 9; k++)
		printf("%s%llu", k ? "," : "", (unsigned long long) skel->bss->sent[k]);
	printf("],\"failed\":[");
	for (int k = 0; k < 9; k++)
		printf("%s%llu", k ? "," : "", (unsigned long long) skel->bss->failed[k]);
	printf("]}\n");
	/* --hold keeps the program loaded (its BTF discoverable) until stdin closes. */
	if (argc == 5) {
		fflush(stdout);
		while (getchar() != EOF)
			;
	}
	hostile_bpf__destroy(skel);
	return 0;
}
