/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libperfrelay's shared path (docs/shared-ring.md): the ring set the daemon shares with the
 * subscribers of one subscription, mapped read-only but for this client's member page; frames
 * are copied out, checked against the writer's position, and handed to the same parsers as the
 * socket stream's bytes. Nothing in the mapping is trusted: the daemon and every other member
 * can write it. */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json-util.h"
#include "lib/libperfrelay-internal.h"
#include "macro.h"
#include "time-util.h"

/* The ring set and the member page, unmapped (the scratch stays). */
void shared_unmap(Shared *s) {
	if (s->map)
		munmap(s->map, s->map_size);
	if (s->page)
		munmap(s->page, sizeof(struct perfrelay_shared_member));
	s->map = NULL;
	s->page = NULL;
	s->n_rings = 0;
}


_Static_assert(
	BUFFER_SIZE >= sizeof(struct perfrelay_shared_frame) + PERFRELAY_SHARED_FRAME_MAX + 64u,
	"a whole frame fits the copy room, with a lost notice in front");


/* The copy out of a ring races with the daemon's writes by design: the swap after it tells
 * whether it was whole (docs/shared-ring.md). Under ThreadSanitizer (build-tsan) it is made byte
 * by byte through volatile loads outside its view, as the daemon in another process would not be
 * seen either; elsewhere it is memcpy(). */
#if defined(__SANITIZE_THREAD__)
#define SHARED_RACY_COPY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHARED_RACY_COPY 1
#endif
#endif
#ifdef SHARED_RACY_COPY
__attribute__((no_sanitize("thread"))) static void racy_copy(uint8_t *dst, const uint8_t *src, size_t n) {
	for (size_t i = 0; i < n; i++)
		dst[i] = ((const volatile uint8_t *) src)[i];
}
#else
#define racy_copy memcpy
#endif

static bool pow2(uint64_t x) {
	return x != 0 && (x & (x - 1)) == 0;
}

/* Maps the ring set and the member page the daemon passed (with the hello, or a "reshared"
 * line), after checking that the layout is one this library reads and every ring lies inside
 * the mapping; the cursors start where the member page says. */
static int shared_map(perfrelay_client *c, Shared *s, unsigned n_rings) {
	const struct perfrelay_shared_header *h;
	struct stat st;
	void *map;

	if (c->n_hello_fds != 2 || n_rings == 0 || n_rings > PERFRELAY_SHARED_RINGS_MAX)
		return -EPROTO;
	if (fstat(c->hello_fds[0], &st) < 0)
		return -errno;
	if ((uint64_t) st.st_size < sizeof(*h) || (uint64_t) st.st_size > SIZE_MAX)
		return -EPROTO;
	map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_SHARED, c->hello_fds[0], 0);
	if (map == MAP_FAILED)
		return -errno;
	s->map = map;
	s->map_size = (size_t) st.st_size;
	map = mmap(
		NULL,
		sizeof(struct perfrelay_shared_member),
		PROT_READ | PROT_WRITE,
		MAP_SHARED,
		c->hello_fds[1],
		0);
	if (map == MAP_FAILED)
		return -errno;
	s->page = map;
	c->hello_fds[0] = safe_close(c->hello_fds[0]);
	c->hello_fds[1] = safe_close(c->hello_fds[1]);
	c->n_hello_fds = 0;

	h = (const struct perfrelay_shared_header *) s->map;
	if (h->magic != PERFRELAY_SHARED_MAGIC || h->version != PERFRELAY_SHARED_VERSION ||
	    h->n_rings != n_rings || h->size != s->map_size)
		return -EPROTO;
	s->n_rings = n_rings;
	s->next_ring = 0;
	for (unsigned i = 0; i < n_rings; i++) {
		uint64_t off = h->ring[i].offset, size = h->ring[i].size;

		if (!pow2(size) || size < 4096 || off % 64 != 0 || off < sizeof(*h) ||
		    off > s->map_size - sizeof(struct perfrelay_shared_ctl) ||
		    size > s->map_size - off - sizeof(struct perfrelay_shared_ctl))
			return -EPROTO;
		s->ring[i] = (SharedCursor){
			.ctl = (const struct perfrelay_shared_ctl *) (s->map + off),
			.data = s->map + off + sizeof(struct perfrelay_shared_ctl),
			.mask = size - 1,
			.pos = __atomic_load_n(&s->page->ring[i].pos, __ATOMIC_ACQUIRE),
			.next_seq = s->page->ring[i].start_seq,
		};
	}
	return 0;
}

