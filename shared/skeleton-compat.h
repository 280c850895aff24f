/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SKELETON_OPEN_COMPAT(name) defines
 *     static struct name_bpf *name_open(const struct bpf_object_open_opts *opts, bool compat);
 * the skeleton name_bpf opened on its object as built, or with `compat` on the object's compat
 * build (bpf/meson.build: the same source with -DPERFRELAY_NO_FETCH_ATOMICS
 * -DPERFRELAY_NO_ANCESTOR_CGROUP, skeleton name_compat_bpf) for kernels before 5.12, whose
 * verifier refuses those instructions even in dead code (docs/kernels.md). The two objects have
 * the same maps, programs and globals, so name_bpf's struct serves either: only the ELF bytes
 * differ. Include both skeletons first. NULL with errno set on failure, as name_bpf__open_opts(). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#define SKELETON_OPEN_COMPAT(name)                                                                            \
	static struct name##_bpf *name##_open(const struct bpf_object_open_opts *opts, bool compat) {         \
		struct name##_bpf *obj;                                                                       \
		int r;                                                                                        \
                                                                                                              \
		if (!compat)                                                                                  \
			return name##_bpf__open_opts(opts);                                                   \
		obj = calloc(1, sizeof(*obj));                                                                \
		if (!obj) {                                                                                   \
			errno = ENOMEM;                                                                       \
			return NULL;                                                                          \
		}                                                                                             \
		r = name##_bpf__create_skeleton(obj);                                                         \
		if (r == 0) {                                                                                 \
			obj->skeleton->data = (void *) name##_compat_bpf__elf_bytes(&obj->skeleton->data_sz); \
			r = bpf_object__open_skeleton(obj->skeleton, opts);                                   \
		}                                                                                             \
		if (r < 0) {                                                                                  \
			name##_bpf__destroy(obj);                                                             \
			errno = -r;                                                                           \
			return NULL;                                                                          \
		}                                                                                             \
		return obj;                                                                                   \
	}
