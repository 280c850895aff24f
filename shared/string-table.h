/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Name tables and their lookups made by one macro, as systemd's DEFINE_STRING_TABLE_LOOKUP: a
 * table `NAME_table[]` indexed by an enum or id (gaps are NULL) gives NAME_to_string() and
 * NAME_from_string(), so that each name is written once and the two directions cannot drift. */
#pragma once

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "macro.h"

/* NAME_to_string(i): the name, or NULL for an index out of the table or a gap. */
#define DEFINE_STRING_TABLE_LOOKUP_TO_STRING(name, type)                                        \
	const char *name##_to_string(type i) {                                                  \
		return (size_t) i < ELEMENTSOF(name##_table) ? name##_table[(size_t) i] : NULL; \
	}

/* NAME_from_string(s): the index of s in the table, or -EINVAL (also for NULL). */
#define DEFINE_STRING_TABLE_LOOKUP_FROM_STRING(name)                            \
	int name##_from_string(const char *s) {                                 \
		for (size_t i = 0; s && i < ELEMENTSOF(name##_table); i++)      \
			if (name##_table[i] && strcmp(s, name##_table[i]) == 0) \
				return (int) i;                                 \
		return -EINVAL;                                                 \
	}

#define DEFINE_STRING_TABLE_LOOKUP(name, type)           \
	DEFINE_STRING_TABLE_LOOKUP_TO_STRING(name, type) \
	DEFINE_STRING_TABLE_LOOKUP_FROM_STRING(name)
