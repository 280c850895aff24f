/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bpffs: the pin root, compatibility checks of pinned maps, and removing what perfrelay pinned. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernel/cpuset.h"

struct bpf_map;

/* Checks that the pin root lies on a mounted bpffs and creates it and its links/ directory. */
int pins_prepare(const char *pin_path);

/* If `path` holds a pin, checks it against the map definition: type, key and value size,
 * max_entries, flags. An incompatible pin is an error naming the pin and every difference,
 * unless `replace` is set: then it is unpinned (and a new map will be made). No pin: 0. */
int pins_check_map(const char *path, const struct bpf_map *expected, bool replace);

/* Takes an exclusive flock() on the pin root directory for as long as the returned fd stays
 * open: one daemon (or --cleanup) per pin root. -EWOULDBLOCK if someone holds it. */
int pins_lock(const char *pin_path);

/* Deletes every slot of the perf event array events_fd below n_slots whose CPU is not in
 * `keep` (NULL: every slot). Returns the last error, having tried every slot. */
int pins_clear_slots(int events_fd, unsigned n_slots, const CpuSet *keep);

/* The kernel's id of the map pinned at path. */
int pins_get_map_id(const char *path, uint32_t *ret);

/* Removes every pin perfrelay owns under pin_path (links/, the maps it creates) and the
 * directories if they end up empty, after emptying every slot of the events array. Pins it does
 * not know are left alone and reported. Refused (-EWOULDBLOCK) while a daemon serves pin_path. */
int pins_cleanup(const char *pin_path);
