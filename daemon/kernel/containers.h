/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The containers the daemon has seen, one entry per (runtime, id), shared by every reader's
 * cgroup cache (cgroup.h) and named by the main thread (features/containers/). A reader that
 * meets a container's cgroup for the first time takes a reference under the table's lock (once
 * per cgroup and reader, like the cgroup watch's); from then on it reads the entry without any
 * lock: the id and runtime never change, and the names are published once, as a whole, with a
 * release store that the reader's acquire load pairs with. A new entry is queued for the main
 * thread, whose lookup never runs on a reader. Bounded: the caches may hold an entry each
 * (container_table_reserve(): room for them all, whatever they hold, dead cgroups' included),
 * and CONTAINER_TABLE_MAX more; an entry no cache holds any more is swept after
 * CONTAINER_TABLE_LINGER_SEC; a container met when the table is full gets no entry (counted:
 * the event carries no container). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "kernel/containerid.h"

#define CONTAINER_TABLE_MAX        4096u
#define CONTAINER_TABLE_LINGER_SEC 60u
/* What the names of a container may hold, each: a longer one is cut at a UTF-8 boundary. */
#define CONTAINER_NAME_MAX         255u
#define CONTAINER_IMAGE_MAX        511u

typedef struct ContainerTable ContainerTable;
typedef struct Container Container;

/* What the runtime calls a container: never changed once published. */
typedef struct ContainerNames {
	char *name;     /* "web"; NULL if the runtime has none */
	char *image;    /* "docker.io/library/nginx:1.27"; NULL if unknown */
	char *image_id; /* the image's id (hex), NULL if unknown */
} ContainerNames;

typedef enum ContainerState {
	CONTAINER_PENDING, /* not asked yet, or asked and to be asked again */
	CONTAINER_KNOWN,   /* named */
	CONTAINER_FAILED,  /* the runtime's state did not name it after every try */
	CONTAINER_UNNAMED, /* a runtime the daemon cannot ask (containerd, CRI-O): the id only */
} ContainerState;

typedef struct ContainerTableStats {
	uint64_t known, pending, failed, unnamed; /* entries in each state now */
	uint64_t seen;                            /* entries made since start */
	uint64_t full;    /* containers met with the table full (no entry, no container) */
	uint64_t swept;   /* entries forgotten after no cache held them */
	uint64_t lookups; /* lookups the main thread made */
	/* Lookups that did not name the container (each try: not listed yet, or the state could
	 * not be read), per runtime. */
	uint64_t lookup_failures[_CONTAINER_RUNTIME_MAX];
} ContainerTableStats;

/* wake(userdata) is called, on the thread that met it and under the table's lock, when a new
 * entry is queued for a lookup (the main thread's loop is woken with it: an eventfd's write);
 * NULL for none. */
typedef void (*ContainerWakeFn)(void *userdata);
int container_table_new(ContainerWakeFn wake, void *userdata, ContainerTable **ret);
/* No lookups will be made (ContainerNames=no): entries are made CONTAINER_UNNAMED, never due.
 * Before the first container_table_get(). */
void container_table_no_lookups(ContainerTable *t);
/* Room for `n` more entries (the readers' cache entries). Before the first container_table_get(). */
int container_table_reserve(ContainerTable *t, size_t n);
ContainerTable *container_table_free(ContainerTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(ContainerTable *, container_table_free);

/* The entry of ref's container, made if new, with a reference the caller releases with
 * container_unref(); NULL if ref is no container or the table is full. Any thread. */
Container *container_table_get(ContainerTable *t, const ContainerRef *ref);
void container_unref(Container *c);

/* Whether the table holds any container now (a relaxed load, any thread): a reader asks before
 * it looks for the container of an event without a cgroup of its own. */
bool container_table_any(const ContainerTable *t);

/* What a reader reads, lock-free. */
const ContainerRef *container_ref(const Container *c);
/* The names, or NULL until the main thread has them (acquire: pairs with the publication). */
const ContainerNames *container_names(const Container *c);

/* Main thread. The entries whose lookup is due at now_usec (CLOCK_MONOTONIC), each with a
 * reference (container_unref() when done) and its try counted, at most max into ret; returns
 * how many. */
size_t container_table_due(ContainerTable *t, uint64_t now_usec, Container **ret, size_t max);
/* The tries made of c so far (main thread). */
unsigned container_tries(const Container *c);
/* The outcome of a lookup of c: its names (taken, published once); or no name yet, to be asked
 * again at next_usec; or no name for good, `final` CONTAINER_FAILED (the runtime did not name
 * it) or CONTAINER_UNNAMED (a runtime not asked). Each but the first counts a lookup failure. */
void container_table_named(ContainerTable *t, Container *c, ContainerNames *names);
void container_table_retry(ContainerTable *t, Container *c, uint64_t next_usec);
void container_table_failed(ContainerTable *t, Container *c, ContainerState final);
/* Forgets the entries no cache has held for CONTAINER_TABLE_LINGER_SEC. */
void container_table_sweep(ContainerTable *t, uint64_t now_usec);
/* The earliest time a pending entry is due, UINT64_MAX if none. */
uint64_t container_table_next_due(ContainerTable *t);
void container_table_get_stats(ContainerTable *t, ContainerTableStats *ret);

/* The live entries' refs and names, for a listing: calls fn for each under the table's lock
 * (fn must not call into the table). Main thread. */
typedef void (*ContainerVisitFn)(void *userdata, const Container *c);
void container_table_visit(ContainerTable *t, ContainerVisitFn fn, void *userdata);
/* The entry's state (main thread). */
ContainerState container_state(const Container *c);

ContainerNames *container_names_free(ContainerNames *n);
DEFINE_TRIVIAL_CLEANUP_FUNC(ContainerNames *, container_names_free);
