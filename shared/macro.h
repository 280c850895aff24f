/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Small helpers shared by every part of perfrelay (daemon, clients, tests; never installed):
 * cleanup attributes and ownership moves. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f)   __attribute__((cleanup(f)))
#define _unused_       __attribute__((unused))
#define _likely_(x)    __builtin_expect(!!(x), 1)
#define _unlikely_(x)  __builtin_expect(!!(x), 0)
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define ELEMENTSOF(a)  (sizeof(a) / sizeof((a)[0]))
/* A NULL-terminated list of strings, as sd-bus takes them. */
#define STRV_MAKE(...) ((char **) ((const char *[]){ __VA_ARGS__, NULL }))
#define MIN(a, b)      ((a) < (b) ? (a) : (b))
#define MAX(a, b)      ((a) > (b) ? (a) : (b))
#define ALIGN_TO(x, a) (((x) + (a) -1) & ~((__typeof__(x)) (a) -1))

/* Moves ownership out of a variable that has a cleanup attribute. */
/* Exchanges the values of two lvalues of the same type. */
#define SWAP_TWO(a, b)                  \
	do {                            \
		__typeof__(a) _t = (a); \
		(a) = (b);              \
		(b) = _t;               \
	} while (0)

#define TAKE_PTR(p)                     \
	({                              \
		__typeof__(p) _p = (p); \
		(p) = NULL;             \
		_p;                     \
	})
#define TAKE_FD(fd)             \
	({                      \
		int _fd = (fd); \
		(fd) = -EBADF;  \
		_fd;            \
	})

static inline void freep(void *p) {
	free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline int safe_close(int fd) {
	if (fd >= 0) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return -EBADF;
}
static inline void closep(int *fd) {
	safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* Declares foo_freep() for use with _cleanup_(foo_freep). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func) \
	static inline void func##p(type *p) {   \
		if (*p)                         \
			func(*p);               \
	}

static inline int negative_errno(void) {
	/* For calls documented to set errno: never return 0 from an error path. */
	return errno > 0 ? -errno : -EIO;
}

static inline int streq(const char *a, const char *b) {
	return strcmp(a, b) == 0;
}

/* A malloc'd copy of n elements of p; NULL for none (or out of memory). */
static inline void *memdup_array(const void *p, size_t n, size_t size) {
	void *q;

	if (!p || n == 0)
		return NULL;
	q = reallocarray(NULL, n, size);
	if (q)
		memcpy(q, p, n * size);
	return q;
}

static inline bool startswith(const char *s, const char *prefix) {
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static inline bool endswith(const char *s, const char *suffix) {
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && memcmp(s + n - k, suffix, k) == 0;
}
