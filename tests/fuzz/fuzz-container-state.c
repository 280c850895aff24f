/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the runtimes' state files the daemon reads (container-state.c): a rootless user writes
 * their own containers.json, so any bytes, for Podman's list (first byte even) or Docker's
 * config.v2.json (odd); never a read beyond len, a leak or a crash, and names within bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "features/containers/container-state.h"

#define ID "3f9c0e1b2a4d5c6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e1"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	ContainerNames *n = NULL;
	char *buf;
	int r;

	if (size == 0)
		return 0;
	/* An exact-size copy, no NUL: the parser takes a length. */
	buf = malloc(size - 1 ?: 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	r = (data[0] & 1) ? container_state_docker(buf, size - 1, ID, &n) :
			    container_state_podman(buf, size - 1, ID, &n);
	if (r == 1 && n) {
		if ((n->name && strlen(n->name) > CONTAINER_NAME_MAX) ||
		    (n->image && strlen(n->image) > CONTAINER_IMAGE_MAX) ||
		    (n->image_id && strlen(n->image_id) >= CONTAINER_ID_MAX))
			abort();
	}
	container_names_free(n);
	free(buf);
	return 0;
}
