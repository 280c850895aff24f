/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Writing GetStats()' a{sv} tree (docs/dbus.md, "GetStats"): uint64 figures as {sv} entries and
 * nested a{sv} sections, for the manager's part and each feature's (FeatureVtable.stats_append). */
#pragma once

#include <stdint.h>

#include <systemd/sd-bus.h>

#include "macro.h"

/* A list of uint64 figures, each appended as a "{sv}" entry. */
typedef struct Figure {
	const char *key;
	uint64_t v;
} Figure;

static inline int append_figures(sd_bus_message *m, const Figure *f, size_t n) {
	int r = 0;

	for (size_t i = 0; r >= 0 && i < n; i++)
		r = sd_bus_message_append(m, "{sv}", f[i].key, "t", f[i].v);
	return r;
}
#define APPEND_FIGURES(m, ...)                         \
	({                                             \
		const Figure _f[] = { __VA_ARGS__ };   \
		append_figures(m, _f, ELEMENTSOF(_f)); \
	})

/* Opens "{sv}" with a variant of `contents` and the container inside it (`type`, `inner`);
 * close with close_entry(). */
static inline int
	open_entry(sd_bus_message *m, const char *key, const char *contents, char type, const char *inner) {
	int r = sd_bus_message_open_container(m, 'e', "sv");

	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', contents);
	if (r >= 0)
		r = sd_bus_message_open_container(m, type, inner);
	return r;
}

/* Opens the section `key` (a{sv}). */
static inline int open_section(sd_bus_message *m, const char *key) {
	return open_entry(m, key, "a{sv}", 'a', "{sv}");
}

static inline int close_entry(sd_bus_message *m) {
	int r = 0;

	for (unsigned i = 0; r >= 0 && i < 3; i++)
		r = sd_bus_message_close_container(m);
	return r;
}
