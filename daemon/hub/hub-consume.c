/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The main thread's side of the hub's queues: whole frames counted, written to a client's fd
 * (hub_client_flush()), handed to a client's consumer (hub_client_consume()), or discarded. */
#include <assert.h>
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/stat.h"
#include "hub/encode.h"
#include "hub/hub-internal.h"
#include "macro.h"
#include "kernel/perfring.h"

/* Whether the frame at `pos` is a "lost" notice (or a schema or unit frame) rather than an event.
 * Asked once for each frame, in order. */
static bool frame_is_lost(const HubClient *c, HubQueue *q, uint64_t pos) {
	if (c->o.format == HUB_FORMAT_BINARY) {
		struct perfrelay_hdr hdr;

		/* Decoded records never carry these types (decode.c rejects them). */
		perfring_copy(q->buf, q->mask, pos + sizeof(uint32_t), &hdr, sizeof(hdr));
		return hdr.type == PERFRELAY_TYPE_LOST || hdr.type == PERFRELAY_TYPE_SCHEMA ||
			hdr.type == PERFRELAY_TYPE_UNIT;
	} else if (c->o.format == HUB_FORMAT_JSON_TAGGED) {
		HubTag tag;

		perfring_copy(q->buf, q->mask, pos, &tag, sizeof(tag));
		return tag.flags & HUB_TAG_LOST;
	} else {
		/* By position (HubQueue.lost_at): a line's text cannot tell, since a third-party
		 * type's name is its producer's choice. The next mark is either this frame's, or
		 * one further on, or (not written yet) UINT64_MAX or an old one behind pos. */
		uint64_t at;

		if (!q->lost_at)
			return false; /* a shared ring's: its members' losses are told by themselves */
		at = __atomic_load_n(&q->lost_at[q->lost_seen % HUB_LOST_MARKS], __ATOMIC_RELAXED);
		if (at != pos)
			return false;
		__atomic_store_n(&q->lost_seen, q->lost_seen + 1, __ATOMIC_RELEASE);
		return true;
	}
}

/* The length of the whole frame at `pos`, if it ends at or before `end`; else 0. Frames in
 * [frame, head) are whole: the reader publishes head only at frame boundaries. Only for bytes
 * not yet handed back to the reader (at or after tail). */
static uint64_t frame_length(const HubClient *c, const HubQueue *q, uint64_t pos, uint64_t end) {
	if (c->o.format == HUB_FORMAT_BINARY) {
		uint32_t len;

		if (end - pos < sizeof(len))
			return 0;
		perfring_copy(q->buf, q->mask, pos, &len, sizeof(len));
		len = le32toh(len);
		return end - pos >= sizeof(uint32_t) + (uint64_t) len ? sizeof(uint32_t) + (uint64_t) len : 0;
	}
	if (c->o.format == HUB_FORMAT_JSON_TAGGED) {
		HubTag tag;

		if (end - pos < sizeof(tag))
			return 0;
		perfring_copy(q->buf, q->mask, pos, &tag, sizeof(tag));
		return end - pos >= sizeof(tag) + (uint64_t) tag.len ? sizeof(tag) + (uint64_t) tag.len : 0;
	}
	/* A JSON line ends at its newline, the only one in it (JSON escapes newlines). */
	for (uint64_t p = pos; p < end;) {
		uint64_t off = p & q->mask, n = MIN(end - p, q->mask + 1 - off);
		const uint8_t *nl = memchr(q->buf + off, '\n', n);

		if (nl)
			return p + (uint64_t) (nl - (q->buf + off)) + 1 - pos;
		p += n;
	}
	return 0;
}

/* Counts the events among the frames that end at or before `end` (<= head), starting at
 * q->frame; moves q->frame past them and remembers the end of the frame `end` cuts. Must run
 * before tail moves past the frames it reads. Returns the number of events (not "lost"
 * notices). */
static uint64_t queue_count_frames(const HubClient *c, HubQueue *q, uint64_t end, uint64_t head) {
	uint64_t n = 0;

	while (q->frame < end) {
		if (q->frame_end == 0) {
			uint64_t len = frame_length(c, q, q->frame, head);

			assert(len > 0); /* head is at a frame boundary */
			if (len == 0)
				break;
			q->frame_end = q->frame + len;
			q->frame_event = !frame_is_lost(c, q, q->frame);
		}
		if (q->frame_end > end)
			break;
		n += q->frame_event;
		q->frame = q->frame_end;
		q->frame_end = 0;
	}
	return n;
}

