/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The history's writer thread (history-writer.h). Its one lock is the store's, taken once per
 * block to publish it and for the figures; everything else is the thread's own. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <systemd/sd-id128.h>

#include "base/log.h"
#include "event.h"
#include "features/history/history-writer.h"
#include "time-util.h"
#include "unit-frame.h"

/* zstd's fastest regular level: docs/history.md, "Sizing", has the figures. */
#define HISTORY_ZSTD_LEVEL   1
#define HISTORY_PIPE_READ    (1024u * 1024u)
/* The hub's lost record: a header and the count (hub-internal.h's HUB_BINARY_LOST_SIZE). */
#define HUB_LOST_RECORD_SIZE (sizeof(struct perfrelay_hdr) + sizeof(uint64_t))
/* Segments are an eighth of HistoryMaxUse=, within these bounds: retention removes whole ones. */
#define HISTORY_SEGMENT_MIN  (256u * 1024u)
#define HISTORY_SEGMENT_MAX  (128ull * 1024 * 1024)

struct HistoryWriter {
	HistoryStore *store;
	pthread_t thread;
	bool started;
	int pipe_fd, notify_fd;
	/* Set by the main thread (relaxed atomics: each is read whole, and nothing else depends
	 * on the order in which they change). */
	uint64_t max_use, max_age_sec, sync_interval_usec;

	ZSTD_CCtx *cctx;
	uint8_t *in; /* what the pipe gave that is not in the block yet */
	size_t in_len;
	uint8_t *raw; /* the block being filled */
	size_t raw_len;
	uint32_t raw_events;
	uint64_t raw_ts_min, raw_ts_max;
	uint64_t raw_first_usec; /* CLOCK_MONOTONIC of its first frame */
	/* What its gap records count, for the next block's if it cannot be written: its
	 * "history-disk" one (first in the block, if any) and the hub's lost records. */
	uint64_t raw_disk_gap, raw_behind;
	unsigned raw_gaps; /* its gap records */
	uint64_t raw_units[HISTORY_UNIT_BLOOM_WORDS];
	uint8_t *comp;

	int seg_fd; /* the segment written, -EBADF before the first block */
	uint64_t seg_id, seg_end, seg_first_ts, seg_last_ts, seg_blocks, seg_events, seg_first_ordinal;
	struct history_segment_header seg_header;
	bool unsynced;
	uint64_t synced_usec;
	uint64_t pending_gap; /* events of blocks that could not be written, for the next block's gap record */
	uint64_t pending_behind; /* the hub's lost records such blocks held, for a gap record of their own */

	HistoryWriterStats stats; /* under store->lock */
};

static void notify(HistoryWriter *w) {
	uint64_t one = 1;

	(void) !write(w->notify_fd, &one, sizeof(one));
}

