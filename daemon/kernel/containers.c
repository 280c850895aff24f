/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The table of containers (containers.h). Entries are found by a linear walk of a hash of their
 * ids: a reader asks once per cgroup it has not cached, and the table holds at most a few
 * thousand. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "base/stat.h"
#include "kernel/containers.h"

struct Container {
	/* References: the table's own while it lists the entry, plus one per cache entry holding
	 * it. Taken under the table's lock only, so that the sweep, which holds the lock, sees a
	 * count no reader can raise meanwhile; dropped anywhere. */
	unsigned refs;
	ContainerRef ref;
	/* Written once by the main thread (release), read by readers (acquire). */
	ContainerNames *names;
	/* Main thread, under the lock: */
	ContainerState state;
	uint64_t due_usec; /* when PENDING: the next lookup */
	unsigned tries;
	uint64_t idle_since; /* the sweep that first saw no cache holding it; 0: held */
	uint64_t hash;
};

struct ContainerTable {
	pthread_mutex_t lock;
	Container **entries;
	size_t capacity;
	size_t n;     /* under the lock */
	uint64_t any; /* n, stored under the lock, loaded by anyone */
	ContainerWakeFn wake;
	void *wake_userdata;
	bool no_lookups;
	ContainerTableStats stats; /* counts under the lock; read with relaxed loads */
};

static uint64_t hash_ref(const ContainerRef *r) {
	/* FNV-1a over the runtime and id: only a pre-filter of the walk's compares. */
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ (uint64_t) r->runtime;

	for (const char *p = r->id; *p; p++)
		h = (h ^ (uint8_t) *p) * UINT64_C(0x100000001b3);
	return h ^ ((uint64_t) r->owner << 1);
}

ContainerNames *container_names_free(ContainerNames *n) {
	if (!n)
		return NULL;
	free(n->name);
	free(n->image);
	free(n->image_id);
	free(n);
	return NULL;
}

static void container_free(Container *c) {
	container_names_free(c->names);
	free(c);
}

int container_table_new(ContainerWakeFn wake, void *userdata, ContainerTable **ret) {
	ContainerTable *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->entries = calloc(CONTAINER_TABLE_MAX, sizeof(Container *));
	if (!t->entries) {
		free(t);
		return -ENOMEM;
	}
	t->capacity = CONTAINER_TABLE_MAX;
	pthread_mutex_init(&t->lock, NULL);
	t->wake = wake;
	t->wake_userdata = userdata;
	*ret = t;
	return 0;
}

int container_table_reserve(ContainerTable *t, size_t n) {
	Container **e;

	if (n > SIZE_MAX / sizeof(Container *) - t->capacity)
		return -ENOMEM;
	e = realloc(t->entries, (t->capacity + n) * sizeof(Container *));
	if (!e)
		return -ENOMEM;
	t->entries = e;
	t->capacity += n;
	return 0;
}

void container_table_no_lookups(ContainerTable *t) {
	t->no_lookups = true;
}

ContainerTable *container_table_free(ContainerTable *t) {
	if (!t)
		return NULL;
	/* Every cache is gone by now (the readers first): the table's reference is the last. */
	for (size_t i = 0; i < t->n; i++)
		container_unref(t->entries[i]);
	free(t->entries);
	pthread_mutex_destroy(&t->lock);
	free(t);
	return NULL;
}

static void stats_state(ContainerTable *t, ContainerState s, int delta) {
	uint64_t *p = s == CONTAINER_KNOWN ? &t->stats.known :
		s == CONTAINER_PENDING     ? &t->stats.pending :
		s == CONTAINER_FAILED      ? &t->stats.failed :
					     &t->stats.unnamed;

	STAT_STORE(*p, STAT_LOAD(*p) + (uint64_t) (int64_t) delta);
}

Container *container_table_get(ContainerTable *t, const ContainerRef *ref) {
	uint64_t h;
	Container *c = NULL;

	if (!t || !ref || ref->runtime == CONTAINER_NONE)
		return NULL;
	h = hash_ref(ref);
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++)
		if (t->entries[i]->hash == h && container_ref_equal(&t->entries[i]->ref, ref)) {
			c = t->entries[i];
			break;
		}
	if (!c && t->n < t->capacity) {
		c = calloc(1, sizeof(*c));
		if (c) {
			c->refs = 1; /* the table's */
			c->ref = *ref;
			c->hash = h;
			/* containerd and CRI-O are not asked (docs/containers.md): the id is all. A
			 * machine's name is its id. The rest wait for the main thread. */
			c->state = t->no_lookups || ref->runtime == CONTAINER_CONTAINERD ||
					ref->runtime == CONTAINER_CRIO ?
				CONTAINER_UNNAMED :
				CONTAINER_PENDING;
			t->entries[t->n++] = c;
			STAT_STORE(t->any, t->n);
			STAT_ADD(t->stats.seen, 1);
			stats_state(t, c->state, +1);
			if (c->state == CONTAINER_PENDING && t->wake)
				t->wake(t->wake_userdata);
		}
	} else if (!c)
		STAT_ADD(t->stats.full, 1);
	if (c)
		__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); /* under the lock: see refs */
	pthread_mutex_unlock(&t->lock);
	return c;
}