void hub_client_discard(HubClient *c) {
	assert(!c->attached);
	for (unsigned i = 0; i < c->hub->n_readers; i++) {
		HubQueue *q = &c->q[i];
		/* No reader touches a detached client: head is final. A frame partly written
		 * counts as unsent: the client cannot use half a line. */
		uint64_t head = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);

		q->unsent += queue_count_frames(c, q, head, head);
		q->tail = head;
	}
	c->partial = -1;
}

int hub_client_flush(HubClient *c) {
	unsigned n = c->hub->n_readers, n_iov = 0;
	struct iovec *iov = c->iov;
	uint64_t *avail = c->avail, total = 0;
	unsigned *order = c->order;
	ssize_t k;

	assert(c->o.format != HUB_FORMAT_JSON_TAGGED); /* its frames go to hub_client_consume() */

	/* A partly written queue goes first so no line is ever interleaved with another. */
	for (unsigned i = 0, j = 0; i < n; i++) {
		unsigned qi = (c->partial >= 0) ? (c->partial + i) % n : i;
		HubQueue *q = &c->q[qi];
		uint64_t head = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
		uint64_t off = q->tail & q->mask, len = head - q->tail, first = MIN(len, q->mask + 1 - off);

		order[j++] = qi;
		avail[qi] = len;
		if (len == 0)
			continue;
		iov[n_iov++] = (struct iovec){ q->buf + off, first };
		if (len > first)
			iov[n_iov++] = (struct iovec){ q->buf, len - first };
		total += len;
	}
	if (total == 0) {
		c->blocked = false;
		return 1;
	}

	c->blocked = false;
	k = writev(c->fd, iov, n_iov);
	if (k < 0) {
		if (errno != EAGAIN && errno != EINTR)
			return negative_errno();
		c->blocked = errno == EAGAIN;
		return 0;
	}

	c->bytes_sent += k;
	c->partial = -1;
	bool all = (uint64_t) k == total;
	for (unsigned j = 0; j < n && k > 0; j++) {
		HubQueue *q = &c->q[order[j]];
		uint64_t take = MIN((uint64_t) k, avail[order[j]]);

		if (take < avail[order[j]])
			c->partial = order[j];
		/* Counted before the tail moves: from then on the reader may overwrite them. */
		q->sent += queue_count_frames(c, q, q->tail + take, q->tail + avail[order[j]]);
		__atomic_store_n(&q->tail, q->tail + take, __ATOMIC_RELEASE);
		k -= take;
	}
	/* A short write means the fd's buffer is full: wait for EPOLLOUT. */
	c->blocked = !all;
	return all ? 1 : 0;
}

void hub_client_consume(HubClient *c, void (*fn)(const HubFrame *f, void *userdata), void *userdata) {
	assert(c->o.format == HUB_FORMAT_JSON_TAGGED);
	for (unsigned i = 0; i < c->hub->n_readers; i++) {
		HubQueue *q = &c->q[i];
		uint64_t head = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE), pos = q->tail;

		/* The reader publishes head only at frame boundaries: [tail, head) is whole frames. */
		while (pos < head) {
			HubTag tag;
			HubFrame f;

			perfring_copy(q->buf, q->mask, pos, &tag, sizeof(tag));
			if (_unlikely_(
				    tag.len == 0 || tag.len > ENCODE_JSON_MAX ||
				    head - pos < sizeof(tag) + tag.len)) {
				/* Cannot happen: the reader wrote it. Never read past head. */
				assert(!"a broken tagged frame");
				break;
			}
			perfring_copy(q->buf, q->mask, pos + sizeof(tag), c->line, tag.len);
			c->line[tag.len - 1] = 0; /* the newline */
			f = (HubFrame){
				.type = tag.type,
				.known = tag.flags & HUB_TAG_KNOWN,
				.value = tag.value,
				.notice = tag.flags & HUB_TAG_NOTICE,
				.line = c->line,
				.len = tag.len - 1,
			};
			fn(&f, userdata);
			if (!(tag.flags & HUB_TAG_LOST))
				q->sent++;
			c->bytes_sent += sizeof(tag) + tag.len;
			pos += sizeof(tag) + tag.len;
		}
		/* Whole frames only: the frame walk of hub_client_discard() starts here. */
		q->frame = pos;
		q->frame_end = 0;
		__atomic_store_n(&q->tail, pos, __ATOMIC_RELEASE);
	}
	c->blocked = false;
}
