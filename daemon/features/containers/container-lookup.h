/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Names a container from its runtime's state on disk, on the main thread (docs/containers.md):
 * Podman's containers.json under its storage root (a rootless container's in its user's home,
 * read without following a link and only from files that user owns), Docker's config.v2.json
 * under the Engine's root, a systemd-nspawn machine by its own name. Never a connection to a
 * runtime's socket: a runtime that hangs cannot stall the daemon; a state file that is no regular
 * file (a FIFO) or too large is refused at once. */
#pragma once

#include "kernel/containers.h"

typedef struct ContainerRoots {
	const char *podman; /* the rootful storage root: /var/lib/containers/storage */
	const char *docker; /* the Engine's data root: /var/lib/docker */
} ContainerRoots;

/* 1 and the names if the runtime's state names the container; 0 if it does not (yet: the state
 * may be written after the cgroup is made); a negative errno if the state cannot be read (-EPERM:
 * a file not its owner's, -EFBIG: too large, -EBADMSG: not the runtime's format, -ENOENT: no
 * state where it should be, -EOPNOTSUPP: a runtime not asked). */
int container_lookup(const ContainerRef *ref, const ContainerRoots *roots, ContainerNames **ret);
