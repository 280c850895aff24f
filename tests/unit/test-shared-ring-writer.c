/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* shared-ring-writer.c under real concurrency (and ThreadSanitizer in build-tsan): a writer thread per ring
 * writes numbered frames while member threads read them with libperfrelay's protocol (copy,
 * swap, resume where the writer moved them), one of them waiting until it is lapped, one
 * scribbling over its own page; members sleep and are woken through their sockets. Every frame
 * a member owns is checked byte for byte; each well-behaved member ends with read = sent,
 * lost = dropped, offered = sent + dropped = everything written while it was a member. Before
 * that, single-threaded: no user's descriptor writes the ring set, released it holds nothing,
 * the writer's reclaim never reads the ring set back, a head that did not move wakes nobody, and
 * a final detach counts what is left as sent. */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hub/shared-ring-writer.h"
#include "macro.h"

#include "unit-test.h"


#define N_SLOTS      2u
#define EVENTS       60000u /* per slot */
#define BATCH        32u
#define N_MEMBERS    4u /* 0, 1: fast; 2: slow (lapped); 3: hostile */
#define SCRATCH_SIZE (256u * 1024u)

static SharedRing *ring;
static pthread_mutex_t slot_lock[N_SLOTS];
static atomic_uint writers_done;

typedef struct Member {
	unsigned index;
	SharedMember *m;
	struct perfrelay_shared_member *page; /* the member's own mapping of its page */
	int sock[2];                          /* [0] the daemon's end, [1] the member's */
	uint64_t pos[N_SLOTS], next_seq[N_SLOTS];
	uint64_t read, lost, bad, wakeups;
	pthread_t thread;
} Member;

static Member members[N_MEMBERS];

static void lock_all(void) {
	for (unsigned i = 0; i < N_SLOTS; i++)
		pthread_mutex_lock(&slot_lock[i]);
}

static void unlock_all(void) {
	for (unsigned i = N_SLOTS; i > 0; i--)
		pthread_mutex_unlock(&slot_lock[i - 1]);
}

/* Frame n of a slot: its length and every byte follow from (slot, n). */
static uint32_t frame_len(unsigned slot, uint64_t n) {
	return 20u + (uint32_t) ((n * 7u + slot * 13u) % 300u);
}

static uint8_t frame_byte(unsigned slot, uint64_t n, uint32_t i) {
	return (uint8_t) (n * 31u + slot * 17u + i);
}

static void *writer(void *userdata) {
	unsigned slot = (unsigned) (uintptr_t) userdata;
	uint8_t *data = shared_ring_data(ring, slot);
	uint64_t mask = shared_ring_size(ring, slot) - 1, head = 0;

	for (uint64_t n = 0; n < EVENTS;) {
		pthread_mutex_lock(&slot_lock[slot]);
		for (unsigned b = 0; b < BATCH && n < EVENTS; b++, n++) {
			uint32_t len = frame_len(slot, n);

			ASSERT(shared_ring_reserve(ring, slot, &head, n, len));
			for (uint32_t i = 0; i < len; i++)
				data[(head + i) & mask] = frame_byte(slot, n, i);
			head = ALIGN_TO(head + len, (uint64_t) PERFRELAY_SHARED_ALIGN);
		}
		(void) shared_ring_publish(ring, slot, head, n);
		pthread_mutex_unlock(&slot_lock[slot]);
		if (n % 1024 == 0)
			sched_yield();
	}
	atomic_fetch_add(&writers_done, 1);
	return NULL;
}

/* The copy races with the writer by design (it is validated by the swap afterwards): byte by
 * byte, outside ThreadSanitizer's view, as a client in another process would read. */
__attribute__((no_sanitize("thread"))) static void racy_copy(uint8_t *dst, const uint8_t *src, size_t n) {
	for (size_t i = 0; i < n; i++)
		dst[i] = ((const volatile uint8_t *) src)[i];
}