int shared_setup(perfrelay_client *c, unsigned n_rings) {
	Shared *s;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	c->shared = s;
	s->scratch_mem = malloc(BUFFER_SIZE + 8);
	if (!s->scratch_mem)
		return -ENOMEM;
	s->scratch = s->scratch_mem + 4;
	r = shared_map(c, s, n_rings);
	if (r < 0)
		return r;
	/* What came after the hello on the socket is wakeups, not events. */
	c->start = c->scanned = c->end = 0;
	return 0;
}

/* After a "reshared" line, once the old rings are read out: the new ring set, whose seqs start
 * afresh (nothing was lost in the move: the daemon stopped writing the old set only after it
 * wrote the new one). */
static int shared_switch(perfrelay_client *c) {
	Shared *s = c->shared;
	unsigned n = s->reshared_rings;

	s->reshared_rings = 0;
	shared_unmap(s);
	return shared_map(c, s, n);
}

/* The whole frames at the start of scratch[0, n): their length, 0 if the first is broken (a
 * copy the daemon overwrote meanwhile, which the swap then rejects). */
static size_t shared_whole_frames(const uint8_t *scratch, size_t n, uint64_t *ret_first, uint64_t *ret_last) {
	uint64_t first = UINT64_MAX, last = 0;
	size_t q = 0;

	while (n - q >= sizeof(struct perfrelay_shared_frame)) {
		struct perfrelay_shared_frame f;

		memcpy(&f, scratch + q, sizeof(f));
		if (f.size < sizeof(f) || f.size % PERFRELAY_SHARED_ALIGN != 0 || f.size > n - q ||
		    f.len > f.size - sizeof(f))
			break;
		if (f.len > 0) {
			if (first == UINT64_MAX)
				first = f.seq;
			last = f.seq;
		}
		q += f.size;
	}
	*ret_first = first;
	*ret_last = last;
	return q;
}

/* Copies the frames one ring holds beyond this client's position into scratch[0, s->end),
 * owned once the swap of the member page's position succeeds, and notes in s->lost what the
 * daemon reclaimed before we got to it. Returns 1 with frames, 0 if the ring has nothing new, or
 * -EBADMSG. `room` bounds the copy. */
