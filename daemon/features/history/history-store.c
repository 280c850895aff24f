/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The history's directory: opened and locked, every segment read at start, the torn tail of the
 * one a crash left open cut off (history-store.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <systemd/sd-id128.h>

#include "base/log.h"
#include "features/history/history-store.h"

uint32_t history_crc(uint32_t crc, const void *p, size_t n) {
	/* zlib's crc32() takes a uInt length: feed it in pieces. */
	while (n > 0) {
		uInt k = (uInt) MIN(n, (size_t) 1 << 30);

		crc = (uint32_t) crc32(crc, p, k);
		p = (const uint8_t *) p + k;
		n -= k;
	}
	return crc;
}

/* FNV-1a: the filter only decides which blocks are read, never what a reader may see. */
static uint64_t unit_hash(const char *unit) {
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *unit; unit++)
		h = (h ^ (uint8_t) *unit) * 0x100000001b3ull;
	return h;
}

void history_unit_bloom_add(uint64_t bloom[static HISTORY_UNIT_BLOOM_WORDS], const char *unit) {
	uint64_t h = unit_hash(unit);
	unsigned a = h % (64 * HISTORY_UNIT_BLOOM_WORDS), b = (h >> 32) % (64 * HISTORY_UNIT_BLOOM_WORDS);

	bloom[a / 64] |= UINT64_C(1) << (a % 64);
	bloom[b / 64] |= UINT64_C(1) << (b % 64);
}

bool history_unit_bloom_has(const uint64_t bloom[static HISTORY_UNIT_BLOOM_WORDS], const char *unit) {
	uint64_t h = unit_hash(unit);
	unsigned a = h % (64 * HISTORY_UNIT_BLOOM_WORDS), b = (h >> 32) % (64 * HISTORY_UNIT_BLOOM_WORDS);

	return (bloom[a / 64] & (UINT64_C(1) << (a % 64))) && (bloom[b / 64] & (UINT64_C(1) << (b % 64)));
}

uint32_t history_segment_header_crc(const struct history_segment_header *h) {
	struct history_segment_header c = *h;

	c.crc = 0;
	return history_crc(0, &c, sizeof(c));
}

void history_segment_name(uint64_t id, char *buf, size_t size) {
	snprintf(buf, size, "%016" PRIx64 ".seg", id);
}

bool history_block_header_valid(const struct history_block_header *b, uint64_t offset, uint64_t file_size) {
	return b->magic == HISTORY_BLOCK_MAGIC && b->compressed_size > 0 &&
		b->compressed_size <= HISTORY_BLOCK_COMP_MAX && b->raw_size <= HISTORY_BLOCK_RAW_MAX &&
		b->n_events <= b->raw_size / 4u && b->ts_min <= b->ts_max && offset <= file_size &&
		file_size - offset >= sizeof(*b) + (uint64_t) b->compressed_size;
}

static uint32_t block_crc(const struct history_block_header *b, const void *comp) {
	struct history_block_header c = *b;

	c.crc = 0;
	return history_crc(history_crc(0, &c, sizeof(c)), comp, b->compressed_size);
}

static int pread_all(int fd, void *buf, size_t n, uint64_t offset) {
	ssize_t k = pread(fd, buf, n, (off_t) offset);

	if (k < 0)
		return -errno;
	return (size_t) k == n ? 0 : -EBADMSG;
}

ssize_t history_block_read(
	int fd, uint64_t offset, void *dctx, void *comp, void *raw, struct history_block_header *ret) {
	struct history_block_header b;
	struct stat st;
	size_t n;
	int r;

	if (fstat(fd, &st) < 0)
		return -errno;
	r = pread_all(fd, &b, sizeof(b), offset);
	if (r < 0)
		return r;
	if (!history_block_header_valid(&b, offset, (uint64_t) st.st_size))
		return -EBADMSG;
	r = pread_all(fd, comp, b.compressed_size, offset + sizeof(b));
	if (r < 0)
		return r;
	if (block_crc(&b, comp) != b.crc)
		return -EBADMSG;
	n = ZSTD_decompressDCtx(dctx, raw, HISTORY_BLOCK_RAW_MAX, comp, b.compressed_size);
	if (ZSTD_isError(n) || n != b.raw_size)
		return -EBADMSG;
	*ret = b;
	return (ssize_t) n;
}

void history_cursor_format(const HistoryCursor *c, char buf[static HISTORY_CURSOR_MAX]) {
	char id[33];

	for (size_t i = 0; i < 16; i++)
		snprintf(id + 2 * i, 3, "%02x", c->history_id[i]);
	snprintf(
		buf,
		HISTORY_CURSOR_MAX,
		"h=%s;s=%" PRIx64 ";o=%" PRIx64 ";i=%" PRIx32 ";n=%" PRIx64,
		id,
		c->segment,
		c->offset,
		c->index,
		c->ordinal);
}