/* One pass over a ring, libperfrelay's way. Returns the frames owned. */
static uint64_t member_read(Member *mb, unsigned slot, uint8_t *scratch) {
	const uint8_t *data = shared_ring_data(ring, slot);
	const struct perfrelay_shared_ctl *ctl = (const void *) (data - sizeof(struct perfrelay_shared_ctl));
	uint64_t size = shared_ring_size(ring, slot), *pos_word = &mb->page->ring[slot].pos;

	for (;;) {
		uint64_t head = __atomic_load_n(&ctl->head, __ATOMIC_ACQUIRE), pos = mb->pos[slot],
			 expected = pos;
		uint64_t off = pos & (size - 1),
			 n = MIN(MIN(head - pos, size - off), (uint64_t) SCRATCH_SIZE), q = 0;
		uint64_t owned = 0;

		if (head == pos)
			return 0;
		racy_copy(scratch, data + off, n);
		while (n - q >= sizeof(struct perfrelay_shared_frame)) {
			struct perfrelay_shared_frame f;

			memcpy(&f, scratch + q, sizeof(f));
			if (f.size < sizeof(f) || f.size % PERFRELAY_SHARED_ALIGN || f.size > n - q ||
			    f.len > f.size - sizeof(f))
				break;
			q += f.size;
		}
		/* With nothing whole, the swap is of our position for itself: it fails if the
		 * writer moved us, and its release orders the copy before it (libperfrelay's
		 * shared_copy_ring(); a plain load would not on arm64). */
		if (!__atomic_compare_exchange_n(
			    pos_word, &expected, pos + q, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			/* Lapped: resume where the writer put us. */
			mb->pos[slot] = expected;
			continue;
		}
		if (q == 0) {
			mb->bad++; /* a broken frame at a position nobody moved: cannot happen */
			return 0;
		}
		mb->pos[slot] = pos + q;
		for (uint64_t p = 0; p < q;) {
			struct perfrelay_shared_frame f;

			memcpy(&f, scratch + p, sizeof(f));
			if (f.len > 0) {
				if (f.seq > mb->next_seq[slot])
					mb->lost += f.seq - mb->next_seq[slot];
				if (f.seq < mb->next_seq[slot] || f.len != frame_len(slot, f.seq))
					mb->bad++;
				else
					for (uint32_t i = 0; i < f.len; i++)
						if (scratch[p + sizeof(f) + i] != frame_byte(slot, f.seq, i)) {
							mb->bad++; /* torn, yet owned: the protocol failed */
							break;
						}
				mb->next_seq[slot] = f.seq + 1;
				mb->read++;
				owned++;
			}
			p += f.size;
		}
		return owned;
	}
}

static bool caught_up(const Member *mb) {
	for (unsigned s = 0; s < N_SLOTS; s++) {
		const uint8_t *data = shared_ring_data(ring, s);
		const struct perfrelay_shared_ctl *ctl =
			(const void *) (data - sizeof(struct perfrelay_shared_ctl));

		if (__atomic_load_n(&ctl->head, __ATOMIC_SEQ_CST) != mb->pos[s])
			return false;
	}
	return true;
}

static void *member_thread(void *userdata) {
	Member *mb = userdata;
	uint8_t *scratch = malloc(SCRATCH_SIZE);
	uint64_t passes = 0;

	ASSERT(scratch);
	for (;;) {
		uint64_t got = 0;

		if (mb->index == 3) {
			/* Hostile: its page is its own to ruin. */
			for (unsigned s = 0; s < N_SLOTS; s++)
				__atomic_store_n(
					&mb->page->ring[s].pos, (uint64_t) random() * 977u, __ATOMIC_RELAXED);
			if (atomic_load(&writers_done) == N_SLOTS)
				break;
			continue;
		}
		for (unsigned s = 0; s < N_SLOTS; s++)
			got += member_read(mb, s, scratch);
		if (mb->index == 2 && passes++ == 0)
			/* Slow: it waits until the writer is two rings ahead before it reads on. */
			while (atomic_load(&writers_done) < N_SLOTS &&
			       __atomic_load_n(
				       &((const struct perfrelay_shared_ctl
						  *) (shared_ring_data(ring, 0) - sizeof(struct perfrelay_shared_ctl)))
						->head,
				       __ATOMIC_ACQUIRE) < mb->pos[0] + 2 * shared_ring_size(ring, 0))
				usleep(1000);
		if (got > 0)
			continue;
		if (atomic_load(&writers_done) == N_SLOTS && caught_up(mb))
			break;
		/* Sleep the library's way: say so, look again, wait for the doorbell. */
		__atomic_store_n(&mb->page->sleeping, 1, __ATOMIC_SEQ_CST);
		if (!caught_up(mb) || atomic_load(&writers_done) == N_SLOTS) {
			__atomic_store_n(&mb->page->sleeping, 0, __ATOMIC_RELAXED);
			continue;
		}
		struct pollfd p = { .fd = mb->sock[1], .events = POLLIN };
		int k = poll(&p, 1, 5000);
		char b[64];

		if (k == 0 && !caught_up(mb) && atomic_load(&writers_done) < N_SLOTS)
			mb->bad++; /* a lost wakeup: new frames, and no doorbell for 5 s */
		if (k > 0 && read(mb->sock[1], b, sizeof(b)) > 0)
			mb->wakeups++;
		__atomic_store_n(&mb->page->sleeping, 0, __ATOMIC_RELAXED);
	}
	free(scratch);
	return NULL;
}

/* Writes `n` frames of `len` bytes into one slot and publishes them every `batch`. */
static uint64_t
	write_frames(SharedRing *r, unsigned slot, uint64_t *head, uint64_t seq, uint64_t n, uint32_t len) {
	for (uint64_t i = 0; i < n; i++, seq++) {
		ASSERT(shared_ring_reserve(r, slot, head, seq, len));
		memset(shared_ring_data(r, slot) + (*head & (shared_ring_size(r, slot) - 1)), 0x5a, len);
		*head = ALIGN_TO(*head + len, (uint64_t) PERFRELAY_SHARED_ALIGN);
		if (i % BATCH == BATCH - 1)
			(void) shared_ring_publish(r, slot, *head, seq + 1);
	}
	(void) shared_ring_publish(r, slot, *head, seq);
	return seq;
}

/* A user's read-write reopen of /proc/self/fd/N of the descriptor a client gets (the mode
 * refuses it). Returns the errno of the open, 0 if it opened. */
static int reopen_as_user(int fd) {
	char path[64];
	pid_t pid;
	int status;

	(void) snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		int k;

		/* Root drops to nobody (as root it would pass the mode); a user stays who it is. */
		if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0))
			_exit(100);
		k = open(path, O_RDWR | O_CLOEXEC);
		_exit(k >= 0 ? 0 : errno);
	}
	ASSERT(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* The descriptor a client gets cannot be made to write the ring set: it cannot be mapped
 * writable, nor reopened read-write by a user. Once released, the set's pages are gone even
 * where a former member still maps it (it reads zeros). */
static void test_readonly_reopen(void) {
	SharedRing *r;
	const uint8_t *view;
	uint64_t head = 0, size;
	int ro;

	ASSERT(shared_ring_new(1, 0, 1024 * 1024, &r) == 0);
	size = shared_ring_bytes(r);
	ro = shared_ring_open_readonly(r);
	ASSERT(ro >= 0);
	ASSERT(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0) == MAP_FAILED);
	ASSERT(reopen_as_user(ro) == EACCES);
	view = mmap(NULL, size, PROT_READ, MAP_SHARED, ro, 0);
	ASSERT(view != MAP_FAILED);
	write_frames(r, 0, &head, 0, 10, 100);
	ASSERT(head > 0 && view[4096 + sizeof(struct perfrelay_shared_ctl)] != 0);
	ASSERT(shared_ring_release(r) == 0);
	for (uint64_t i = 0; i < size; i += 4096)
		if (view[i] != 0 || view[i + 4095] != 0) {
			ASSERT(!"a released ring set still shows its bytes");
			break;
		}
	munmap((void *) view, size);
	close(ro);
	shared_ring_free(r);
}

