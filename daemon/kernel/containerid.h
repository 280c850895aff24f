/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Which container a cgroup belongs to, from its path alone: the nearest ancestor (or the cgroup
 * itself) whose name is one a container runtime gives its containers' cgroups — Docker, Podman
 * (rootful and rootless, and its conmon), containerd/CRI, CRI-O, and systemd-nspawn machines.
 * What the runtime calls the container (its name, image) is asked of the runtime elsewhere; this
 * is the id and the runtime only. Pure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef enum ContainerRuntime {
	CONTAINER_NONE = 0,
	CONTAINER_DOCKER,
	CONTAINER_PODMAN,
	CONTAINER_CONTAINERD,
	CONTAINER_CRIO,
	CONTAINER_NSPAWN,
	_CONTAINER_RUNTIME_MAX,
} ContainerRuntime;

/* A runc-style runtime's container id: 64 lowercase hex digits. A machine's name (machined's
 * rule: a host name, at most 64 characters) fits the same buffer. */
#define CONTAINER_ID_MAX 65u

typedef struct ContainerRef {
	ContainerRuntime runtime;
	/* The user whose tree the cgroup is in (cgroup_path_owner()): a rootless container's, whose
	 * name only that user's runtime can tell; (uid_t) -1 for the system's. */
	uid_t owner;
	bool monitor; /* the runtime's monitor of the container (podman's or CRI-O's conmon), not the container's own processes */
	char id[CONTAINER_ID_MAX];
} ContainerRef;

/* Whether a and b are the same container (runtime, owner, id) and both its own processes or both
 * its monitor. */
bool container_ref_equal(const ContainerRef *a, const ContainerRef *b);

/* The runtime's name as events carry it ("docker", "podman", "containerd", "cri-o",
 * "systemd-nspawn"), NULL for CONTAINER_NONE or an unknown value. */
const char *container_runtime_to_string(ContainerRuntime r);

/* The container of a cgroup path relative to the cgroup2 root ("/system.slice/docker-ID.scope"):
 * the deepest path component that names one. Fills *ret and returns true if there is one;
 * returns false (and *ret is CONTAINER_NONE) if the path is in no container. In a user's tree
 * (user@UID.service, which that user may fill with cgroups of any name) only a rootless Podman
 * container is recognised: a name there that looks like a system runtime's container (a
 * "docker-ID.scope" with a real container's ID) is that user's own doing, not the container. */
bool container_from_cgroup_path(const char *path, ContainerRef *ret);