static int shared_copy_ring(Shared *s, SharedCursor *r, uint64_t *pos_word, size_t room) {
	for (;;) {
		uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE), expected = r->pos,
			 first_seq, last_seq;
		uint64_t off = r->pos & r->mask;
		size_t n, m;

		if (head == r->pos)
			return 0;
		n = (size_t) MIN(MIN(head - r->pos, r->mask + 1 - off), (uint64_t) room);
		racy_copy(s->scratch, r->data + off, n);
		m = shared_whole_frames(s->scratch, n, &first_seq, &last_seq);
		if (m == 0) {
			/* Overwritten while we copied, if the daemon moved us on. A swap of our
			 * position for itself tells: its release orders the copy's loads before
			 * it, so if it succeeds the daemon had not moved us (it moves us before it
			 * overwrites) and the frame was broken as written. A plain load would not
			 * do on weakly ordered CPUs (arm64): nothing would order the copy before
			 * it, and it could return the old position. */
			if (__atomic_compare_exchange_n(
				    pos_word, &expected, expected, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				return -EBADMSG;
			r->pos = expected;
			continue;
		}
		/* The copy was whole if the daemon did not move us meanwhile: it moves a member
		 * behind the frames it reclaims before it writes over them. */
		if (!__atomic_compare_exchange_n(
			    pos_word, &expected, r->pos + m, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			r->pos = expected;
			continue;
		}
		r->pos += m;
		s->next = 0;
		s->end = m;
		s->sub = s->sub_end = 0;
		if (first_seq != UINT64_MAX) {
			/* Only the first event can follow a gap: the rest were copied in a row. */
			if (first_seq > r->next_seq)
				s->lost += first_seq - r->next_seq;
			r->next_seq = last_seq + 1;
		}
		return 1;
	}
}

/* Fills scratch from the next ring with news; see shared_copy_ring(). */
static int shared_copy(perfrelay_client *c, size_t room) {
	Shared *s = c->shared;

	for (unsigned k = 0; k < s->n_rings; k++) {
		unsigned i = (s->next_ring + k) % s->n_rings;
		int r = shared_copy_ring(s, &s->ring[i], &s->page->ring[i].pos, room);

		if (r != 0) {
			s->next_ring = (i + 1) % s->n_rings;
			return r;
		}
	}
	return 0;
}

static bool shared_has_data(const Shared *s) {
	for (unsigned i = 0; i < s->n_rings; i++)
		if (__atomic_load_n(&s->ring[i].ctl->head, __ATOMIC_SEQ_CST) != s->ring[i].pos)
			return true;
	return false;
}

/* A "reshared" line: the daemon moved this member to a new ring set of `rings` rings. */
static bool shared_reshared_line(const char *line, size_t len, uint64_t *ret_rings) {
	_cleanup_(json_object_putp) json_object *o = parse_object(line, len);
	const char *type = o ? get_string(o, "type") : NULL;
	json_object *shared;

	if (!type || !streq(type, "reshared") || !json_object_object_get_ex(o, "shared", &shared) ||
	    !json_object_is_type(shared, json_type_object) || !get_uint(shared, "rings", ret_rings))
		return false;
	return *ret_rings > 0;
}

/* A notice of records lost upstream: a "lost" line (the daemon sends no other "lost" line on
 * the socket of a shared member). */
static bool shared_notice_line(const char *line, size_t len) {
	_cleanup_(json_object_putp) json_object *o = parse_object(line, len);
	const char *type = o ? get_string(o, "type") : NULL;

	return type && streq(type, "lost");
}

/* Reads the socket: wakeups are skipped; a "reshared" line moves us to new rings once the old
 * ones are read out; a notice waits in s->notices to be handed out; any other line is the
 * daemon's goodbye or error, and the end of the socket ends the stream too, both once the rings
 * are drained. */
static void shared_read_socket(perfrelay_client *c) {
	Shared *s = c->shared;
	char b[1024];

	/* Not past a "reshared" line: a second one's descriptors would find no room. A read
	 * that returns descriptors ends with the bytes they came with, so none is left. */
	while (s->socket_end == 0 && !s->reshared_rings) {
		ssize_t n = recv_keep_fds(c, b, sizeof(b));

		if (n == 0) {
			s->socket_end = -ECONNRESET;
			break;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				s->socket_end = -errno;
			break;
		}
		for (ssize_t i = 0; i < n && s->socket_end == 0 && !s->reshared_rings; i++) {
			if (b[i] != '\n') {
				if (s->line_len < PERFRELAY_NOTICE_MAX)
					s->line[s->line_len++] = b[i];
				continue;
			}
			if (s->line_len > 0) {
				uint64_t rings = 0;

				if (shared_reshared_line(s->line, s->line_len, &rings)) {
					/* Its descriptors came with its first byte. */
					s->reshared_rings = (unsigned) MIN(rings, (uint64_t) UINT_MAX);
					s->line_len = 0;
					continue;
				}
				if (shared_notice_line(s->line, s->line_len)) {
					if (s->notices_len + s->line_len + 1 <= sizeof(s->notices)) {
						memcpy(s->notices + s->notices_len, s->line, s->line_len);
						s->notices_len += s->line_len;
						s->notices[s->notices_len++] = '\n';
					}
					s->line_len = 0;
					continue;
				}
				s->socket_end = -ESHUTDOWN; /* a goodbye or an error: the line says which */
			}
		}
	}
}

/* Waits until scratch holds frames (1), the timeout passes (0), or the stream ends (negative
 * errno; -ESHUTDOWN: the daemon's last line is in s->line). `room` bounds the copy. */
static int shared_wait(perfrelay_client *c, size_t room, int timeout_ms, uint64_t *deadline) {
	Shared *s = c->shared;

	for (;;) {
		int r;

		r = shared_copy(c, room);
		if (r != 0)
			return r;
		shared_read_socket(c);
		if (s->reshared_rings || s->socket_end != 0) {
			/* The daemon wrote the rings before it sent the line we just read: what
			 * it published meanwhile is visible now, and read before we go on. */
			r = shared_copy(c, room);
			if (r != 0)
				return r;
		}
		if (s->reshared_rings) {
			r = shared_switch(c);
			if (r < 0)
				return r;
			continue;
		}
		if (s->socket_end != 0)
			return s->socket_end;
		if (s->notices_len > 0) {
			/* Nothing copied: what scratch held was read before we were called. */
			s->next = s->end = s->sub = s->sub_end = 0;
			return 1;
		}
		/* Dekker with the daemon's publish: we store `sleeping` then load the heads, it
		 * stores a head then loads `sleeping`. */
		__atomic_store_n(&s->page->sleeping, 1, __ATOMIC_SEQ_CST);
		if (shared_has_data(s)) {
			__atomic_store_n(&s->page->sleeping, 0, __ATOMIC_RELAXED);
			continue;
		}
		/* Armed: the daemon's "\n" makes the socket readable for the caller's poll(). */
		r = wait_readable(c->fd, timeout_ms, deadline);
		if (r <= 0)
			return r;
		__atomic_store_n(&s->page->sleeping, 0, __ATOMIC_RELAXED);
	}
}

/* The length of the first notice line waiting, with its newline. */
static size_t first_notice(const Shared *s) {
	const char *nl = memchr(s->notices, '\n', s->notices_len);

	return nl ? (size_t) (nl - s->notices) + 1 : 0;
}

static void drop_first_notice(Shared *s, size_t n) {
	memmove(s->notices, s->notices + n, s->notices_len - n);
	s->notices_len -= n;
}

/* JSON clients: the notices waiting, as lines for read_line() (they fit: the buffer is empty
 * whenever it is filled on the shared path, and holds more than every notice waiting). */
static int shared_take_notices(perfrelay_client *c) {
	Shared *s = c->shared;
	size_t n = s->notices_len;

	if (n > BUFFER_SIZE - c->end)
		n = first_notice(s);
	if (n == 0 || n > BUFFER_SIZE - c->end)
		return 0;
	memcpy(c->buf + c->end, s->notices, n);
	c->end += n;
	drop_first_notice(s, n);
	return 1;
}

/* JSON clients: the lines of the frames, behind a lost notice if some were lost, appended to
 * the buffer for read_line(); the daemon's last line ends the stream as on the socket. Notices
 * that came on the socket go first. */
int shared_fill(perfrelay_client *c, int timeout_ms, uint64_t *deadline) {
	Shared *s = c->shared;
	int r;

	if (c->start == c->end)
		c->start = c->scanned = c->end = 0;
	if (s->notices_len > 0 && shared_take_notices(c) > 0)
		return 1;
	/* Room for a lost notice in front of the lines. */
	r = shared_wait(c, BUFFER_SIZE - c->end - 64, timeout_ms, deadline);
	if (r == -ESHUTDOWN) {
		/* The stream's last line, as the socket would carry it. */
		memcpy(c->buf + c->end, s->line, s->line_len);
		c->end += s->line_len;
		c->buf[c->end++] = '\n';
		s->line_len = 0;
		s->socket_end = -ECONNRESET;
		return 1;
	}
	if (r <= 0)
		return r;
	if (s->end == 0 && s->notices_len > 0)
		return shared_take_notices(c) ?: 1; /* a notice came, no frame */
	if (s->lost > 0) {
		c->end += (size_t) snprintf(
			c->buf + c->end, 64, "{\"type\":\"lost\",\"count\":%" PRIu64 "}\n", s->lost);
		s->lost = 0;
	}
	for (size_t q = 0; q < s->end;) {
		struct perfrelay_shared_frame f;

		memcpy(&f, s->scratch + q, sizeof(f));
		memcpy(c->buf + c->end, s->scratch + q + sizeof(f), f.len);
		c->end += f.len;
		q += f.size;
	}
	s->next = s->end;
	return 1;
}

/* Binary clients read the frames in scratch where they are: the next record frame, checked as
 * the stream's are (frame_check()); schema and unit frames are the caller's to take. */
int shared_next_frame(
	perfrelay_client *c,
	const struct perfrelay_hdr **hdr,
	const void **payload,
	size_t *payload_size,
	int timeout_ms) {
	uint64_t deadline = 0;
	Shared *s = c->shared;

	for (;;) {
		const char *rec;
		uint32_t length;
		int r;

		if (_unlikely_(s->lost > 0)) {
			/* The stream's lost record, in front of the events after the gap. */
			struct perfrelay_hdr *h = c->record;

			*h = (struct perfrelay_hdr){
				.magic = PERFRELAY_MAGIC,
				.version = PERFRELAY_VERSION,
				.type = PERFRELAY_TYPE_LOST,
				.size = sizeof(*h) + sizeof(uint64_t),
			};
			memcpy(h + 1, &s->lost, sizeof(uint64_t));
			s->lost = 0;
			*hdr = h;
			*payload = h + 1;
			*payload_size = sizeof(uint64_t);
			return 1;
		}
		if (_unlikely_(s->notices_len > 0) && s->sub >= s->sub_end) {
			/* A notice: a lost record of count 0 with the JSON behind the count, as
			 * the socket stream carries it; between frames, never between a unit
			 * frame and its record. */
			struct perfrelay_hdr *h = c->record;
			size_t n = first_notice(s), len = n > 0 ? n - 1 : 0;
			uint64_t zero = 0;

			if (n == 0 || sizeof(*h) + sizeof(zero) + len > PERFRELAY_RECORD_MAX) {
				s->notices_len = 0; /* cannot happen: lines end in \n, within bounds */
				continue;
			}
			*h = (struct perfrelay_hdr){
				.magic = PERFRELAY_MAGIC,
				.version = PERFRELAY_VERSION,
				.type = PERFRELAY_TYPE_LOST,
				.size = (uint16_t) (sizeof(*h) + sizeof(zero) + len),
			};
			memcpy(h + 1, &zero, sizeof(zero));
			memcpy((uint8_t *) (h + 1) + sizeof(zero), s->notices, len);
			drop_first_notice(s, n);
			*hdr = h;
			*payload = h + 1;
			*payload_size = sizeof(zero) + len;
			return 1;
		}
		if (s->sub < s->sub_end) {
			if (s->sub_end - s->sub < 4)
				return fail(c, -EBADMSG);
			length = frame_length_at(s->scratch + s->sub);
			if (length > s->sub_end - s->sub - 4)
				return fail(c, -EBADMSG);
			rec = (const char *) s->scratch + s->sub + 4;
			r = frame_check(rec, length);
			if (r < 0)
				return fail(c, r);
			s->sub += 4 + (size_t) length;
			frame_out(c, rec, length, hdr, payload, payload_size);
			return 1;
		}
		if (s->next < s->end) {
			struct perfrelay_shared_frame f;

			memcpy(&f, s->scratch + s->next, sizeof(f));
			s->sub = s->next + sizeof(f);
			s->sub_end = s->sub + f.len;
			s->next += f.size;
			continue;
		}
		r = shared_wait(c, BUFFER_SIZE, timeout_ms, &deadline);
		if (r == -ESHUTDOWN)
			r = -ECONNRESET; /* binary streams end without a line */
		if (r < 0 && r != -EINTR)
			return fail(c, r);
		if (r <= 0)
			return r;
	}
}