/* Whatever the ring set holds, the writer's reclaim takes its frame boundaries from its own
 * memory: with every byte of the data zeroed behind it (the frame headers a reopen could once
 * zero), it keeps wrapping the ring, and a member's figures stay exact. */
static void test_reclaim_ignores_ring_contents(void) {
	SharedRing *r;
	SharedMember *m;
	SharedMemberStats st;
	int sock[2];
	uint64_t head = 0, seq = 0, size;
	struct perfrelay_shared_member *page;

	ASSERT(shared_ring_new(1, 0, 1024 * 1024, &r) == 0);
	size = shared_ring_size(r, 0);
	ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sock) == 0);
	ASSERT(shared_member_new(r, sock[0], &m) == 0);
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared_member_fd(m), 0);
	ASSERT(page != MAP_FAILED);
	ASSERT(shared_ring_attach_locked(r, m) == 0);
	for (unsigned lap = 0; lap < 8; lap++) {
		seq = write_frames(r, 0, &head, seq, size / 256, 300);
		memset(shared_ring_data(r, 0), 0, size);
	}
	ASSERT(head > 7 * size);
	ASSERT(!shared_member_hostile(m));
	shared_ring_detach_locked(r, m, false);
	shared_member_get_stats(m, &st);
	/* It never read: everything is dropped, exactly. */
	ASSERT(st.offered == seq);
	ASSERT(st.sent == 0);
	ASSERT(st.dropped == seq);
	munmap(page, 4096);
	shared_member_free(m);
	close(sock[0]);
	close(sock[1]);
	shared_ring_free(r);
}

