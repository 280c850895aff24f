/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A subscriber's stream out of the history (history-stream.h). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "event.h"
#include "features/history/history-stream.h"
#include "hub/encode.h"
#include "hub/filter.h"
#include "time-util.h"
#include "unit-frame.h"

/* Events of different CPUs reach the writer out of time order by at most about a cut interval:
 * "until" stops at the first block that begins this much after it. */
#define HISTORY_REORDER_NS (2 * NSEC_PER_SEC)
#define HISTORY_LINE_MAX   (ENCODE_JSON_MAX + 32u + HISTORY_CURSOR_MAX)
/* A generous bound of a zstd decompression context (ZSTD_estimateDCtxSize() is not in the
 * library's stable API): about 160 KiB for zstd 1.5. */
#define ZSTD_DCTX_BYTES    (256u * 1024u)
/* The hub's lost record (hub-internal.h): a header and the count. */
#define HUB_LOST_SIZE      (sizeof(struct perfrelay_hdr) + sizeof(uint64_t))

struct HistoryStream {
	HistoryStore *store;
	const Subscription *sub;
	ZSTD_DCtx *dctx;
	uint8_t *comp, *raw, *copy;
	char *line;

	HistoryPos pos; /* the block read now, or the next one */
	bool loaded;
	size_t raw_len, raw_off;
	uint32_t index;      /* events of the loaded block passed */
	uint32_t block_size; /* of the loaded block, header included */
	uint64_t first_ordinal;
	int64_t realtime_offset_ns;
	uint64_t next_ordinal; /* the ordinal the next event should have: more is a gap */
	bool have_next;
	int fd;
	uint64_t fd_segment;
	char unit[PERFRELAY_UNIT_NAME_MAX];
	bool has_unit;             /* a unit frame for the record that follows */
	size_t unit_off, unit_len; /* that frame's record in raw (binary streams re-send it) */
	uint64_t events;
	char gap[320]; /* gap lines (or frames) waiting for room */
	size_t gap_len;
};

