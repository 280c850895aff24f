/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Shared rings and their members: the memfds, the writer's reclaim with its compare-and-swap on
 * each member's position, publishing heads and waking sleepers (docs/shared-ring.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/shared-ring-writer.h"

#define PAGE_SIZE_MIN 4096u

/* The writer notes, per ring, the first frame at or after each 1/SHARED_RING_MARKS of it: a
 * reclaim takes its boundary from there, so that it never reads a frame header back from the
 * ring set (docs/shared-ring.md, "The writer trusts nothing it shares"). */
#define SHARED_RING_MARKS 32u

typedef struct SharedMark {
	uint64_t pos; /* a frame boundary */
	uint64_t seq; /* events before it */
} SharedMark;

typedef struct SharedSlot {
	struct perfrelay_shared_ctl *ctl;
	uint8_t *data;
	uint64_t mask;
	/* Writer-private (the slot's lock; the main thread reads them with every lock held). */
	uint64_t oldest;   /* the first frame not reclaimed */
	uint64_t head;     /* published: frames up to here are whole */
	uint64_t head_seq; /* events before head */
	uint64_t half;     /* the half of the ring the writer is in: head / (size / 2) */
	uint64_t woken;    /* the head at which sleeping members were last checked */
	/* marks[k % SHARED_RING_MARKS]: the first frame at or after k * (size / MARKS), for the
	 * last MARKS values of k below next_mark (the first k no frame has reached yet). */
	SharedMark marks[SHARED_RING_MARKS];
	uint64_t next_mark;
	bool schema_reset;
} SharedSlot;

typedef struct MemberSlot {
	uint64_t start_seq; /* main thread, at attach */
	/* Written by the writer under the seqcount `gen` (odd while it writes), read by the main
	 * thread (member_slot_read()): the two change together. */
	uint64_t gen;
	uint64_t seen_seq; /* events the member passed or lost: seq at its position */
	uint64_t dropped;
	uint64_t end_seq; /* main thread, at detach: the ring's seq then */
} MemberSlot;

static void member_slot_write(MemberSlot *ms, uint64_t seen_seq, uint64_t dropped) {
	__atomic_store_n(&ms->gen, ms->gen + 1, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_release);
	__atomic_store_n(&ms->seen_seq, seen_seq, __ATOMIC_RELAXED);
	__atomic_store_n(&ms->dropped, dropped, __ATOMIC_RELAXED);
	__atomic_store_n(&ms->gen, ms->gen + 1, __ATOMIC_RELEASE);
}

static void member_slot_read(const MemberSlot *ms, uint64_t *ret_seen, uint64_t *ret_dropped) {
	for (;;) {
		uint64_t g = __atomic_load_n(&ms->gen, __ATOMIC_ACQUIRE);

		if (g % 2 == 0) {
			*ret_seen = __atomic_load_n(&ms->seen_seq, __ATOMIC_RELAXED);
			*ret_dropped = __atomic_load_n(&ms->dropped, __ATOMIC_RELAXED);
			atomic_thread_fence(memory_order_acquire);
			if (__atomic_load_n(&ms->gen, __ATOMIC_RELAXED) == g)
				return;
		}
	}
}

struct SharedMember {
	SharedRing *ring;
	int sock; /* not owned: the connection's socket, for the doorbell */
	int page_fd;
	struct perfrelay_shared_member *page;
	MemberSlot *slots;
	atomic_bool hostile;
	bool attached, detached;
	bool final; /* detached from a ring set that is never written again */
};

struct SharedRing {
	unsigned n_slots;
	int fd;
	uint8_t *map;
	uint64_t map_size;
	SharedSlot *slots;
	SharedMember **members; /* guarded by every slot lock: the writers read it */
	size_t n_members;
};

static uint64_t ring_size_for(unsigned n_big, uint64_t bytes) {
	uint64_t size = SHARED_RING_MIN;

	while (size * 2 * n_big <= bytes)
		size *= 2;
	return size;
}