/* A sleeping member is woken once per head that moved, never by a publish of the same head
 * (the idle flush), whatever it stores in `sleeping`; and after a final detach what it had not
 * read counts as sent (it stays in its mapping), after any other as dropped. */
static void test_wakeups_and_final_detach(void) {
	SharedRing *r;
	SharedMember *m[2];
	SharedMemberStats st;
	struct perfrelay_shared_member *page[2];
	int sock[2][2];
	uint64_t head = 0, seq;
	char b[64];

	ASSERT(shared_ring_new(1, 0, 1024 * 1024, &r) == 0);
	for (unsigned i = 0; i < 2; i++) {
		ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sock[i]) == 0);
		ASSERT(shared_member_new(r, sock[i][0], &m[i]) == 0);
		page[i] = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared_member_fd(m[i]), 0);
		ASSERT(page[i] != MAP_FAILED);
		ASSERT(shared_ring_attach_locked(r, m[i]) == 0);
	}
	seq = write_frames(r, 0, &head, 0, 10, 100);
	for (unsigned k = 0; k < 100; k++) {
		/* A client that keeps saying it sleeps, and an idle flush that publishes the
		 * same head: no doorbell. */
		__atomic_store_n(&page[0]->sleeping, 1, __ATOMIC_SEQ_CST);
		(void) shared_ring_publish(r, 0, head, seq);
	}
	ASSERT(recv(sock[0][1], b, sizeof(b), 0) < 0 && errno == EAGAIN);
	seq = write_frames(r, 0, &head, seq, 1, 100);
	ASSERT(recv(sock[0][1], b, sizeof(b), 0) == 1);
	ASSERT(__atomic_load_n(&page[0]->sleeping, __ATOMIC_SEQ_CST) == 0);

	shared_ring_detach_locked(r, m[0], true);
	shared_member_get_stats(m[0], &st);
	ASSERT(st.offered == 11 && st.sent == 11 && st.dropped == 0);
	shared_ring_detach_locked(r, m[1], false);
	shared_member_get_stats(m[1], &st);
	ASSERT(st.offered == 11 && st.sent == 0 && st.dropped == 11);
	for (unsigned i = 0; i < 2; i++) {
		munmap(page[i], 4096);
		shared_member_free(m[i]);
		close(sock[i][0]);
		close(sock[i][1]);
	}
	shared_ring_free(r);
}