static uint64_t load_limit(const uint64_t *p) {
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static uint64_t segment_max(HistoryWriter *w) {
	return MIN(MAX(load_limit(&w->max_use) / 8, (uint64_t) HISTORY_SEGMENT_MIN), HISTORY_SEGMENT_MAX);
}

static void segment_close(HistoryWriter *w) {
	struct history_segment_header *h = &w->seg_header;

	if (w->seg_fd < 0)
		return;
	h->flags |= HISTORY_SEGMENT_CLOSED;
	h->n_events = w->seg_events;
	h->n_blocks = w->seg_blocks;
	h->first_ts = w->seg_first_ts;
	h->last_ts = w->seg_last_ts;
	h->end = w->seg_end;
	h->crc = history_segment_header_crc(h);
	if (pwrite(w->seg_fd, h, sizeof(*h), 0) != (ssize_t) sizeof(*h) || fdatasync(w->seg_fd) < 0)
		log_warning_errno(-errno, "History: cannot close segment %016" PRIx64 ": %m", w->seg_id);
	w->seg_fd = safe_close(w->seg_fd);
	w->unsynced = false;
}

/* Begins a segment: its file and its place in the store. */
static int segment_open(HistoryWriter *w) {
	HistoryStore *s = w->store;
	struct history_segment_header *h = &w->seg_header;
	HistorySegment g = {};
	sd_id128_t boot = {};
	char name[32];
	uint64_t id;
	int fd, r;

	pthread_mutex_lock(&s->lock);
	id = s->n_segs ? s->segs[s->n_segs - 1].id + 1 : 1;
	g.first_ordinal = s->next_ordinal;
	pthread_mutex_unlock(&s->lock);

	(void) sd_id128_get_boot(&boot);
	*h = (struct history_segment_header){
		.header_size = sizeof(*h),
		.segment = id,
		.first_ordinal = g.first_ordinal,
		.realtime_offset_ns = (int64_t) (now_nsec(CLOCK_REALTIME) - now_nsec(CLOCK_BOOTTIME)),
		.created_realtime_ns = now_nsec(CLOCK_REALTIME),
	};
	memcpy(h->magic, HISTORY_SEGMENT_MAGIC, 8);
	memcpy(h->history_id, s->id, 16);
	memcpy(h->boot_id, boot.bytes, 16);
	h->crc = history_segment_header_crc(h);

	history_segment_name(id, name, sizeof(name));
	fd = openat(s->dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (pwrite(fd, h, sizeof(*h), 0) != (ssize_t) sizeof(*h)) {
		r = errno ? -errno : -EIO;
		(void) unlinkat(s->dir_fd, name, 0);
		safe_close(fd);
		return r;
	}

	/* Its name survives a power cut as its blocks do (they are fdatasync'ed). */
	if (fsync(s->dir_fd) < 0)
		log_warning_errno(-errno, "History: fsync of %s failed: %m", s->path);
	g.id = id;
	g.realtime_offset_ns = h->realtime_offset_ns;
	memcpy(g.boot_id, h->boot_id, 16);
	g.end = sizeof(*h);
	pthread_mutex_lock(&s->lock);
	r = history_store_add_segment(s, &g);
	if (r < 0) {
		pthread_mutex_unlock(&s->lock);
		(void) unlinkat(s->dir_fd, name, 0);
		safe_close(fd);
		return r;
	}
	w->stats.rotations++;
	pthread_mutex_unlock(&s->lock);

	w->seg_fd = fd;
	w->seg_id = id;
	w->seg_end = sizeof(*h);
	w->seg_first_ts = w->seg_last_ts = 0;
	w->seg_blocks = w->seg_events = 0;
	w->seg_first_ordinal = g.first_ordinal;
	w->unsynced = true;
	return 0;
}

/* Removes the oldest segments (never the one written) while the directory and `extra` bytes
 * about to be written are over HistoryMaxUse=, or they are older than HistoryMaxAgeSec=. */
static void retention(HistoryWriter *w, uint64_t extra) {
	HistoryStore *s = w->store;
	uint64_t max_use = load_limit(&w->max_use), max_age = load_limit(&w->max_age_sec);
	uint64_t now = now_nsec(CLOCK_REALTIME);
	bool removed = false;

	pthread_mutex_lock(&s->lock);
	while (s->n_segs > 1) {
		HistorySegment *g = &s->segs[0];
		char name[32];
		bool old = max_age > 0 && g->last_ts > 0 &&
			(uint64_t) ((int64_t) g->last_ts + g->realtime_offset_ns) + max_age * NSEC_PER_SEC <
				now;

		if (g->id == w->seg_id || (s->stats.bytes + extra <= max_use && !old))
			break;
		history_segment_name(g->id, name, sizeof(name));
		if (unlinkat(s->dir_fd, name, 0) < 0 && errno != ENOENT) {
			log_warning_errno(-errno, "History: cannot remove %s/%s: %m", s->path, name);
			break;
		}
		s->stats.removed_segments++;
		s->stats.removed_bytes += g->end;
		s->stats.removed_events += g->n_events;
		s->stats.segments--;
		s->stats.bytes -= g->end;
		s->stats.events -= g->n_events;
		free(g->blocks);
		memmove(&s->segs[0], &s->segs[1], (s->n_segs - 1) * sizeof(*g));
		s->n_segs--;
		s->stats.first_ordinal = s->segs[0].first_ordinal;
		removed = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (removed)
		notify(w);
}

/* Compresses the block and appends it; on failure its events are counted and wait for the
 * next block's gap record. */
static void block_cut(HistoryWriter *w) {
	HistoryStore *s = w->store;
	struct history_block_header b;
	struct iovec iov[2];
	size_t comp;
	ssize_t n;
	int r;

	if (w->raw_len == 0)
		return;
	comp = ZSTD_compressCCtx(
		w->cctx, w->comp, HISTORY_BLOCK_COMP_MAX, w->raw, w->raw_len, HISTORY_ZSTD_LEVEL);
	if (ZSTD_isError(comp)) {
		log_error("History: zstd cannot compress a block: %s", ZSTD_getErrorName(comp));
		r = -EIO;
		goto fail;
	}
	if (w->seg_fd >= 0 && w->seg_blocks > 0 && w->seg_end + sizeof(b) + comp > segment_max(w))
		segment_close(w);
	if (w->seg_fd < 0) {
		r = segment_open(w);
		if (r < 0) {
			log_warning_errno(r, "History: cannot begin a segment in %s: %m", s->path);
			goto fail;
		}
	}
	retention(w, sizeof(b) + comp);

	b = (struct history_block_header){
		.magic = HISTORY_BLOCK_MAGIC,
		.compressed_size = (uint32_t) comp,
		.raw_size = (uint32_t) w->raw_len,
		.n_events = w->raw_events,
		.first_ordinal = w->seg_first_ordinal + w->seg_events,
		.ts_min = w->raw_events ? w->raw_ts_min : 0,
		.ts_max = w->raw_events ? w->raw_ts_max : 0,
	};
	memcpy(b.units, w->raw_units, sizeof(b.units));
	b.crc = history_crc(history_crc(0, &b, sizeof(b)), w->comp, comp);
	iov[0] = (struct iovec){ &b, sizeof(b) };
	iov[1] = (struct iovec){ w->comp, comp };
	n = pwritev(w->seg_fd, iov, 2, (off_t) w->seg_end);
	if (n != (ssize_t) (sizeof(b) + comp)) {
		r = n < 0 ? -errno : -ENOSPC;
		/* Cut back what was written of it: the segment ends at its last whole block. */
		(void) ftruncate(w->seg_fd, (off_t) w->seg_end);
		goto fail;
	}

	{
		HistoryBlock hb = {
			.offset = w->seg_end,
			.size = (uint32_t) (sizeof(b) + comp),
			.n_events = b.n_events,
			.first_ordinal = b.first_ordinal,
			.ts_min = b.ts_min,
			.ts_max = b.ts_max,
		};
		struct timespec cpu = {};

		memcpy(hb.units, b.units, sizeof(hb.units));
		(void) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu); /* a syscall, once a block */
		pthread_mutex_lock(&s->lock);
		w->stats.cpu_ns = timespec_nsec(&cpu);
		r = history_segment_add_block(history_store_find(s, w->seg_id), &hb);
		if (r >= 0) {
			HistorySegment *g = history_store_find(s, w->seg_id);

			g->n_events += b.n_events;
			g->end += hb.size;
			g->last_ts = MAX(g->last_ts, b.ts_max);
			s->next_ordinal += b.n_events;
			s->stats.bytes += hb.size;
			s->stats.events += b.n_events;
			w->stats.written += b.n_events;
			w->stats.gaps += w->raw_gaps;
			w->stats.disk_gap_pending = w->pending_gap;
			w->stats.blocks++;
			w->stats.raw_bytes += w->raw_len;
			w->stats.disk_bytes += hb.size;
		}
		pthread_mutex_unlock(&s->lock);
		if (r < 0) {
			(void) ftruncate(w->seg_fd, (off_t) w->seg_end);
			goto fail;
		}
		w->seg_end += hb.size;
		w->seg_blocks++;
		w->seg_events += b.n_events;
		if (b.n_events) {
			w->seg_first_ts = w->seg_first_ts ?: b.ts_min;
			w->seg_last_ts = MAX(w->seg_last_ts, b.ts_max);
		}
		w->unsynced = true;
	}
	w->raw_len = 0;
	w->raw_events = 0;
	w->raw_disk_gap = w->raw_behind = 0;
	w->raw_gaps = 0;
	memset(w->raw_units, 0, sizeof(w->raw_units));
	notify(w);
	if (w->seg_end >= segment_max(w))
		segment_close(w);
	return;

fail:
	if (w->stats.write_errors == 0 || r != -ENOSPC)
		log_warning_errno(
			r,
			"History: a block of %" PRIu32 " events could not be written to %s: %m",
			w->raw_events,
			s->path);
	w->pending_gap += w->raw_events + w->raw_disk_gap;
	w->pending_behind += w->raw_behind;
	pthread_mutex_lock(&s->lock);
	w->stats.write_errors++;
	w->stats.dropped_disk += w->raw_events;
	w->stats.disk_gap_pending = w->pending_gap;
	pthread_mutex_unlock(&s->lock);
	w->raw_len = 0;
	w->raw_events = 0;
	w->raw_disk_gap = w->raw_behind = 0;
	w->raw_gaps = 0;
	memset(w->raw_units, 0, sizeof(w->raw_units));
}

static void raw_put(HistoryWriter *w, const void *frame, size_t len) {
	if (w->raw_len == 0)
		w->raw_first_usec = now_usec(CLOCK_MONOTONIC);
	memcpy(w->raw + w->raw_len, frame, len);
	w->raw_len += len;
}

static void raw_put_gap(HistoryWriter *w, uint64_t count, uint32_t reason) {
	uint32_t len = sizeof(struct history_gap);
	struct perfrelay_hdr hdr = {
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = PERFRELAY_TYPE_LOST,
		.size = sizeof(struct history_gap),
	};
	struct history_gap g = { .count = count, .reason = reason };

	memcpy(g.hdr, &hdr, sizeof(hdr));
	raw_put(w, &len, sizeof(len));
	raw_put(w, &g, sizeof(g));
}

/* The gap records of blocks that could not be written, first in a block. */
static void raw_put_pending_gaps(HistoryWriter *w) {
	if (w->pending_gap > 0) {
		raw_put_gap(w, w->pending_gap, HISTORY_GAP_DISK);
		w->raw_gaps++;
		w->raw_disk_gap = w->pending_gap;
		w->pending_gap = 0;
	}
	if (w->pending_behind > 0) {
		raw_put_gap(w, w->pending_behind, HISTORY_GAP_BEHIND);
		w->raw_gaps++;
		w->raw_behind += w->pending_behind;
		w->pending_behind = 0;
	}
}

/* Takes the whole frames of w->in into blocks. Returns false if the stream is not frames (it
 * is the hub's own: nothing but a bug makes it so). */
static bool take_frames(HistoryWriter *w) {
	size_t p = 0;
	uint64_t received = 0, behind = 0;
	bool ok = true;

	while (w->in_len - p >= sizeof(uint32_t)) {
		struct perfrelay_hdr hdr;
		uint32_t len;
		size_t need;

		memcpy(&len, w->in + p, sizeof(len));
		if (len < sizeof(hdr) || len > PERFRELAY_RECORD_MAX + 8u) {
			ok = false;
			break;
		}
		if (w->in_len - p < sizeof(len) + len)
			break;
		memcpy(&hdr, w->in + p + sizeof(len), sizeof(hdr));
		need = sizeof(len) + len;
		if (hdr.type == PERFRELAY_TYPE_UNIT) {
			/* A unit frame is its record's: both in one block, or the record loses its
			 * unit. Taken once the record is here too. */
			uint32_t next;

			if (w->in_len - p - need < sizeof(next))
				break;
			memcpy(&next, w->in + p + need, sizeof(next));
			if (next < sizeof(hdr) || next > PERFRELAY_RECORD_MAX + 8u) {
				ok = false;
				break;
			}
			if (w->in_len - p - need - sizeof(next) < next)
				break;
			need += sizeof(next) + next;
		}
		if (w->raw_len + 2 * sizeof(len) + need + 2 * sizeof(struct history_gap) >
		    HISTORY_BLOCK_RAW_MAX)
			block_cut(w);
		if (w->raw_len == 0)
			raw_put_pending_gaps(w);
		raw_put(w, w->in + p, sizeof(len) + len);
		if (hdr.type == PERFRELAY_TYPE_LOST) {
			if (len == HUB_LOST_RECORD_SIZE) {
				uint64_t count;

				memcpy(&count, w->in + p + sizeof(len) + sizeof(hdr), sizeof(count));
				behind += count;
				w->raw_behind += count;
				w->raw_gaps++;
			}
		} else if (hdr.type == PERFRELAY_TYPE_UNIT) {
			char unit[PERFRELAY_UNIT_NAME_MAX];

			if (unit_frame_name(w->in + p + sizeof(len) + sizeof(hdr), len - sizeof(hdr), unit))
				history_unit_bloom_add(w->raw_units, unit);
		} else {
			if (w->raw_events == 0 || hdr.ts_ns < w->raw_ts_min)
				w->raw_ts_min = hdr.ts_ns;
			if (w->raw_events == 0 || hdr.ts_ns > w->raw_ts_max)
				w->raw_ts_max = hdr.ts_ns;
			w->raw_events++;
			received++;
		}
		p += sizeof(len) + len;
	}
	memmove(w->in, w->in + p, w->in_len - p);
	w->in_len -= p;
	pthread_mutex_lock(&w->store->lock);
	w->stats.received += received;
	w->stats.dropped_behind += behind;
	pthread_mutex_unlock(&w->store->lock);
	return ok;
}

static void maybe_sync(HistoryWriter *w, uint64_t now) {
	if (!w->unsynced || w->seg_fd < 0 || now - w->synced_usec < load_limit(&w->sync_interval_usec))
		return;
	if (fdatasync(w->seg_fd) < 0)
		log_warning_errno(-errno, "History: fdatasync of segment %016" PRIx64 " failed: %m", w->seg_id);
	w->unsynced = false;
	w->synced_usec = now;
	pthread_mutex_lock(&w->store->lock);
	w->stats.syncs++;
	pthread_mutex_unlock(&w->store->lock);
}

static void *writer_thread(void *userdata) {
	HistoryWriter *w = userdata;
	uint64_t last_retention = 0;
	bool broken = false;

	(void) pthread_setname_np(pthread_self(), "perfrelay-hist");
	w->synced_usec = now_usec(CLOCK_MONOTONIC);
	for (;;) {
		struct pollfd p = { .fd = w->pipe_fd, .events = POLLIN };
		uint64_t now = now_usec(CLOCK_MONOTONIC);
		int timeout = -1;
		ssize_t n;

		if (w->raw_len > 0)
			timeout = (int) ((w->raw_first_usec + HISTORY_CUT_USEC > now ?
						  w->raw_first_usec + HISTORY_CUT_USEC - now :
						  0) /
					 USEC_PER_MSEC) +
				1;
		else if (w->unsynced)
			timeout = (int) (load_limit(&w->sync_interval_usec) / USEC_PER_MSEC) + 1;
		if (timeout < 0 || timeout > 1000)
			timeout = 1000; /* retention by age, once a second */
		if (poll(&p, 1, timeout) < 0 && errno != EINTR) {
			log_error_errno(-errno, "History: poll on the writer's pipe failed: %m");
			break;
		}
		n = read(w->pipe_fd, w->in + w->in_len, HISTORY_PIPE_READ - w->in_len);
		if (n == 0)
			break; /* the main thread closed its end */
		if (n > 0 && !broken) {
			w->in_len += (size_t) n;
			if (!take_frames(w)) {
				log_error("History: the writer's pipe carries something that is not frames; no longer writing");
				broken = true;
			}
		}
		if (broken)
			w->in_len = 0;
		now = now_usec(CLOCK_MONOTONIC);
		if (w->raw_len > 0 && now >= w->raw_first_usec + HISTORY_CUT_USEC)
			block_cut(w);
		maybe_sync(w, now);
		if (now - last_retention >= USEC_PER_SEC) {
			retention(w, 0);
			last_retention = now;
		}
	}
	block_cut(w);
	segment_close(w);
	{
		struct timespec ts;

		if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
			pthread_mutex_lock(&w->store->lock);
			w->stats.cpu_ns = timespec_nsec(&ts);
			pthread_mutex_unlock(&w->store->lock);
		}
	}
	return NULL;
}

void history_writer_set_limits(HistoryWriter *w, const HistoryLimits *l) {
	__atomic_store_n(&w->max_use, l->max_use, __ATOMIC_RELAXED);
	__atomic_store_n(&w->max_age_sec, l->max_age_sec, __ATOMIC_RELAXED);
	__atomic_store_n(&w->sync_interval_usec, l->sync_interval_usec, __ATOMIC_RELAXED);
}

static HistoryWriter *writer_free(HistoryWriter *w) {
	ZSTD_freeCCtx(w->cctx);
	free(w->in);
	free(w->raw);
	free(w->comp);
	safe_close(w->pipe_fd);
	safe_close(w->seg_fd);
	free(w);
	return NULL;
}

int history_writer_start(
	HistoryStore *store, int pipe_fd, int notify_fd, const HistoryLimits *l, HistoryWriter **ret) {
	HistoryWriter *w;
	int r;

	w = calloc(1, sizeof(*w));
	if (!w) {
		safe_close(pipe_fd);
		return -ENOMEM;
	}
	w->store = store;
	w->pipe_fd = pipe_fd;
	w->notify_fd = notify_fd;
	w->seg_fd = -EBADF;
	history_writer_set_limits(w, l);
	w->cctx = ZSTD_createCCtx();
	w->in = malloc(HISTORY_PIPE_READ);
	w->raw = malloc(HISTORY_BLOCK_RAW_MAX);
	w->comp = malloc(HISTORY_BLOCK_COMP_MAX);
	if (!w->cctx || !w->in || !w->raw || !w->comp) {
		writer_free(w);
		return -ENOMEM;
	}
	/* Its segment from the start: the daemon's descriptors stay the same from READY=1 on. */
	r = segment_open(w);
	if (r < 0) {
		log_error_errno(r, "History: cannot begin a segment in %s: %m", store->path);
		writer_free(w);
		return r;
	}
	r = -pthread_create(&w->thread, NULL, writer_thread, w);
	if (r < 0) {
		writer_free(w);
		return r;
	}
	w->started = true;
	*ret = w;
	return 0;
}

void history_writer_join(HistoryWriter *w) {
	if (w && w->started) {
		pthread_join(w->thread, NULL);
		w->started = false;
	}
}

HistoryWriter *history_writer_stop(HistoryWriter *w) {
	if (!w)
		return NULL;
	history_writer_join(w);
	return writer_free(w);
}

void history_writer_get_stats(HistoryWriter *w, HistoryWriterStats *ret) {
	pthread_mutex_lock(&w->store->lock);
	*ret = w->stats;
	pthread_mutex_unlock(&w->store->lock);
}