/* A sealed memfd of `size` bytes that cannot grow or shrink, mapped read-write here. With
 * `writer_only`, mode 0400: memfd inodes are made 0777, and anyone holding a descriptor could
 * reopen /proc/self/fd/N read-write (the magic link checks only the mode); 0400 refuses that to
 * everyone but root, who could write the daemon's memory anyway. Not F_SEAL_FUTURE_WRITE: it
 * would also refuse the hole punch with which the daemon frees the pages of a ring set a former
 * member still maps (shared_ring_release()). */
static int memfd_sealed(const char *name, uint64_t size, bool writer_only, int *ret_fd, void **ret_map) {
	_cleanup_close_ int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *map;

	if (fd < 0)
		return negative_errno();
	if (ftruncate(fd, (off_t) size) < 0)
		return negative_errno();
	if (fchmod(fd, writer_only ? 0400 : 0600) < 0)
		return negative_errno();
	map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return negative_errno();
	/* Neither side can then make the other's mapping fault (SIGBUS) by truncating. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int k = negative_errno();

		munmap(map, size);
		return k;
	}
	*ret_fd = TAKE_FD(fd);
	*ret_map = map;
	return 0;
}

int shared_ring_new(unsigned n_slots, unsigned n_small, uint64_t bytes, SharedRing **ret) {
	_cleanup_(shared_ring_freep) SharedRing *r = NULL;
	struct perfrelay_shared_header *h;
	uint64_t size = PAGE_SIZE_MIN, big;
	void *map;
	int fd, k;

	if (n_slots == 0 || n_slots > PERFRELAY_SHARED_RINGS_MAX || n_small >= n_slots)
		return -EINVAL;
	big = ring_size_for(n_slots - n_small, bytes);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fd = -EBADF;
	r->n_slots = n_slots;
	r->slots = calloc(n_slots, sizeof(SharedSlot));
	if (!r->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < n_slots; i++)
		size += sizeof(struct perfrelay_shared_ctl) + (i >= n_slots - n_small ? SHARED_RING_MIN : big);
	size = ALIGN_TO(size, (uint64_t) PAGE_SIZE_MIN);
	k = memfd_sealed("perfrelay-shared-ring", size, true, &fd, &map);
	if (k < 0)
		return k;
	r->fd = fd;
	r->map = map;
	r->map_size = size;

	h = (struct perfrelay_shared_header *) r->map;
	h->magic = PERFRELAY_SHARED_MAGIC;
	h->version = PERFRELAY_SHARED_VERSION;
	h->n_rings = n_slots;
	h->size = size;
	for (uint64_t off = PAGE_SIZE_MIN, i = 0; i < n_slots; i++) {
		uint64_t rs = i >= n_slots - n_small ? SHARED_RING_MIN : big;

		h->ring[i].offset = off;
		h->ring[i].size = rs;
		r->slots[i].ctl = (struct perfrelay_shared_ctl *) (r->map + off);
		r->slots[i].data = r->map + off + sizeof(struct perfrelay_shared_ctl);
		r->slots[i].mask = rs - 1;
		off += sizeof(struct perfrelay_shared_ctl) + rs;
	}
	*ret = TAKE_PTR(r);
	return 0;
}

SharedRing *shared_ring_free(SharedRing *r) {
	if (!r)
		return NULL;
	if (r->map)
		munmap(r->map, r->map_size);
	safe_close(r->fd);
	free(r->slots);
	free(r->members);
	free(r);
	return NULL;
}

int shared_ring_release(SharedRing *r) {
	/* Pages that a mapping faults in afterwards are that mapping's owner's (zeros). */
	if (fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) r->map_size) < 0)
		return negative_errno();
	return 0;
}

unsigned shared_ring_n_slots(const SharedRing *r) {
	return r->n_slots;
}

uint8_t *shared_ring_data(const SharedRing *r, unsigned slot) {
	return r->slots[slot].data;
}

uint64_t shared_ring_size(const SharedRing *r, unsigned slot) {
	return r->slots[slot].mask + 1;
}

uint64_t shared_ring_bytes(const SharedRing *r) {
	return r->map_size;
}