int main(void) {
	pthread_t writers[N_SLOTS];
	SharedMemberStats st;

	test_readonly_reopen();
	test_reclaim_ignores_ring_contents();
	test_wakeups_and_final_detach();

	for (unsigned i = 0; i < N_SLOTS; i++)
		pthread_mutex_init(&slot_lock[i], NULL);
	ASSERT(shared_ring_new(N_SLOTS, 0, 1024 * 1024, &ring) == 0);
	ASSERT(shared_ring_size(ring, 0) == SHARED_RING_MIN);
	/* Too large for a ring: refused, never written. */
	{
		uint64_t head = 0;
		ASSERT(!shared_ring_reserve(ring, 0, &head, 0, SHARED_RING_MIN));
		ASSERT(head == 0);
	}

	for (unsigned i = 0; i < N_MEMBERS; i++) {
		Member *mb = &members[i];

		mb->index = i;
		ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, mb->sock) == 0);
		ASSERT(shared_member_new(ring, mb->sock[0], &mb->m) == 0);
		/* As a client maps it. */
		mb->page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared_member_fd(mb->m), 0);
		ASSERT(mb->page != MAP_FAILED);
		lock_all();
		ASSERT(shared_ring_attach_locked(ring, mb->m) == 0);
		unlock_all();
		for (unsigned s = 0; s < N_SLOTS; s++) {
			mb->pos[s] = mb->page->ring[s].pos;
			mb->next_seq[s] = mb->page->ring[s].start_seq;
		}
		ASSERT(pthread_create(&mb->thread, NULL, member_thread, mb) == 0);
	}
	for (unsigned s = 0; s < N_SLOTS; s++)
		ASSERT(pthread_create(&writers[s], NULL, writer, (void *) (uintptr_t) s) == 0);
	for (unsigned s = 0; s < N_SLOTS; s++)
		pthread_join(writers[s], NULL);
	for (unsigned i = 0; i < N_MEMBERS; i++)
		pthread_join(members[i].thread, NULL);

	for (unsigned i = 0; i < N_MEMBERS; i++) {
		Member *mb = &members[i];

		lock_all();
		shared_ring_detach_locked(ring, mb->m, false);
		unlock_all();
		shared_member_get_stats(mb->m, &st);
		printf("member %u: read %" PRIu64 ", lost %" PRIu64 ", woken %" PRIu64 "; offered %" PRIu64
		       ", sent %" PRIu64 ", dropped %" PRIu64 "%s\n",
		       i,
		       mb->read,
		       mb->lost,
		       mb->wakeups,
		       st.offered,
		       st.sent,
		       st.dropped,
		       shared_member_hostile(mb->m) ? " (hostile)" : "");
		CHECK(st.offered == st.sent + st.dropped, "member %u: offered = sent + dropped", i);
		CHECK(st.offered == (uint64_t) N_SLOTS * EVENTS, "member %u: offered everything", i);
		if (i == 3)
			continue;
		CHECK(mb->bad == 0, "member %u: %" PRIu64 " torn, misordered or unwoken", i, mb->bad);
		CHECK(mb->read == st.sent, "member %u: read = sent", i);
		CHECK(mb->lost == st.dropped, "member %u: lost = dropped", i);
		CHECK(!shared_member_hostile(mb->m), "member %u is not hostile", i);
	}
	CHECK(members[2].lost > 0, "the slow member was lapped");
	for (unsigned i = 0; i < N_MEMBERS; i++) {
		munmap(members[i].page, 4096);
		shared_member_free(members[i].m);
		close(members[i].sock[0]);
		close(members[i].sock[1]);
	}
	ASSERT(shared_ring_n_members(ring) == 0);
	shared_ring_free(ring);
	printf("%u events per ring, %d failures\n", EVENTS, failures);
	return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
