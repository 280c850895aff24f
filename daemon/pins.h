/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bpffs: the pin root, compatibility checks of pinned maps, and removing what perfrelay pinned. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct bpf_map;

/* Checks that the pin root lies on a mounted bpffs and creates it and its links/ directory. */
int pins_prepare(const char *pin_path);

/* If `path` holds a pin, checks it against the map definition: type, key and value size,
 * max_entries, flags. An incompatible pin is an error naming the pin and every difference,
 * unless `replace` is set: then it is unpinned (and a new map will be made). No pin: 0. */
int pins_check_map(const char *path, const struct bpf_map *expected, bool replace);

/* The kernel's id of the map pinned at path. */
int pins_get_map_id(const char *path, uint32_t *ret);

/* Removes every pin perfrelay owns under pin_path (links/, the maps it creates) and the
 * directories if they end up empty. Pins it does not know are left alone and reported. */
int pins_cleanup(const char *pin_path);
