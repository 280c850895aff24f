/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The [Containers] section (docs/config.md, docs/containers.md). Pure: the configuration parser
 * (config.c) reads it as a ConfigPart. PodmanRoot= and DockerRoot= are the core's (a path is not
 * a part's scalar): Config.podman_root, Config.docker_root. */
#pragma once

#include <stdbool.h>

#include "config/config.h"

typedef struct ContainersConfig {
	bool containers; /* Containers=, default yes: events carry their container */
	bool names;      /* ContainerNames=, default yes: and its name, from the runtime's state */
} ContainersConfig;

extern const ConfigPart containers_config;