int shared_ring_open_readonly(const SharedRing *r) {
	char path[64];
	int fd;

	/* A memfd reopened read-only: mmap(PROT_WRITE, MAP_SHARED) and mprotect() to writable
	 * then fail with EACCES, and a private writable mapping is the client's own copy. A
	 * reopen of it read-write is refused by its mode (but to root). */
	(void) snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? negative_errno() : fd;
}

/* Writer side ------------------------------------------------------------------------------ */

static const struct perfrelay_shared_frame *frame_at(const SharedSlot *s, uint64_t pos) {
	return (const struct perfrelay_shared_frame *) (s->data + (pos & s->mask));
}

/* The seq at a member's position `pos`, which the member may have set to anything: within
 * [floor, seq_end] whatever it says, so that its figures stay consistent (they can only be
 * wrong about itself). `end` is the writer's head, with seq_end events before it. */
static uint64_t seq_at(const SharedSlot *s, uint64_t pos, uint64_t end, uint64_t seq_end, uint64_t floor) {
	uint64_t v;

	if (pos >= end)
		v = seq_end;
	else if (pos < s->oldest || pos % PERFRELAY_SHARED_ALIGN != 0)
		v = floor; /* not a frame this ring holds */
	else
		v = frame_at(s, pos)->seq;
	return MIN(MAX(v, floor), seq_end);
}

/* Moves every member still behind `to` (seq `to_seq`) there, counting what it skips, before
 * the frames in front of `to` are overwritten. */
