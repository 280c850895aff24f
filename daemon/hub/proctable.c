/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "event.h"
#include "macro.h"
#include "hub/proctable.h"
#include "base/siphash.h"

/* One entry as words, each read and written with a relaxed atomic: the bucket's sequence count
 * orders them (proctable.h). */
enum {
	W_EXEC_ID,
	W_PARENT,
	W_CGROUP,
	W_META,  /* pid << 32 | uid */
	W_STAMP, /* insertion order << STAMP_SHIFT | STAMP_PARENT | STAMP_EXITED */
	W_COMM0,
	W_COMM1,
	_W_MAX,
};

#define STAMP_EXITED UINT64_C(1)
#define STAMP_PARENT UINT64_C(2) /* an entry was added with this one as its parent */
#define STAMP_SHIFT  2

typedef struct ProcBucket {
	_Alignas(64) uint32_t seq; /* odd while a writer changes the bucket */
	uint32_t lock;             /* writers' spin lock */
	uint64_t slot[PROC_BUCKET_SLOTS][_W_MAX];
} ProcBucket;

struct ProcTable {
	ProcBucket *buckets;
	size_t n_buckets; /* a power of two */
	uint64_t key[2];  /* of the buckets' hash, drawn at creation; read-only after */
	uint64_t stamp;   /* insertion order, for eviction */
	uint64_t inserted, seeded, exited, evicted, evicted_live, misses, retries, incomplete;
};

/* A spinning thread's hint to the CPU (the kernel's cpu_relax()). */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

#define LOAD(x)     __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define COUNT(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_RELAXED)

int proc_table_new(size_t capacity, ProcTable **ret) {
	ProcTable *t;
	size_t n = PROC_TABLE_MIN / PROC_BUCKET_SLOTS;

	if (capacity > PROC_TABLE_MAX)
		capacity = PROC_TABLE_MAX;
	while (n * PROC_BUCKET_SLOTS < capacity)
		n <<= 1;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->buckets = aligned_alloc(_Alignof(ProcBucket), n * sizeof(ProcBucket));
	if (!t->buckets) {
		free(t);
		return -ENOMEM;
	}
	memset(t->buckets, 0, n * sizeof(ProcBucket));
	t->n_buckets = n;
	if (getrandom(t->key, sizeof(t->key), 0) != (ssize_t) sizeof(t->key)) {
		int r = errno > 0 ? -errno : -EIO;

		free(t->buckets);
		free(t);
		return r;
	}
	*ret = t;
	return 0;
}

ProcTable *proc_table_free(ProcTable *t) {
	if (t) {
		free(t->buckets);
		free(t);
	}
	return NULL;
}

size_t proc_table_bucket_index(const ProcTable *t, uint64_t exec_id) {
	/* Not the exec id's own bits: it is an unkeyed mix of a start time, a tgid and an exec
	 * count, which anyone can invert and aim (spawning until four live images share a bucket
	 * evicts a chosen one). Keyed, the placement is the daemon's secret. */
	return (size_t) (siphash24_u64(exec_id, t->key) & (t->n_buckets - 1));
}

static ProcBucket *bucket_of(ProcTable *t, uint64_t exec_id) {
	return &t->buckets[proc_table_bucket_index(t, exec_id)];
}

