/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A libperfrelay user built only from the installed header, library and pkg-config file (by
 * test_pkgconfig.py): subscribes to exec events and exits 0 once it sees one carrying a marker.
 *
 * usage: MARKER=... pkgconfig-client SOCKET json|binary
 * The marker comes in the environment: in argv, this program's own exec (which may be delivered
 * after the subscription, as the ring is read a little later) would carry it too.
 * Prints "LIB <path of the loaded libperfrelay>", "READY" once subscribed, "GOT <pid>" when the
 * marker's exec arrives. Exit status: 0 seen, 1 error, 2 nothing within 60 s. */
#define _GNU_SOURCE /* dladdr() */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <perfrelay/perfrelay.h>

static int has_marker(const char *argv, size_t len, const char *marker) {
	/* argv[] holds NUL-terminated arguments back to back. */
	for (size_t pos = 0; pos < len;) {
		size_t n = strnlen(argv + pos, len - pos);

		if (n == strlen(marker) && memcmp(argv + pos, marker, n) == 0)
			return 1;
		pos += n + 1;
	}
	return 0;
}

int main(int argc, char *argv[]) {
	static const char *const types[] = { "exec" };
	struct perfrelay_subscription sub = { .types = types, .n_types = 1 };
	perfrelay_client *c = NULL;
	const char *marker;
	time_t give_up;
	Dl_info info;
	int binary, found = 0, r;

	marker = getenv("MARKER");
	if (argc != 3 || !marker || !*marker) {
		fprintf(stderr, "usage: MARKER=... %s SOCKET json|binary\n", argv[0]);
		return 1;
	}
	binary = strcmp(argv[2], "binary") == 0;
	sub.format = binary ? PERFRELAY_FORMAT_BINARY : PERFRELAY_FORMAT_JSON;

	if (dladdr((void *) perfrelay_connect, &info) && info.dli_fname)
		printf("LIB %s\n", info.dli_fname);

	r = perfrelay_client_new(&c);
	if (r >= 0)
		r = perfrelay_connect(c, argv[1], &sub);
	if (r < 0) {
		fprintf(stderr,
			"connect %s: %s (%s)\n",
			argv[1],
			strerror(-r),
			perfrelay_client_error(c) ? perfrelay_client_error(c) : "-");
		perfrelay_close(c);
		return 1;
	}
	printf("READY protocol=%u schema=%u\n",
	       perfrelay_client_hello(c)->protocol,
	       perfrelay_client_hello(c)->schema);
	fflush(stdout);

	give_up = time(NULL) + 60;
	while (time(NULL) < give_up) {
		if (binary) {
			const struct perfrelay_hdr *hdr;
			const struct perfrelay_exec *ex;
			const void *payload;
			size_t size;

			r = perfrelay_next_record(c, &hdr, &payload, &size, 1000);
			if (r <= 0)
				goto next;
			if (hdr->type != PERFRELAY_TYPE_EXEC || hdr->size != sizeof(struct perfrelay_exec))
				continue;
			ex = (const struct perfrelay_exec *) hdr;
			if (has_marker(ex->argv, ex->argv_len, marker)) {
				printf("GOT %u\n", ex->pid);
				found = 1;
				break;
			}
		} else {
			const char *line;
			size_t len;

			r = perfrelay_next_json(c, &line, &len, 1000);
			if (r <= 0)
				goto next;
			if (strstr(line, "\"type\":\"exec\"") && strstr(line, marker)) {
				const char *pid = strstr(line, "\"pid\":");

				printf("GOT %ld\n", pid ? strtol(pid + 6, NULL, 10) : -1L);
				found = 1;
				break;
			}
		}
		continue;
next:
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "read: %s\n", strerror(-r));
			perfrelay_close(c);
			return 1;
		}
	}
	perfrelay_close(c);
	return found ? 0 : 2;
}