void container_unref(Container *c) {
	if (!c)
		return;
	/* acq_rel: the last holder's reads of the entry happen before its free. */
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		container_free(c);
}

const ContainerRef *container_ref(const Container *c) {
	return &c->ref;
}

const ContainerNames *container_names(const Container *c) {
	/* Acquire: pairs with container_table_named()'s release, so the strings it points to are
	 * seen whole. */
	return __atomic_load_n(&c->names, __ATOMIC_ACQUIRE);
}

ContainerState container_state(const Container *c) {
	return c->state;
}

unsigned container_tries(const Container *c) {
	return c->tries;
}

static void count_failure(ContainerTable *t, const Container *c) {
	if (c->ref.runtime > CONTAINER_NONE && c->ref.runtime < _CONTAINER_RUNTIME_MAX)
		STAT_ADD(t->stats.lookup_failures[c->ref.runtime], 1);
}

size_t container_table_due(ContainerTable *t, uint64_t now_usec, Container **ret, size_t max) {
	size_t k = 0;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n && k < max; i++) {
		Container *c = t->entries[i];

		if (c->state == CONTAINER_PENDING && c->due_usec <= now_usec) {
			__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
			c->tries++;
			/* Not due again until the lookup says when. */
			c->due_usec = UINT64_MAX;
			ret[k++] = c;
		}
	}
	STAT_ADD(t->stats.lookups, k);
	pthread_mutex_unlock(&t->lock);
	return k;
}

static void set_state(ContainerTable *t, Container *c, ContainerState s) {
	stats_state(t, c->state, -1);
	c->state = s;
	stats_state(t, s, +1);
}

void container_table_named(ContainerTable *t, Container *c, ContainerNames *names) {
	pthread_mutex_lock(&t->lock);
	if (c->state == CONTAINER_PENDING) {
		/* Release: the strings are written before a reader can see the pointer. */
		__atomic_store_n(&c->names, names, __ATOMIC_RELEASE);
		set_state(t, c, CONTAINER_KNOWN);
		names = NULL;
	}
	pthread_mutex_unlock(&t->lock);
	container_names_free(names);
}

void container_table_retry(ContainerTable *t, Container *c, uint64_t next_usec) {
	pthread_mutex_lock(&t->lock);
	c->due_usec = next_usec;
	count_failure(t, c);
	pthread_mutex_unlock(&t->lock);
}

void container_table_failed(ContainerTable *t, Container *c, ContainerState final) {
	pthread_mutex_lock(&t->lock);
	if (c->state == CONTAINER_PENDING) {
		set_state(t, c, final);
		if (final == CONTAINER_FAILED)
			count_failure(t, c);
	}
	pthread_mutex_unlock(&t->lock);
}

void container_table_sweep(ContainerTable *t, uint64_t now_usec) {
	size_t k = 0;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		Container *c = t->entries[i];

		/* Under the lock no reader can take a reference: 1 is the table's alone. */
		if (__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) > 1)
			c->idle_since = 0;
		else if (c->idle_since == 0)
			c->idle_since = now_usec ?: 1;
		else if (now_usec - c->idle_since >= CONTAINER_TABLE_LINGER_SEC * UINT64_C(1000000)) {
			stats_state(t, c->state, -1);
			STAT_ADD(t->stats.swept, 1);
			container_unref(c);
			continue;
		}
		t->entries[k++] = c;
	}
	t->n = k;
	STAT_STORE(t->any, t->n);
	pthread_mutex_unlock(&t->lock);
}

bool container_table_any(const ContainerTable *t) {
	return t && STAT_LOAD(t->any) > 0;
}

uint64_t container_table_next_due(ContainerTable *t) {
	uint64_t due = UINT64_MAX;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++)
		if (t->entries[i]->state == CONTAINER_PENDING && t->entries[i]->due_usec < due)
			due = t->entries[i]->due_usec;
	pthread_mutex_unlock(&t->lock);
	return due;
}

void container_table_get_stats(ContainerTable *t, ContainerTableStats *ret) {
	*ret = (ContainerTableStats){
		.known = STAT_LOAD(t->stats.known),
		.pending = STAT_LOAD(t->stats.pending),
		.failed = STAT_LOAD(t->stats.failed),
		.unnamed = STAT_LOAD(t->stats.unnamed),
		.seen = STAT_LOAD(t->stats.seen),
		.full = STAT_LOAD(t->stats.full),
		.swept = STAT_LOAD(t->stats.swept),
		.lookups = STAT_LOAD(t->stats.lookups),
	};
	for (size_t i = 0; i < _CONTAINER_RUNTIME_MAX; i++)
		ret->lookup_failures[i] = STAT_LOAD(t->stats.lookup_failures[i]);
}

void container_table_visit(ContainerTable *t, ContainerVisitFn fn, void *userdata) {
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++)
		fn(userdata, t->entries[i]);
	pthread_mutex_unlock(&t->lock);
}