static void move_members(SharedRing *r, unsigned slot, uint64_t to, uint64_t to_seq, uint64_t head, uint64_t seq) {
	SharedSlot *s = &r->slots[slot];

	for (size_t i = 0; i < r->n_members; i++) {
		SharedMember *m = r->members[i];
		MemberSlot *ms = &m->slots[slot];
		uint64_t *pos = &m->page->ring[slot].pos;

		if (atomic_load_explicit(&m->hostile, memory_order_relaxed))
			continue;
		for (unsigned tries = 0;; tries++) {
			uint64_t cur = __atomic_load_n(pos, __ATOMIC_ACQUIRE), cur_seq;

			if (cur >= to)
				break; /* it read past them (or says so: its own loss) */
			/* At least what it passed before (seen_seq only grows, so that sent =
			 * seen - start - dropped never shrinks, whatever the member writes). */
			cur_seq = seq_at(s, cur, head, seq, ms->seen_seq);
			/* Full barrier: our store of ctl->evict is before it, our overwrite after. */
			if (__atomic_compare_exchange_n(
				    pos, &cur, to, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
				if (cur_seq < to_seq)
					member_slot_write(ms, to_seq, ms->dropped + (to_seq - cur_seq));
				break;
			}
			if (tries + 1 >= SHARED_RING_CAS_TRIES) {
				atomic_store_explicit(&m->hostile, true, memory_order_relaxed);
				break;
			}
		}
	}
}

/* Reclaims the frames before the first mark at or after `target` (<= head), or before the
 * published head if no mark lies between: the boundary and its seq come from the writer's own
 * memory, never from the ring set. The published head is at or after target (the hub
 * publishes every quarter of a ring, and target is at least 7/16 of one behind head), so
 * members are never moved past what they may read. */
static void reclaim(SharedRing *r, unsigned slot, uint64_t target, uint64_t head, uint64_t seq) {
	SharedSlot *s = &r->slots[slot];
	uint64_t width = (s->mask + 1) / SHARED_RING_MARKS, k = (target + width - 1) / width;
	uint64_t to = s->head, to_seq = s->head_seq;

	if (k < s->next_mark && s->marks[k % SHARED_RING_MARKS].pos <= s->head) {
		to = s->marks[k % SHARED_RING_MARKS].pos;
		to_seq = s->marks[k % SHARED_RING_MARKS].seq;
	}
	if (_unlikely_(to < target)) {
		/* Cannot happen (see above); if it did, everything written goes. */
		to = head;
		to_seq = seq;
	}
	/* Clients that copy frames check evict after the copy; members behind `to` are moved
	 * before a byte of those frames changes. */
	__atomic_store_n(&s->ctl->evict, to, __ATOMIC_SEQ_CST);
	move_members(r, slot, to, to_seq, head, seq);
	atomic_thread_fence(memory_order_seq_cst);
	s->oldest = to;
}

/* A frame starts at pos: it is the mark of every boundary it reached first. */
static void mark_frame(SharedSlot *s, uint64_t pos, uint64_t seq) {
	uint64_t width = (s->mask + 1) / SHARED_RING_MARKS;

	while (s->next_mark * width <= pos) {
		s->marks[s->next_mark % SHARED_RING_MARKS] = (SharedMark){ .pos = pos, .seq = seq };
		s->next_mark++;
	}
}

static void frame_write(SharedSlot *s, uint64_t pos, uint32_t size, uint32_t len, uint64_t seq) {
	struct perfrelay_shared_frame f = { .size = size, .len = len, .seq = seq };

	memcpy(s->data + (pos & s->mask), &f, sizeof(f));
}

bool shared_ring_reserve(SharedRing *r, unsigned slot, uint64_t *head, uint64_t seq, uint64_t len) {
	SharedSlot *s = &r->slots[slot];
	uint64_t size = s->mask + 1, fsize, off, pad, end;

	if (len == 0 || len > size / 4)
		return false;
	fsize = ALIGN_TO(sizeof(struct perfrelay_shared_frame) + len, (uint64_t) PERFRELAY_SHARED_ALIGN);
	off = *head & s->mask;
	pad = size - off < fsize ? size - off : 0;
	end = *head + pad + fsize;
	if (end > size && end - size > s->oldest)
		reclaim(r, slot, MIN(end - size + (size >> SHARED_RING_EVICT_SHIFT), *head), *head, seq);
	if (pad > 0) {
		mark_frame(s, *head, seq);
		frame_write(s, *head, (uint32_t) pad, 0, seq);
		*head += pad;
	}
	mark_frame(s, *head, seq);
	frame_write(s, *head, (uint32_t) fsize, (uint32_t) len, seq);
	*head += sizeof(struct perfrelay_shared_frame);
	if (_unlikely_((end / (size / 2)) != s->half)) {
		s->half = end / (size / 2);
		s->schema_reset = true;
	}
	return true;
}

bool shared_ring_take_schema_reset(SharedRing *r, unsigned slot) {
	SharedSlot *s = &r->slots[slot];

	if (_likely_(!s->schema_reset))
		return false;
	s->schema_reset = false;
	return true;
}

bool shared_ring_publish(SharedRing *r, unsigned slot, uint64_t head, uint64_t seq) {
	SharedSlot *s = &r->slots[slot];
	bool hostile = false, wake;

	s->head = head;
	__atomic_store_n(&s->head_seq, seq, __ATOMIC_RELAXED);
	__atomic_store_n(&s->ctl->head, head, __ATOMIC_RELEASE);
	/* Dekker with a member going to sleep: it stores `sleeping` and then loads the heads;
	 * we store the head and then load `sleeping`. One of us sees the other. A head that has
	 * not moved since the last check needs none: a member that went to sleep after that
	 * check saw this head, and the next head to move wakes it. */
	wake = head != s->woken;
	s->woken = head;
	atomic_thread_fence(memory_order_seq_cst);
	for (size_t i = 0; i < r->n_members; i++) {
		SharedMember *m = r->members[i];
		MemberSlot *ms = &m->slots[slot];
		uint64_t cur;

		if (atomic_load_explicit(&m->hostile, memory_order_relaxed)) {
			hostile = true;
			continue;
		}
		cur = __atomic_load_n(&m->page->ring[slot].pos, __ATOMIC_ACQUIRE);
		cur = seq_at(s, cur, head, seq, ms->seen_seq);
		if (cur != ms->seen_seq)
			member_slot_write(ms, cur, ms->dropped);
		if (wake && __atomic_load_n(&m->page->sleeping, __ATOMIC_RELAXED) &&
		    __atomic_exchange_n(&m->page->sleeping, 0, __ATOMIC_SEQ_CST))
			/* A full socket already holds a wakeup: nothing is lost by EAGAIN. */
			(void) !send(m->sock, "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	return hostile;
}

/* Members -------------------------------------------------------------------------------- */

int shared_member_new(SharedRing *r, int sock, SharedMember **ret) {
	_cleanup_(shared_member_freep) SharedMember *m = NULL;
	void *map;
	int k;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->ring = r;
	m->sock = sock;
	m->page_fd = -EBADF;
	m->slots = calloc(r->n_slots, sizeof(MemberSlot));
	if (!m->slots)
		return -ENOMEM;
	k = memfd_sealed("perfrelay-shared-member", PAGE_SIZE_MIN, false, &m->page_fd, &map);
	if (k < 0)
		return k;
	m->page = map;
	*ret = TAKE_PTR(m);
	return 0;
}

SharedMember *shared_member_free(SharedMember *m) {
	if (!m)
		return NULL;
	if (m->page)
		munmap(m->page, PAGE_SIZE_MIN);
	safe_close(m->page_fd);
	free(m->slots);
	free(m);
	return NULL;
}

int shared_member_fd(const SharedMember *m) {
	return m->page_fd;
}

bool shared_member_hostile(const SharedMember *m) {
	return atomic_load_explicit(&m->hostile, memory_order_relaxed);
}

bool shared_ring_has_hostile(const SharedRing *r) {
	for (size_t i = 0; i < r->n_members; i++)
		if (shared_member_hostile(r->members[i]))
			return true;
	return false;
}

size_t shared_ring_n_members(const SharedRing *r) {
	return r->n_members;
}

int shared_ring_attach_locked(SharedRing *r, SharedMember *m) {
	SharedMember **a = realloc(r->members, sizeof(*a) * (r->n_members + 1));

	if (!a)
		return -ENOMEM;
	r->members = a;
	for (unsigned i = 0; i < r->n_slots; i++) {
		SharedSlot *s = &r->slots[i];

		/* No writer runs: its last publish is where the member starts. */
		m->page->ring[i].pos = s->head;
		m->page->ring[i].start_seq = s->head_seq;
		m->slots[i].start_seq = m->slots[i].seen_seq = s->head_seq;
		s->schema_reset = true;
	}
	r->members[r->n_members++] = m;
	m->attached = true;
	return 0;
}

void shared_ring_detach_locked(SharedRing *r, SharedMember *m, bool final) {
	for (size_t i = 0; i < r->n_members; i++)
		if (r->members[i] == m) {
			memmove(r->members + i,
				r->members + i + 1,
				sizeof(*r->members) * (r->n_members - i - 1));
			r->n_members--;
			break;
		}
	for (unsigned i = 0; i < r->n_slots; i++) {
		SharedSlot *s = &r->slots[i];
		MemberSlot *ms = &m->slots[i];

		if (!atomic_load_explicit(&m->hostile, memory_order_relaxed)) {
			uint64_t cur = __atomic_load_n(&m->page->ring[i].pos, __ATOMIC_ACQUIRE);

			member_slot_write(ms, seq_at(s, cur, s->head, s->head_seq, ms->seen_seq), ms->dropped);
		}
		ms->end_seq = MAX(s->head_seq, ms->seen_seq);
	}
	m->attached = false;
	m->detached = true;
	m->final = final;
}

void shared_member_get_stats(const SharedMember *m, SharedMemberStats *ret) {
	SharedMemberStats st = {};

	for (unsigned i = 0; i < m->ring->n_slots; i++) {
		const MemberSlot *ms = &m->slots[i];
		uint64_t dropped, seen, end;

		member_slot_read(ms, &seen, &dropped);
		/* A member can pass frames of the batch being written, not yet published. */
		end = m->detached ? ms->end_seq :
				    __atomic_load_n(&m->ring->slots[i].head_seq, __ATOMIC_RELAXED);
		end = MAX(end, seen);
		st.offered += end - ms->start_seq;
		st.sent += seen - ms->start_seq - dropped;
		/* What it had not read when it left: still in its mapping for good if the ring set
		 * is never written again (written, as a socket's queue is when it is sent), else
		 * lost with the connection. */
		st.dropped += dropped;
		if (m->detached && m->final)
			st.sent += end - seen;
		else if (m->detached)
			st.dropped += end - seen;
	}
	*ret = st;
}
