/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a container runtime's own state files say of a container: Podman's (containers/storage's
 * containers.json, the list of every container of that storage with its names and a metadata
 * string naming the image) and Docker's (the Engine's config.v2.json of one container). Pure:
 * the text comes from container-lookup.c, and may be anything (a rootless user writes their own
 * storage): bounded, and every field checked for its type. */
#pragma once

#include <stddef.h>

#include "kernel/containers.h"

/* The largest state file read: 16 MiB (a containers.json lists about 1 KiB per container). */
#define CONTAINER_STATE_MAX (16u << 20)

/* Names from the given strings (any may be NULL), each cut to its bound (containers.h) at a
 * UTF-8 character's start; an empty string is none. NULL on ENOMEM. */
ContainerNames *container_names_new(const char *name, const char *image, const char *image_id);

/* Finds container `id` in the text of a containers.json (len bytes). Returns 1 and the names,
 * 0 if it is not listed, -EBADMSG if the text is not such a list. */
int container_state_podman(const char *text, size_t len, const char *id, ContainerNames **ret);
/* The names in the text of a Docker config.v2.json of container `id` (its "ID" must be id).
 * Returns 1 and the names, 0 if it names another container, -EBADMSG if it is no such file. */
int container_state_docker(const char *text, size_t len, const char *id, ContainerNames **ret);