static int parse_hex(const char **p, const char *key, uint64_t max, uint64_t *ret) {
	uint64_t v = 0;
	size_t digits = 0;

	if (!startswith(*p, key))
		return -EINVAL;
	*p += strlen(key);
	for (; **p && **p != ';'; (*p)++, digits++) {
		int d = **p >= '0' && **p <= '9' ? **p - '0' :
			**p >= 'a' && **p <= 'f' ? **p - 'a' + 10 :
						   -1;

		if (d < 0 || digits >= 16)
			return -EINVAL;
		v = v * 16 + (uint64_t) d;
	}
	if (digits == 0 || v > max)
		return -EINVAL;
	if (**p == ';')
		(*p)++;
	*ret = v;
	return 0;
}

int history_cursor_parse(const char *s, HistoryCursor *ret) {
	HistoryCursor c = {};
	uint64_t index;
	const char *p = s;

	if (!startswith(p, "h="))
		return -EINVAL;
	p += 2;
	for (size_t i = 0; i < 16; i++) {
		unsigned v;

		if (sscanf(p + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdef", p[2 * i]) ||
		    !p[2 * i] || !strchr("0123456789abcdef", p[2 * i + 1]) || !p[2 * i + 1])
			return -EINVAL;
		c.history_id[i] = (uint8_t) v;
	}
	p += 32;
	if (*p++ != ';')
		return -EINVAL;
	if (parse_hex(&p, "s=", UINT64_MAX, &c.segment) < 0 ||
	    parse_hex(&p, "o=", UINT64_MAX, &c.offset) < 0 || parse_hex(&p, "i=", UINT32_MAX, &index) < 0 ||
	    parse_hex(&p, "n=", UINT64_MAX, &c.ordinal) < 0 || *p != '\0')
		return -EINVAL;
	c.index = (uint32_t) index;
	*ret = c;
	return 0;
}

HistorySegment *history_store_find(HistoryStore *s, uint64_t id) {
	size_t lo = 0, hi = s->n_segs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->segs[mid].id == id)
			return &s->segs[mid];
		if (s->segs[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int history_store_add_segment(HistoryStore *s, const HistorySegment *g) {
	if (s->n_segs == s->n_alloc) {
		size_t n = MAX(s->n_alloc * 2, (size_t) 16);
		HistorySegment *p = reallocarray(s->segs, n, sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->segs = p;
		s->n_alloc = n;
	}
	s->segs[s->n_segs++] = *g;
	s->stats.segments++;
	s->stats.bytes += g->end;
	s->stats.events += g->n_events;
	if (s->n_segs == 1)
		s->stats.first_ordinal = g->first_ordinal;
	return 0;
}

int history_segment_add_block(HistorySegment *g, const HistoryBlock *b) {
	if (g->n_blocks == g->n_alloc) {
		size_t n = MAX(g->n_alloc * 2, (size_t) 64);
		HistoryBlock *p = reallocarray(g->blocks, n, sizeof(*p));

		if (!p)
			return -ENOMEM;
		g->blocks = p;
		g->n_alloc = n;
	}
	g->blocks[g->n_blocks++] = *b;
	return 0;
}

static int set_aside(HistoryStore *s, const char *name, const char *why) {
	char to[64];

	log_warning("History: %s/%s %s; renamed to %s.corrupt", s->path, name, why, name);
	snprintf(to, sizeof(to), "%s.corrupt", name);
	s->stats.corrupt_segments++;
	if (renameat(s->dir_fd, name, s->dir_fd, to) < 0)
		return log_error_errno(-errno, "History: cannot rename %s/%s: %m", s->path, name);
	return 0;
}

/* Reads segment `name`: its header, then every block header; a segment not closed has every
 * block checked whole (CRC) and is cut at its first bad one. */
static int scan_segment(HistoryStore *s, const char *name, uint64_t id, bool *ret_added) {
	_cleanup_close_ int fd = -EBADF;
	_cleanup_free_ void *comp = NULL;
	struct history_segment_header h;
	HistorySegment g = {};
	struct stat st;
	uint64_t off, ordinal;
	bool closed;
	int r;

	*ret_added = false;
	fd = openat(s->dir_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return log_error_errno(-errno, "History: cannot open %s/%s: %m", s->path, name);
	if (fstat(fd, &st) < 0)
		return log_error_errno(-errno, "History: cannot stat %s/%s: %m", s->path, name);
	if (!S_ISREG(st.st_mode))
		return set_aside(s, name, "is not a regular file");
	r = pread_all(fd, &h, sizeof(h), 0);
	if (r < 0 || memcmp(h.magic, HISTORY_SEGMENT_MAGIC, 8) != 0 || h.header_size != sizeof(h) ||
	    h.segment != id || history_segment_header_crc(&h) != h.crc)
		return set_aside(s, name, "has no valid segment header");
	if (memcmp(h.history_id, s->id, 16) != 0)
		return set_aside(s, name, "belongs to another history (its id differs)");

	closed = h.flags & HISTORY_SEGMENT_CLOSED;
	comp = closed ? NULL : malloc(HISTORY_BLOCK_COMP_MAX);
	if (!closed && !comp)
		return log_oom();
	g.id = id;
	g.first_ordinal = h.first_ordinal;
	g.realtime_offset_ns = h.realtime_offset_ns;
	memcpy(g.boot_id, h.boot_id, 16);
	ordinal = h.first_ordinal;
	for (off = sizeof(h); off < (uint64_t) st.st_size;) {
		struct history_block_header b;
		HistoryBlock hb;

		r = pread_all(fd, &b, sizeof(b), off);
		if (r < 0 && r != -EBADMSG) {
			free(g.blocks);
			return log_error_errno(r, "History: cannot read %s/%s: %m", s->path, name);
		}
		if (r < 0 || !history_block_header_valid(&b, off, (uint64_t) st.st_size) ||
		    b.first_ordinal != ordinal ||
		    (!closed &&
		     (pread_all(fd, comp, b.compressed_size, off + sizeof(b)) < 0 ||
		      block_crc(&b, comp) != b.crc)))
			break;
		hb = (HistoryBlock){
			.offset = off,
			.size = (uint32_t) (sizeof(b) + b.compressed_size),
			.n_events = b.n_events,
			.first_ordinal = b.first_ordinal,
			.ts_min = b.ts_min,
			.ts_max = b.ts_max,
		};
		memcpy(hb.units, b.units, sizeof(hb.units));
		if (history_segment_add_block(&g, &hb) < 0) {
			free(g.blocks);
			return log_oom();
		}
		ordinal += b.n_events;
		g.last_ts = MAX(g.last_ts, b.ts_max);
		off += hb.size;
	}
	if (off < (uint64_t) st.st_size) {
		/* A torn tail (or, in a closed segment, damage): cut at the last whole block. */
		log_warning(
			"History: %s/%s: cutting off %" PRIu64
			" bytes after its last intact block (offset %" PRIu64 ")",
			s->path,
			name,
			(uint64_t) st.st_size - off,
			off);
		if (ftruncate(fd, (off_t) off) < 0) {
			free(g.blocks);
			return log_error_errno(-errno, "History: cannot truncate %s/%s: %m", s->path, name);
		}
		s->stats.torn_cuts++;
		s->stats.torn_bytes += (uint64_t) st.st_size - off;
	}
	g.n_events = ordinal - h.first_ordinal;
	g.end = off;
	if (!closed || off < (uint64_t) st.st_size) {
		/* Closed now, with the figures just counted. */
		h.flags |= HISTORY_SEGMENT_CLOSED;
		h.n_events = g.n_events;
		h.n_blocks = g.n_blocks;
		h.first_ts = g.n_blocks ? g.blocks[0].ts_min : 0;
		h.last_ts = g.last_ts;
		h.end = off;
		h.crc = history_segment_header_crc(&h);
		if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t) sizeof(h) || fdatasync(fd) < 0) {
			free(g.blocks);
			return log_error_errno(-errno, "History: cannot close %s/%s: %m", s->path, name);
		}
	}
	if (history_store_add_segment(s, &g) < 0) {
		free(g.blocks);
		return log_oom();
	}
	*ret_added = true;
	return 0;
}

/* mkdir -p of path's parent directories (path is absolute and normalized: config.c). */
static int mkdir_parents(const char *path) {
	_cleanup_free_ char *p = strdup(path);

	if (!p)
		return -ENOMEM;
	for (char *slash = strchr(p + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		*slash = '/';
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b) {
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
	return x < y ? -1 : x > y;
}

static int read_id(HistoryStore *s) {
	_cleanup_close_ int fd = -EBADF;
	char text[33] = {};
	sd_id128_t id;
	ssize_t n;
	int r;

	fd = openat(s->dir_fd, "id", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		n = read(fd, text, 32);
		if (n == 32 && sd_id128_from_string(text, &id) >= 0) {
			memcpy(s->id, id.bytes, 16);
			return 0;
		}
		return log_error_errno(-EBADMSG, "History: %s/id is not a 128-bit id in hex", s->path);
	}
	if (errno != ENOENT)
		return log_error_errno(-errno, "History: cannot open %s/id: %m", s->path);
	r = sd_id128_randomize(&id);
	if (r < 0)
		return log_error_errno(r, "History: cannot make an id: %m");
	fd = openat(s->dir_fd, "id.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return log_error_errno(-errno, "History: cannot create %s/id.tmp: %m", s->path);
	sd_id128_to_string(id, text);
	if (write(fd, text, 32) != 32 || fsync(fd) < 0 || renameat(s->dir_fd, "id.tmp", s->dir_fd, "id") < 0)
		return log_error_errno(-errno, "History: cannot write %s/id: %m", s->path);
	memcpy(s->id, id.bytes, 16);
	return 0;
}

int history_store_open(const char *path, HistoryStore **ret) {
	_cleanup_(history_store_freep) HistoryStore *s = NULL;
	_cleanup_free_ uint64_t *ids = NULL;
	size_t n_ids = 0, n_alloc = 0;
	DIR *d;
	struct dirent *de;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return log_oom();
	pthread_mutex_init(&s->lock, NULL);
	s->dir_fd = s->lock_fd = -EBADF;
	s->path = strdup(path);
	if (!s->path)
		return log_oom();
	/* Like systemd's StateDirectory=: made 0700, root's, its missing parents 0755. */
	r = mkdir_parents(path);
	if (r < 0)
		return log_error_errno(r, "History: cannot create the parents of HistoryPath=%s: %m", path);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return log_error_errno(-errno, "History: cannot create HistoryPath=%s: %m", path);
	s->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (s->dir_fd < 0)
		return log_error_errno(-errno, "History: cannot open HistoryPath=%s: %m", path);
	{
		struct stat st;

		/* Everything in it is every user's events: nobody else may own it or write into it. */
		if (fstat(s->dir_fd, &st) < 0)
			return log_error_errno(-errno, "History: cannot stat HistoryPath=%s: %m", path);
		if (st.st_uid != geteuid() || (st.st_mode & 022))
			return log_error_errno(
				-EPERM,
				"History: HistoryPath=%s is owned by uid %u with mode %04o: it must be this daemon's "
				"user's and writable by nobody else",
				path,
				(unsigned) st.st_uid,
				(unsigned) (st.st_mode & 07777));
	}
	s->lock_fd = openat(s->dir_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->lock_fd < 0)
		return log_error_errno(-errno, "History: cannot open %s/lock: %m", path);
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ?
			log_error_errno(
				-EBUSY, "History: HistoryPath=%s is in use by another perfrelayd", path) :
			log_error_errno(-errno, "History: cannot lock %s/lock: %m", path);
	r = read_id(s);
	if (r < 0)
		return r;

	d = fdopendir(fcntl(s->dir_fd, F_DUPFD_CLOEXEC, 3));
	if (!d)
		return log_error_errno(-errno, "History: cannot list HistoryPath=%s: %m", path);
	while ((de = readdir(d))) {
		uint64_t id;
		char name[32];
		int end = 0;

		if (sscanf(de->d_name, "%16" SCNx64 ".seg%n", &id, &end) != 1 || de->d_name[end] != '\0')
			continue;
		history_segment_name(id, name, sizeof(name));
		if (!streq(name, de->d_name))
			continue;
		if (n_ids == n_alloc) {
			uint64_t *p = reallocarray(ids, MAX(n_alloc * 2, (size_t) 16), sizeof(*p));

			if (!p) {
				closedir(d);
				return log_oom();
			}
			ids = p;
			n_alloc = MAX(n_alloc * 2, (size_t) 16);
		}
		ids[n_ids++] = id;
	}
	closedir(d);
	if (n_ids > 0) /* qsort() wants an array, even for none */
		qsort(ids, n_ids, sizeof(*ids), cmp_u64);

	for (size_t i = 0; i < n_ids; i++) {
		char name[32];
		bool added;

		history_segment_name(ids[i], name, sizeof(name));
		r = scan_segment(s, name, ids[i], &added);
		if (r < 0)
			return r;
		if (added && s->n_segs > 1) {
			HistorySegment *prev = &s->segs[s->n_segs - 2], *g = &s->segs[s->n_segs - 1];

			if (g->first_ordinal < prev->first_ordinal + prev->n_events) {
				/* Ordinals go back: not this history's sequence. */
				free(g->blocks);
				s->n_segs--;
				s->stats.segments--;
				s->stats.bytes -= g->end;
				s->stats.events -= g->n_events;
				r = set_aside(
					s, name, "numbers its events before the segment ahead of it ends");
				if (r < 0)
					return r;
			}
		}
	}
	if (s->n_segs > 0) {
		HistorySegment *last = &s->segs[s->n_segs - 1];

		s->next_ordinal = last->first_ordinal + last->n_events;
		s->stats.first_ordinal = s->segs[0].first_ordinal;
	}
	*ret = TAKE_PTR(s);
	return 0;
}

HistoryStore *history_store_free(HistoryStore *s) {
	if (!s)
		return NULL;
	for (size_t i = 0; i < s->n_segs; i++)
		free(s->segs[i].blocks);
	free(s->segs);
	safe_close(s->lock_fd);
	safe_close(s->dir_fd);
	free(s->path);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return NULL;
}
