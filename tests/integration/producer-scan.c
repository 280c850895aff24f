/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Runs producers_scan() against a pinned "events" map and prints what it found as one JSON
 * line: the programs, and per declared type its name, decoder fields or refusal reason. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "decode/producer-scan.h"

int main(int argc, char *argv[]) {
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	ProducerScan *s = NULL;
	int fd, r;

	if (argc != 2) {
		fprintf(stderr, "usage: %s EVENTS_PIN\n", argv[0]);
		return 2;
	}
	fd = bpf_obj_get(argv[1]);
	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) < 0) {
		fprintf(stderr, "%s: %m\n", argv[1]);
		return 1;
	}
	close(fd);
	r = producers_scan(info.id, &s);
	if (r < 0) {
		fprintf(stderr, "scan: %s\n", strerror(-r));
		return 1;
	}
	printf("{\"progs\":[");
	for (size_t i = 0; i < s->n_progs; i++)
		printf("%s{\"id\":%u,\"name\":\"%s\"}", i ? "," : "", s->progs[i].prog_id, s->progs[i].name);
	printf("],\"types\":[");
	for (size_t i = 0; i < s->n_types; i++) {
		const ProducerType *t = &s->types[i];

		printf("%s{\"type\":%u,\"name\":\"%s\",\"prog_id\":%u,\"refused\":\"%s\",\"fields\":[",
		       i ? "," : "",
		       t->type,
		       t->name,
		       t->prog_id,
		       btfrec_error_to_string(t->refused));
		for (unsigned k = 0; t->rec && k < btfrec_n_steps(t->rec); k++) {
			BtfRecValue v;

			btfrec_describe(t->rec, k, &v);
			printf("%s[\"%s\",\"%s\",%u]",
			       k ? "," : "",
			       v.name ? v.name : "",
			       btfrec_kind_to_string(v.kind),
			       v.depth);
		}
		printf("]}");
	}
	printf("],\"bad_decls\":%u,\"refused\":%u}\n", s->bad_decls, s->refused);
	producers_scan_free(s);
	return 0;
}