static size_t block_find(const HistorySegment *g, uint64_t offset) {
	size_t lo = 0, hi = g->n_blocks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (g->blocks[mid].offset == offset)
			return mid;
		if (g->blocks[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

/* The first segment with an id >= id, or NULL. Under the lock. */
static HistorySegment *segment_from(HistoryStore *s, uint64_t id) {
	for (size_t i = 0; i < s->n_segs; i++)
		if (s->segs[i].id >= id)
			return &s->segs[i];
	return NULL;
}

/* The block at h->pos, moving on to the next segment at a segment's end, and to the oldest held
 * when h->pos's was removed. 1 and the block, or 0: not written yet. */
static int next_block(HistoryStream *h, HistoryBlock *ret) {
	HistoryStore *s = h->store;
	int found = 0;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		HistorySegment *g = segment_from(s, h->pos.segment);
		size_t i;

		if (!g)
			break; /* the segment to come */
		if (g->id != h->pos.segment)
			/* Removed, or set aside: on with the next one (the ordinals tell the gap). */
			h->pos = (HistoryPos){ .segment = g->id,
					       .offset = sizeof(struct history_segment_header) };
		i = block_find(g, h->pos.offset);
		if (i != SIZE_MAX) {
			*ret = g->blocks[i];
			h->realtime_offset_ns = g->realtime_offset_ns;
			found = 1;
			break;
		}
		if (h->pos.offset < g->end || g == &s->segs[s->n_segs - 1])
			break; /* its next block is not written yet */
		h->pos = (HistoryPos){ .segment = g->id + 1, .offset = sizeof(struct history_segment_header) };
	}
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* Whether a block may hold an event of the subscription's units (true without a unit filter). */
static bool may_hold_units(const Subscription *sub, const HistoryBlock *b) {
	if (sub->n_units == 0)
		return true;
	for (size_t i = 0; i < sub->n_units; i++)
		if (history_unit_bloom_has(b->units, sub->units[i]))
			return true;
	return false;
}

/* Past block b without reading it further: its events are behind the position. */
static void pass_block(HistoryStream *h, const HistoryBlock *b) {
	h->next_ordinal = b->first_ordinal + b->n_events;
	h->have_next = true;
	h->pos.offset += b->size;
	h->pos.skip = 0;
}

_Static_assert(
	3 * sizeof(uint32_t) + 2 * sizeof(struct perfrelay_hdr) + HISTORY_CURSOR_MAX +
			sizeof(struct perfrelay_unit) + PERFRELAY_UNIT_NAME_MAX + PERFRELAY_RECORD_MAX <=
		HISTORY_LINE_MAX,
	"an event's frames fit in a line's room");
_Static_assert(HISTORY_CURSOR_MAX == PERFRELAY_CURSOR_MAX, "a cursor frame holds a cursor");

/* A "lost" line of `count` events (its JSON, json_len bytes) in the subscriber's format into buf
 * (room bytes): the line, or a binary stream's PERFRELAY_TYPE_LOST record with the count and the
 * JSON behind it, as a live stream's notices (docs/protocol.md). Its length, 0 if no room. */
static size_t lost_put(
	const HistoryStream *h, uint64_t count, const char *json, size_t json_len, char *buf, size_t room) {
	struct perfrelay_hdr hdr = {
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = PERFRELAY_TYPE_LOST,
		.size = (uint16_t) (sizeof(hdr) + sizeof(count) + json_len),
	};
	uint32_t le = htole32(hdr.size);

	if (h->sub->format != SUBSCRIPTION_FORMAT_BINARY) {
		if (json_len + 1 > room)
			return 0;
		memcpy(buf, json, json_len);
		buf[json_len] = '\n';
		return json_len + 1;
	}
	if (sizeof(le) + hdr.size > room)
		return 0;
	memcpy(buf, &le, sizeof(le));
	memcpy(buf + sizeof(le), &hdr, sizeof(hdr));
	memcpy(buf + sizeof(le) + sizeof(hdr), &count, sizeof(count));
	memcpy(buf + sizeof(le) + sizeof(hdr) + sizeof(count), json, json_len);
	return sizeof(le) + hdr.size;
}

/* The "lost" line of a gap with its reason into buf; its length. */
static size_t gap_put(const HistoryStream *h, uint64_t count, const char *reason, char *buf, size_t room) {
	char json[128];
	int n = snprintf(
		json, sizeof(json), "{\"type\":\"lost\",\"count\":%" PRIu64 ",\"reason\":\"%s\"}", count, reason);

	return lost_put(h, count, json, (size_t) n, buf, room);
}

static void gap_line(HistoryStream *h, uint64_t count, const char *reason) {
	if (count > 0)
		h->gap_len += gap_put(h, count, reason, h->gap + h->gap_len, sizeof(h->gap) - h->gap_len);
}

static int load_block(HistoryStream *h, const HistoryBlock *b) {
	struct history_block_header bh;
	ssize_t n;

	if (h->fd < 0 || h->fd_segment != h->pos.segment) {
		char name[32];

		h->fd = safe_close(h->fd);
		history_segment_name(h->pos.segment, name, sizeof(name));
		h->fd = openat(h->store->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (h->fd < 0)
			return -errno;
		h->fd_segment = h->pos.segment;
	}
	n = history_block_read(h->fd, b->offset, h->dctx, h->comp, h->raw, &bh);
	if (n < 0)
		return (int) n;
	if (bh.first_ordinal != b->first_ordinal || bh.n_events != b->n_events)
		return -EBADMSG;
	h->raw_len = (size_t) n;
	return 0;
}

/* The cursor of the event read now (the ordinal-th), into text. */
static void cursor_text(const HistoryStream *h, uint64_t ordinal, char text[static HISTORY_CURSOR_MAX]) {
	HistoryCursor c = {
		.segment = h->pos.segment,
		.offset = h->pos.offset,
		.index = h->index,
		.ordinal = ordinal,
	};

	memcpy(c.history_id, h->store->id, 16);
	history_cursor_format(&c, text);
}

/* A binary stream's frames for one event into h->line: its cursor frame (with "cursors"), its
 * unit frame (with "units", as the history holds it), then the record (docs/protocol.md,
 * "Binary format"). Their length, 0 for a record too long to be one. */
static size_t event_frames(HistoryStream *h, const uint8_t *rec, uint32_t len, uint64_t ordinal) {
	uint8_t *p = (uint8_t *) h->line;
	struct perfrelay_hdr hdr;
	size_t n = 0;
	uint32_t le;

	if (len > PERFRELAY_RECORD_MAX)
		return 0;
	memcpy(&hdr, rec, sizeof(hdr));
	if (h->sub->cursors) {
		char text[HISTORY_CURSOR_MAX];
		struct perfrelay_hdr c = hdr;
		size_t t;

		cursor_text(h, ordinal, text);
		t = strlen(text) + 1;
		c.type = PERFRELAY_TYPE_CURSOR;
		c.flags = 0;
		c.size = (uint16_t) (sizeof(c) + t);
		le = htole32(c.size);
		memcpy(p + n, &le, sizeof(le));
		memcpy(p + n + sizeof(le), &c, sizeof(c));
		memcpy(p + n + sizeof(le) + sizeof(c), text, t);
		n += sizeof(le) + c.size;
	}
	if (h->sub->unit_frames && h->has_unit) {
		le = htole32((uint32_t) h->unit_len);
		memcpy(p + n, &le, sizeof(le));
		memcpy(p + n + sizeof(le), h->raw + h->unit_off, h->unit_len);
		n += sizeof(le) + h->unit_len;
	}
	le = htole32(len);
	memcpy(p + n, &le, sizeof(le));
	memcpy(p + n + sizeof(le), rec, len);
	return n + sizeof(le) + len;
}

/* One event's line (or frames) into h->line: 0 if it is not for this subscriber, else its
 * length. */
static size_t event_line(HistoryStream *h, const uint8_t *rec, uint32_t len, uint64_t ordinal) {
	const Subscription *sub = h->sub;
	DecodedEvent ev;
	uint64_t rt;
	ssize_t n;

	if (decode_event(rec, len, &ev) != DECODE_OK)
		return 0;
	rt = (uint64_t) ((int64_t) ev.hdr.ts_ns + h->realtime_offset_ns);
	if ((sub->has_since && rt < sub->since_ns) || (sub->has_until && rt > sub->until_ns))
		return 0;
	if (!filter_match(sub, &ev, h->has_unit ? h->unit : NULL, NULL))
		return 0;
	if (sub->access != SUBSCRIPTION_ACCESS_ALL && ev.hdr.type == PERFRELAY_TYPE_EXEC &&
	    ev.record_size == sizeof(struct perfrelay_exec) && len <= PERFRELAY_RECORD_MAX) {
		/* Its ancestors may have run as others: a subscriber who sees its own uid's events
		 * gets none of them (the live stream keeps those the process table says are its
		 * own; the history cannot ask a table that has moved on). */
		uint32_t zero = 0;

		memcpy(h->copy, rec, len);
		memcpy(h->copy + offsetof(struct perfrelay_exec, n_ancestors), &zero, sizeof(zero));
		if (decode_event(h->copy, ev.record_size, &ev) != DECODE_OK)
			return 0;
		rec = h->copy;
	}
	if (sub->format == SUBSCRIPTION_FORMAT_BINARY)
		return event_frames(h, rec, len, ordinal);
	n = encode_json(&ev, h->has_unit ? h->unit : NULL, h->line, ENCODE_JSON_MAX);
	if (n < 2)
		return 0;
	if (sub->cursors) {
		char text[HISTORY_CURSOR_MAX];
		int k;

		cursor_text(h, ordinal, text);
		/* In place of the closing "}\n". */
		k = snprintf(h->line + n - 2, HISTORY_LINE_MAX - (size_t) n + 2, ",\"cursor\":\"%s\"}\n", text);
		n += k - 2;
	}
	return (size_t) n;
}

/* A lost record of the history into h->line: a gap, or a notice of records lost upstream. */
static size_t lost_line(HistoryStream *h, const uint8_t *rec, uint32_t len) {
	uint64_t count;

	if (len == HUB_LOST_SIZE) {
		memcpy(&count, rec + sizeof(struct perfrelay_hdr), sizeof(count));
		return gap_put(h, count, "history-behind", h->line, HISTORY_LINE_MAX);
	}
	if (len == sizeof(struct history_gap)) {
		struct history_gap g;

		memcpy(&g, rec, sizeof(g));
		return gap_put(
			h,
			g.count,
			g.reason == HISTORY_GAP_DISK ? "history-disk" : "history-behind",
			h->line,
			HISTORY_LINE_MAX);
	}
	if (len > HUB_LOST_SIZE + 1 && h->sub->access == SUBSCRIPTION_ACCESS_ALL) {
		/* A notice: its JSON follows the count. It may name other users' units: for those
		 * who see everything only. */
		const char *json = (const char *) rec + HUB_LOST_SIZE;
		size_t n = len - HUB_LOST_SIZE;

		memcpy(&count, rec + sizeof(struct perfrelay_hdr), sizeof(count));
		if (json[0] != '{' || memchr(json, '\n', n) || memchr(json, '\0', n) ||
		    n + 1 > HISTORY_LINE_MAX - HUB_LOST_SIZE)
			return 0;
		return lost_put(h, count, json, n, h->line, HISTORY_LINE_MAX);
	}
	return 0;
}

uint64_t history_stream_bytes(void) {
	return sizeof(HistoryStream) + HISTORY_BLOCK_COMP_MAX + HISTORY_BLOCK_RAW_MAX +
		PERFRELAY_RECORD_MAX + HISTORY_LINE_MAX + ZSTD_DCTX_BYTES;
}

ssize_t history_stream_read(HistoryStream *h, char *buf, size_t size) {
	size_t out = 0;
	unsigned blocks = 0;

	for (;;) {
		if (h->gap_len > 0) {
			if (out + h->gap_len > size)
				break;
			memcpy(buf + out, h->gap, h->gap_len);
			out += h->gap_len;
			h->gap_len = 0;
		}
		if (!h->loaded) {
			HistoryBlock b;
			int r;

			/* Its share of blocks read (a block its unit filter lets it pass is a 64th of
			 * one): what it has, or "ask again" (the gap line went out above). */
			if (blocks >= HISTORY_READ_BLOCKS * 64u)
				return out > 0 ? (ssize_t) out : -EINPROGRESS;
			if (!next_block(h, &b)) {
				if (out > 0)
					break;
				return h->sub->follow ? -EAGAIN : 0;
			}
			blocks += 64;
			if (h->sub->has_until && b.n_events > 0 &&
			    (uint64_t) ((int64_t) b.ts_min + h->realtime_offset_ns) >
				    h->sub->until_ns + HISTORY_REORDER_NS) {
				if (out > 0)
					break;
				return 0;
			}
			if (h->have_next && b.first_ordinal + h->pos.skip > h->next_ordinal)
				gap_line(h, b.first_ordinal + h->pos.skip - h->next_ordinal, "history-retention");
			if (!may_hold_units(h->sub, &b)) {
				/* None of its units is one the subscription names: not read. */
				blocks -= 63;
				pass_block(h, &b);
				continue;
			}
			r = load_block(h, &b);
			if (r < 0) {
				/* A damaged block (or one that cannot be read): its events are a gap. */
				gap_line(h, b.n_events - MIN(h->pos.skip, b.n_events), "history-damaged");
				pass_block(h, &b);
				continue;
			}
			h->block_size = b.size;
			h->loaded = true;
			h->raw_off = 0;
			h->index = 0;
			h->first_ordinal = b.first_ordinal;
			h->has_unit = false;
			continue; /* the gap line first */
		}

		while (h->raw_off + sizeof(uint32_t) + sizeof(struct perfrelay_hdr) <= h->raw_len) {
			const uint8_t *rec = h->raw + h->raw_off + sizeof(uint32_t);
			struct perfrelay_hdr hdr;
			uint32_t len;
			size_t n = 0;

			memcpy(&len, h->raw + h->raw_off, sizeof(len));
			if (len < sizeof(hdr) || len > h->raw_len - h->raw_off - sizeof(len)) {
				h->raw_off = h->raw_len; /* cannot be: the block's CRC held */
				break;
			}
			memcpy(&hdr, rec, sizeof(hdr));
			if (hdr.type == PERFRELAY_TYPE_UNIT) {
				h->has_unit = unit_frame_name(rec + sizeof(hdr), len - sizeof(hdr), h->unit);
				h->unit_off = h->raw_off + sizeof(len);
				h->unit_len = len;
				h->raw_off += sizeof(len) + len;
				continue;
			}
			if (hdr.type == PERFRELAY_TYPE_LOST)
				n = lost_line(h, rec, len);
			else {
				uint64_t ordinal = h->first_ordinal + h->index;

				if (h->index >= h->pos.skip)
					n = event_line(h, rec, len, ordinal);
			}
			if (out + n > size)
				return (ssize_t) out; /* this record again at the next read */
			memcpy(buf + out, h->line, n);
			out += n;
			if (hdr.type != PERFRELAY_TYPE_LOST) {
				h->next_ordinal = h->first_ordinal + h->index + 1;
				h->have_next = true;
				h->index++;
				h->events += n > 0;
			}
			h->has_unit = false;
			h->raw_off += sizeof(len) + len;
		}
		/* The block is done (a segment retention removed meanwhile: next_block() moves on). */
		h->pos.offset += h->block_size;
		h->pos.skip = 0;
		h->loaded = false;
	}
	return (ssize_t) out;
}

/* Where a subscription begins: after its cursor, at its time, at the history's start (without
 * "follow": a query) or at its end (a live stream with cursors). */
static int position(HistoryStream *h, char *err, size_t err_size) {
	HistoryStore *s = h->store;
	const Subscription *sub = h->sub;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (sub->has_after_cursor) {
		HistoryCursor c;
		HistorySegment *g;

		if (history_cursor_parse(sub->after_cursor, &c) < 0) {
			snprintf(err, err_size, "\"after_cursor\" is not a cursor");
			r = -EINVAL;
		} else if (memcmp(c.history_id, s->id, 16) != 0) {
			snprintf(
				err,
				err_size,
				"\"after_cursor\" is a cursor of another history (HistoryPath= was replaced)");
			r = -EINVAL;
		} else if (c.ordinal >= s->next_ordinal) {
			snprintf(
				err,
				err_size,
				"\"after_cursor\" is ahead of the history (its event was never written)");
			r = -EINVAL;
		} else if ((g = history_store_find(s, c.segment))) {
			size_t i = block_find(g, c.offset);

			if (i == SIZE_MAX || c.index >= g->blocks[i].n_events ||
			    g->blocks[i].first_ordinal + c.index != c.ordinal) {
				snprintf(err, err_size, "\"after_cursor\" names no event of the history");
				r = -EINVAL;
			} else
				h->pos = (HistoryPos){ .segment = c.segment,
						       .offset = c.offset,
						       .skip = c.index + 1 };
		} else
			/* Its segment is gone: from the oldest one held, after a gap. */
			h->pos = (HistoryPos){ .segment = c.segment,
					       .offset = sizeof(struct history_segment_header) };
		h->next_ordinal = c.ordinal + 1;
		h->have_next = true;
	} else if (sub->has_since) {
		bool found = false;

		for (size_t i = 0; i < s->n_segs && !found; i++) {
			HistorySegment *g = &s->segs[i];

			for (size_t j = 0; j < g->n_blocks && !found; j++)
				if (g->blocks[j].n_events > 0 &&
				    (uint64_t) ((int64_t) g->blocks[j].ts_max + g->realtime_offset_ns) >=
					    sub->since_ns) {
					h->pos = (HistoryPos){ .segment = g->id,
							       .offset = g->blocks[j].offset };
					found = true;
				}
		}
		if (!found)
			goto end;
	} else if (!sub->follow && s->n_segs > 0)
		h->pos = (HistoryPos){ .segment = s->segs[0].id,
				       .offset = sizeof(struct history_segment_header) };
	else {
end:
		if (s->n_segs > 0)
			h->pos = (HistoryPos){ .segment = s->segs[s->n_segs - 1].id,
					       .offset = s->segs[s->n_segs - 1].end };
		else
			h->pos = (HistoryPos){ .segment = 1, .offset = sizeof(struct history_segment_header) };
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int history_stream_open(
	HistoryStore *store, const Subscription *sub, HistoryStream **ret, char *err, size_t err_size) {
	HistoryStream *h;
	int r;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->store = store;
	h->sub = sub;
	h->fd = -EBADF;
	h->dctx = ZSTD_createDCtx();
	h->comp = malloc(HISTORY_BLOCK_COMP_MAX);
	h->raw = malloc(HISTORY_BLOCK_RAW_MAX);
	h->copy = malloc(PERFRELAY_RECORD_MAX);
	h->line = malloc(HISTORY_LINE_MAX);
	if (!h->dctx || !h->comp || !h->raw || !h->copy || !h->line) {
		history_stream_free(h);
		return -ENOMEM;
	}
	r = position(h, err, err_size);
	if (r < 0) {
		history_stream_free(h);
		return r;
	}
	*ret = h;
	return 0;
}

uint64_t history_stream_events(const HistoryStream *h) {
	return h->events;
}

HistoryStream *history_stream_free(HistoryStream *h) {
	if (!h)
		return NULL;
	ZSTD_freeDCtx(h->dctx);
	free(h->comp);
	free(h->raw);
	free(h->copy);
	free(h->line);
	safe_close(h->fd);
	free(h);
	return NULL;
}
