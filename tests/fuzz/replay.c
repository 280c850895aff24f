/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A fuzz target without libFuzzer: each file of the corpus directories named on the command line
 * is read and handed to LLVMFuzzerTestOneInput() once, in name order. A cross build (arm64, under
 * qemu-user) runs the corpora this way, where clang's fuzzer and sanitizer runtimes are not there
 * for the host architecture; the harness's own checks abort on a wrong answer as they do under
 * libFuzzer. Exits 0 when every input ran, 1 when a directory or file cannot be read, 77 (a skip)
 * when the corpus is empty. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The corpus files are seeds, a few KiB each; a larger one is not a seed of this project. */
#define REPLAY_FILE_MAX (4u << 20)

static int by_name(const struct dirent **a, const struct dirent **b) {
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_file(const char *path, uint8_t *buf) {
	FILE *f = fopen(path, "rbe");
	size_t n;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	n = fread(buf, 1, REPLAY_FILE_MAX, f);
	if (ferror(f) || !feof(f)) {
		fprintf(stderr, "replay: %s: %s\n", path, ferror(f) ? "read error" : "larger than 4 MiB");
		fclose(f);
		return -1;
	}
	fclose(f);
	/* A copy of exactly the input's size, so that a read past its end is one past an allocation
	 * (as libFuzzer hands it), not into the rest of the buffer. */
	uint8_t *copy = malloc(n ? n : 1);
	if (!copy) {
		fprintf(stderr, "replay: out of memory\n");
		return -1;
	}
	memcpy(copy, buf, n);
	LLVMFuzzerTestOneInput(copy, n);
	free(copy);
	return 0;
}

int main(int argc, char **argv) {
	uint8_t *buf = malloc(REPLAY_FILE_MAX);
	unsigned ran = 0;
	int rc = 0;

	if (!buf)
		return 1;
	for (int i = 1; i < argc; i++) {
		struct dirent **names;
		int n = scandir(argv[i], &names, NULL, by_name);

		if (n < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			rc = 1;
			continue;
		}
		for (int j = 0; j < n; j++) {
			char path[4096];

			if (names[j]->d_name[0] != '.' &&
			    (size_t) snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name) <
				    sizeof(path)) {
				if (replay_file(path, buf) < 0)
					rc = 1;
				else
					ran++;
			}
			free(names[j]);
		}
		free(names);
	}
	free(buf);
	printf("replay: %u inputs\n", ran);
	if (rc == 0 && ran == 0)
		return 77;
	return rc;
}