static void bucket_lock(ProcBucket *b) {
	while (__atomic_exchange_n(&b->lock, 1, __ATOMIC_ACQUIRE))
		while (LOAD(b->lock))
			cpu_relax();
	/* seqcount write side: odd, then the stores, ordered after it. */
	STORE(b->seq, LOAD(b->seq) + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void bucket_unlock(ProcBucket *b) {
	__atomic_store_n(&b->seq, LOAD(b->seq) + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&b->lock, 0, __ATOMIC_RELEASE);
}

/* A consistent copy of the bucket's words. */
static void bucket_read(ProcTable *t, ProcBucket *b, uint64_t out[PROC_BUCKET_SLOTS][_W_MAX]) {
	for (;;) {
		uint32_t s = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);

		if (!(s & 1)) {
			for (unsigned i = 0; i < PROC_BUCKET_SLOTS; i++)
				for (unsigned w = 0; w < _W_MAX; w++)
					out[i][w] = LOAD(b->slot[i][w]);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (LOAD(b->seq) == s)
				return;
		}
		COUNT(t->retries, 1);
		cpu_relax();
	}
}

static void words_to_entry(const uint64_t *w, ProcEntry *e) {
	e->exec_id = w[W_EXEC_ID];
	e->parent_exec_id = w[W_PARENT];
	e->cgroup_id = w[W_CGROUP];
	e->pid = (uint32_t) (w[W_META] >> 32);
	e->uid = (uint32_t) w[W_META];
	e->exited = w[W_STAMP] & STAMP_EXITED;
	memcpy(e->comm, &w[W_COMM0], 8);
	memcpy(e->comm + 8, &w[W_COMM1], 8);
	e->comm[PROC_COMM_LEN - 1] = 0;
}

static bool bucket_holds(ProcTable *t, ProcBucket *b, uint64_t exec_id) {
	uint64_t w[PROC_BUCKET_SLOTS][_W_MAX];

	bucket_read(t, b, w);
	for (unsigned i = 0; i < PROC_BUCKET_SLOTS; i++)
		if (w[i][W_EXEC_ID] == exec_id)
			return true;
	return false;
}

/* The slot for exec_id in a locked bucket: its own, else an empty one, else the victim: the
 * oldest exited entry, else the oldest live leaf, else the oldest live parent. A parent goes
 * last because its descendants' lineage runs through it: evicting one leaf loses one process,
 * evicting a parent (a user's shell, root's sshd) cuts every descendant's. */
static unsigned bucket_slot_for(ProcBucket *b, uint64_t exec_id) {
	unsigned empty = PROC_BUCKET_SLOTS, victim = 0;
	uint64_t victim_key = UINT64_MAX;

	for (unsigned i = 0; i < PROC_BUCKET_SLOTS; i++) {
		uint64_t id = LOAD(b->slot[i][W_EXEC_ID]);
		uint64_t stamp = LOAD(b->slot[i][W_STAMP]);
		uint64_t class = stamp & STAMP_EXITED ? 0 : stamp & STAMP_PARENT ? 2 : 1;
		uint64_t key = class << 62 | stamp >> STAMP_SHIFT;

		if (id == exec_id)
			return i;
		if (id == 0) {
			if (empty == PROC_BUCKET_SLOTS)
				empty = i;
			continue;
		}
		if (key < victim_key) {
			victim_key = key;
			victim = i;
		}
	}
	return empty < PROC_BUCKET_SLOTS ? empty : victim;
}

/* Writes e into slot i of a locked bucket, counting the entry it replaces if that was another
 * image's. Exited is for good for an image (its exec id is never reused): an exec read after its
 * exit (the two came on different CPUs' rings) fills the entry in and leaves it exited. Returns
 * whether the slot held another image (or none). */
static bool slot_write(ProcTable *t, ProcBucket *b, unsigned i, const ProcEntry *e) {
	uint64_t comm[2] = {}, id = LOAD(b->slot[i][W_EXEC_ID]), old = LOAD(b->slot[i][W_STAMP]);
	uint64_t flags = id == e->exec_id ? old & (STAMP_EXITED | STAMP_PARENT) : 0;

	if (e->exited)
		flags |= STAMP_EXITED;
	if (id != 0 && id != e->exec_id) {
		COUNT(t->evicted, 1);
		if (!(old & STAMP_EXITED))
			COUNT(t->evicted_live, 1);
	}
	memcpy(comm, e->comm, strnlen(e->comm, PROC_COMM_LEN - 1));
	STORE(b->slot[i][W_EXEC_ID], e->exec_id);
	STORE(b->slot[i][W_PARENT], e->parent_exec_id);
	STORE(b->slot[i][W_CGROUP], e->cgroup_id);
	STORE(b->slot[i][W_META], (uint64_t) e->pid << 32 | e->uid);
	STORE(b->slot[i][W_STAMP], COUNT(t->stamp, 1) << STAMP_SHIFT | flags);
	STORE(b->slot[i][W_COMM0], comm[0]);
	STORE(b->slot[i][W_COMM1], comm[1]);
	return id != e->exec_id;
}

/* Marks an entry as some entry's parent, so that eviction keeps it over leaves. A look without
 * the lock first: a parent is marked at its first child, and most children have a marked one. */
static void mark_parent(ProcTable *t, uint64_t exec_id) {
	uint64_t w[PROC_BUCKET_SLOTS][_W_MAX];
	ProcBucket *b = bucket_of(t, exec_id);

	bucket_read(t, b, w);
	for (unsigned i = 0; i < PROC_BUCKET_SLOTS; i++)
		if (w[i][W_EXEC_ID] == exec_id) {
			if (w[i][W_STAMP] & STAMP_PARENT)
				return;
			bucket_lock(b);
			if (LOAD(b->slot[i][W_EXEC_ID]) == exec_id)
				STORE(b->slot[i][W_STAMP], LOAD(b->slot[i][W_STAMP]) | STAMP_PARENT);
			bucket_unlock(b);
			return;
		}
}

bool proc_table_put(ProcTable *t, const ProcEntry *e, bool only_new) {
	ProcBucket *b;
	unsigned i;
	bool added;

	if (!t || e->exec_id == 0)
		return false;
	b = bucket_of(t, e->exec_id);
	/* Most of what only_new brings (an exec's ancestors, the seed's parents) is held already:
	 * a lock-free look first, the lock only to add. */
	if (only_new && bucket_holds(t, b, e->exec_id))
		return false;
	bucket_lock(b);
	i = bucket_slot_for(b, e->exec_id);
	if (only_new && LOAD(b->slot[i][W_EXEC_ID]) == e->exec_id) {
		bucket_unlock(b);
		return false;
	}
	added = slot_write(t, b, i, e);
	if (added)
		COUNT(t->inserted, 1);
	bucket_unlock(b);
	/* After the unlock: the parent may share the bucket (one lock at a time, no order). */
	if (added && e->parent_exec_id != 0 && e->parent_exec_id != e->exec_id)
		mark_parent(t, e->parent_exec_id);
	return added;
}

void proc_table_exit(ProcTable *t, uint64_t exec_id) {
	ProcBucket *b;
	unsigned i;

	if (!t || exec_id == 0)
		return;
	b = bucket_of(t, exec_id);
	bucket_lock(b);
	i = bucket_slot_for(b, exec_id);
	COUNT(t->exited, 1);
	if (LOAD(b->slot[i][W_EXEC_ID]) == exec_id)
		STORE(b->slot[i][W_STAMP], LOAD(b->slot[i][W_STAMP]) | STAMP_EXITED);
	else
		/* An image the table does not hold: its fork may come later from another CPU's
		 * ring (an exec that replaced a fresh fork's copy). A tombstone keeps that fork from
		 * adding it as live (proc_table_put(only_new)); pid 0, no parent: no walk takes it
		 * for a process. */
		slot_write(t, b, i, &(ProcEntry){ .exec_id = exec_id, .exited = true });
	bucket_unlock(b);
}

bool proc_table_get(ProcTable *t, uint64_t exec_id, ProcEntry *ret) {
	uint64_t w[PROC_BUCKET_SLOTS][_W_MAX];

	if (!t || exec_id == 0)
		return false;
	bucket_read(t, bucket_of(t, exec_id), w);
	for (unsigned i = 0; i < PROC_BUCKET_SLOTS; i++)
		if (w[i][W_EXEC_ID] == exec_id) {
			words_to_entry(w[i], ret);
			return true;
		}
	return false;
}

void proc_table_count_seeded(ProcTable *t, uint64_t n) {
	COUNT(t->seeded, n);
}

static void copy_comm(char dst[PROC_COMM_LEN], const char *src) {
	size_t n = src ? strnlen(src, PROC_COMM_LEN - 1) : 0;

	if (n > 0)
		memcpy(dst, src, n);
	dst[n] = 0;
}

/* The ancestors an exec record carries (0 for a record of an older probe). */
static uint32_t exec_n_ancestors(const DecodedEvent *ev) {
	if (ev->record_size < sizeof(struct perfrelay_exec))
		return 0;
	return MIN(
		READ_FIELD(ev->record, struct perfrelay_exec, n_ancestors),
		(uint32_t) PERFRELAY_ANCESTORS_MAX);
}

/* Ancestor i of n of an exec record as an entry: ancestors[i + 1] is its parent; the last
 * one's parent is not in the record (0). */
static void exec_ancestor(const DecodedEvent *ev, uint32_t i, uint32_t n, ProcEntry *e) {
	const uint8_t *x = ev->record;

	*e = (ProcEntry){ .exec_id = READ_FIELD(x, struct perfrelay_exec, ancestors[i].exec_id),
			  .pid = READ_FIELD(x, struct perfrelay_exec, ancestors[i].pid),
			  .uid = PROC_UID_UNKNOWN };
	if (i + 1 < n)
		e->parent_exec_id = READ_FIELD(x, struct perfrelay_exec, ancestors[i + 1].exec_id);
	copy_comm(e->comm, FIELD_PTR(x, struct perfrelay_exec, ancestors[i].comm));
}

void proc_table_note(ProcTable *t, const DecodedEvent *ev) {
	ProcEntry e = {};

	if (!t || !ev->known || !ev->has_exec_id)
		return;
	switch (ev->hdr.type) {
	case PERFRELAY_TYPE_EXEC: {
		uint32_t n = exec_n_ancestors(ev);

		/* The ancestors first, each only if new: the record is what the kernel had at the
		 * exec, the table may know more (a cgroup). */
		for (uint32_t i = 0; i < n; i++) {
			exec_ancestor(ev, i, n, &e);
			proc_table_put(t, &e, true);
		}
		/* The image the exec replaced is gone (the pid is the new one's now). */
		if (ev->record_size >= sizeof(struct perfrelay_exec))
			proc_table_exit(t, READ_FIELD(ev->record, struct perfrelay_exec, prev_exec_id));
		e = (ProcEntry){ .exec_id = ev->exec_id,
				 .parent_exec_id = ev->parent_exec_id,
				 .cgroup_id = ev->cgroup_id,
				 .pid = ev->pid,
				 .uid = ev->has_uid ? ev->uid : PROC_UID_UNKNOWN };
		copy_comm(e.comm, ev->comm);
		proc_table_put(t, &e, false);
		break;
	}
	case PERFRELAY_TYPE_FORK: {
		uint32_t child_pid = READ_FIELD(ev->record, struct perfrelay_fork, child_pid),
			 child_tgid = READ_FIELD(ev->record, struct perfrelay_fork, child_tgid);
		ProcEntry parent;

		if (child_pid != child_tgid)
			return; /* a thread: its process is known already */
		e = (ProcEntry){ .exec_id = ev->exec_id,
				 .parent_exec_id = ev->parent_exec_id,
				 .pid = child_tgid,
				 .uid = ev->has_uid ? ev->uid : PROC_UID_UNKNOWN };
		/* The child runs in its parent's cgroup until it moves. */
		if (proc_table_get(t, ev->parent_exec_id, &parent))
			e.cgroup_id = parent.cgroup_id;
		copy_comm(e.comm, ev->comm);
		proc_table_put(t, &e, true);
		break;
	}
	case PERFRELAY_TYPE_EXIT:
		proc_table_exit(t, ev->exec_id);
		break;
	default:
		break;
	}
}

size_t proc_table_list(ProcTable *t, ProcEntry *out, size_t max) {
	size_t k = 0;

	for (size_t b = 0; b < t->n_buckets && k < max; b++) {
		uint64_t w[PROC_BUCKET_SLOTS][_W_MAX];

		bucket_read(t, &t->buckets[b], w);
		for (unsigned i = 0; i < PROC_BUCKET_SLOTS && k < max; i++)
			if (w[i][W_EXEC_ID] != 0 && !(w[i][W_STAMP] & STAMP_EXITED))
				words_to_entry(w[i], &out[k++]);
	}
	return k;
}

void proc_table_count_incomplete(ProcTable *t) {
	COUNT(t->incomplete, 1);
}

void proc_table_get_stats(ProcTable *t, ProcTableStats *ret) {
	ProcTableStats s = {
		.capacity = t->n_buckets * PROC_BUCKET_SLOTS,
		.bytes = sizeof(*t) + t->n_buckets * sizeof(ProcBucket),
		.inserted = LOAD(t->inserted),
		.seeded = LOAD(t->seeded),
		.exited = LOAD(t->exited),
		.evicted = LOAD(t->evicted),
		.evicted_live = LOAD(t->evicted_live),
		.misses = LOAD(t->misses),
		.retries = LOAD(t->retries),
		.incomplete = LOAD(t->incomplete),
	};

	for (size_t b = 0; b < t->n_buckets; b++)
		for (unsigned i = 0; i < PROC_BUCKET_SLOTS; i++)
			if (LOAD(t->buckets[b].slot[i][W_EXEC_ID]) != 0) {
				s.entries++;
				s.live += !(LOAD(t->buckets[b].slot[i][W_STAMP]) & STAMP_EXITED);
			}
	*ret = s;
}

void lineage_walk(Lineage *l) {
	const DecodedEvent *ev = l->ev;
	uint64_t next;

	if (l->walked)
		return;
	l->walked = true;
	l->complete = false;
	l->n = 0;
	if (!ev->known || !ev->has_exec_id)
		return;
	next = ev->parent_exec_id;
	if (ev->hdr.type == PERFRELAY_TYPE_EXEC && ev->record_size >= sizeof(struct perfrelay_exec)) {
		uint32_t n = exec_n_ancestors(ev);
		bool last_known = false;

		for (uint32_t i = 0; i < n; i++) {
			ProcEntry *e = &l->a[l->n++];
			ProcEntry known;

			exec_ancestor(ev, i, n, e);
			/* The cgroup (for "unit"), and the parent of the last one, from the table. */
			last_known = proc_table_get(l->table, e->exec_id, &known) && known.pid != 0;
			if (last_known) {
				e->cgroup_id = known.cgroup_id;
				e->uid = known.uid;
				if (i + 1 == n)
					e->parent_exec_id = known.parent_exec_id;
			}
		}
		if (n < PERFRELAY_ANCESTORS_MAX) {
			l->complete = true; /* the kernel's chain ended: the root was reached */
			return;
		}
		/* Eight of them: the chain goes on where the table says, if it knows the last one
		 * (whose parent is 0 if it is a root). */
		if (!last_known) {
			if (l->table)
				COUNT(l->table->misses, 1);
			return;
		}
		next = l->a[l->n - 1].parent_exec_id;
	}
	while (l->n < LINEAGE_MAX) {
		if (next == 0) {
			l->complete = true;
			return;
		}
		if (!proc_table_get(l->table, next, &l->a[l->n]) || l->a[l->n].pid == 0) {
			/* Not held, or only a tombstone (proc_table_exit()). */
			if (l->table)
				COUNT(l->table->misses, 1);
			return;
		}
		next = l->a[l->n++].parent_exec_id;
	}
}
