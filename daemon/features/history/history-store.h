/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The event history's files (docs/history.md): a directory of segment files, each a header and
 * a sequence of blocks; a block is a header and a zstd frame of the socket's binary frames
 * (u32 length, record), with a CRC-32 over both. The store knows every segment and block of the
 * directory (scanned at start, appended to by the writer thread) under one mutex, so that the
 * main thread's readers and the writer never see each other half done.
 *
 * Everything on disk is little-endian; the files are root's (0600 in a 0700 directory), and still
 * every length and checksum is checked before anything is read (a power cut leaves any tail). */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

#define HISTORY_SEGMENT_MAGIC    "PRHIST01"
#define HISTORY_BLOCK_MAGIC      0x4b425250u /* "PRBK" */
#define HISTORY_SEGMENT_CLOSED   0x1u        /* the header's end fields are final */
/* What a block holds before it is compressed: the writer cuts it at this size, or when its
 * first event waited HISTORY_CUT_USEC. */
#define HISTORY_BLOCK_RAW_MAX    (256u * 1024u)
#define HISTORY_BLOCK_COMP_MAX   (HISTORY_BLOCK_RAW_MAX + HISTORY_BLOCK_RAW_MAX / 128u + 1024u)
#define HISTORY_CUT_USEC         (250u * 1000u)
/* A cursor string is at most this long, its NUL included. */
#define HISTORY_CURSOR_MAX       96u
/* A block's filter of its units: 256 bits, two per unit. */
#define HISTORY_UNIT_BLOOM_WORDS 4u
/* A gap record (struct history_gap): what the history does not hold, and why. */
#define HISTORY_GAP_BEHIND       1u /* the writer's queue was full (the hub's lost record) */
#define HISTORY_GAP_DISK         2u /* a block could not be written (ENOSPC, EIO) */

struct history_segment_header {
	char magic[8];        /* HISTORY_SEGMENT_MAGIC */
	uint32_t header_size; /* sizeof(struct history_segment_header) */
	uint32_t flags;       /* HISTORY_SEGMENT_CLOSED */
	uint8_t history_id[16];
	uint8_t boot_id[16];
	uint64_t segment;           /* its number, also its file's name */
	uint64_t first_ordinal;     /* of its first event: events are numbered from the first segment */
	int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME when it was made */
	uint64_t created_realtime_ns;
	/* Final once HISTORY_SEGMENT_CLOSED is set (at close); a segment without it is scanned. */
	uint64_t n_events;
	uint64_t n_blocks;
	uint64_t first_ts, last_ts; /* CLOCK_BOOTTIME ns of its events, 0 if none */
	uint64_t end;               /* the offset after its last block */
	uint32_t crc;               /* CRC-32 of the header with crc 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct history_segment_header) == 128, "no implicit padding");

struct history_block_header {
	uint32_t magic;           /* HISTORY_BLOCK_MAGIC */
	uint32_t compressed_size; /* of the zstd frame that follows */
	uint32_t raw_size;        /* of its frames once decompressed, <= HISTORY_BLOCK_RAW_MAX */
	uint32_t n_events;        /* event records (not units, not gaps) */
	uint64_t first_ordinal;   /* of its first event */
	uint64_t ts_min, ts_max;  /* CLOCK_BOOTTIME ns of its events */
	/* A Bloom filter of the units of its unit frames (history_unit_bloom_add()): a query for
	 * a unit reads only the blocks whose filter may hold it. */
	uint64_t units[HISTORY_UNIT_BLOOM_WORDS];
	uint32_t crc; /* CRC-32 of this header (crc 0) and the zstd frame */
	uint32_t reserved;
};
_Static_assert(sizeof(struct history_block_header) == 80, "no implicit padding");

/* A gap record: a PERFRELAY_TYPE_LOST record of this size (the hub's lost record is a header and
 * the count: HISTORY_GAP_BEHIND). */
struct history_gap {
	uint8_t hdr[32]; /* struct perfrelay_hdr, type PERFRELAY_TYPE_LOST */
	uint64_t count;  /* events */
	uint32_t reason; /* HISTORY_GAP_* */
	uint32_t reserved;
};
_Static_assert(sizeof(struct history_gap) == 48, "no implicit padding");

/* One block as the store knows it. */
typedef struct HistoryBlock {
	uint64_t offset; /* of its header in the segment file */
	uint32_t size;   /* header and frame */
	uint32_t n_events;
	uint64_t first_ordinal;
	uint64_t ts_min, ts_max;
	uint64_t units[HISTORY_UNIT_BLOOM_WORDS];
} HistoryBlock;

typedef struct HistorySegment {
	uint64_t id;
	uint64_t first_ordinal;
	uint64_t n_events;
	int64_t realtime_offset_ns;
	uint8_t boot_id[16];
	uint64_t end; /* bytes: header and blocks */
	uint64_t last_ts;
	HistoryBlock *blocks;
	size_t n_blocks, n_alloc;
} HistorySegment;

/* Where a stream is: a block and the events of it already passed. */
typedef struct HistoryPos {
	uint64_t segment;
	uint64_t offset; /* of the block's header */
	uint32_t skip;   /* events of the block before the position */
} HistoryPos;

/* A cursor: the event at (segment, block offset, index) of the history with this id, its
 * ordinal, boot and time (docs/history.md, "Cursors"). */
typedef struct HistoryCursor {
	uint8_t history_id[16];
	uint64_t segment;
	uint64_t offset;
	uint32_t index;
	uint64_t ordinal;
} HistoryCursor;

typedef struct HistoryStoreStats {
	uint64_t segments, bytes, events;                         /* held now */
	uint64_t first_ordinal;                                   /* of the oldest event held */
	uint64_t removed_segments, removed_bytes, removed_events; /* by retention, since start */
	uint64_t torn_cuts, torn_bytes, torn_blocks;              /* torn tails cut off at start */
	uint64_t corrupt_segments; /* unreadable segment files set aside at start */
} HistoryStoreStats;

typedef struct HistoryStore {
	pthread_mutex_t lock; /* guards everything below but dir_fd, lock_fd, path, id */
	int dir_fd, lock_fd;
	char *path;
	uint8_t id[16];
	HistorySegment *segs; /* oldest first */
	size_t n_segs, n_alloc;
	uint64_t next_ordinal; /* of the next event written */
	HistoryStoreStats stats;
} HistoryStore;

/* Opens (makes) the directory and takes its lock: -EBUSY if another perfrelayd holds it. Reads
 * every segment: a torn tail of a segment not closed is cut off (counted), a segment file that is
 * not one is renamed *.corrupt (counted). Logs what it did. */
int history_store_open(const char *path, HistoryStore **ret);
HistoryStore *history_store_free(HistoryStore *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HistoryStore *, history_store_free);

/* The store's lock held: */
HistorySegment *history_store_find(HistoryStore *s, uint64_t id); /* NULL: not held */
int history_segment_add_block(HistorySegment *g, const HistoryBlock *b);
/* Appends a segment newer than every one held (taking its blocks), counted; -ENOMEM. */
int history_store_add_segment(HistoryStore *s, const HistorySegment *g);

/* A segment's file name in buf (at least 32 bytes). */
void history_segment_name(uint64_t id, char *buf, size_t size);

/* Cursors as strings: "h=<id>;s=<segment>;o=<offset>;i=<index>;n=<ordinal>", hex. */
void history_cursor_format(const HistoryCursor *c, char buf[static HISTORY_CURSOR_MAX]);
int history_cursor_parse(const char *s, HistoryCursor *ret); /* -EINVAL */

/* A block's filter of units: no false negatives (a block with the unit always says it may hold
 * it), false positives only cost reading a block. */
void history_unit_bloom_add(uint64_t bloom[static HISTORY_UNIT_BLOOM_WORDS], const char *unit);
bool history_unit_bloom_has(const uint64_t bloom[static HISTORY_UNIT_BLOOM_WORDS], const char *unit);

uint32_t history_crc(uint32_t crc, const void *p, size_t n);
uint32_t history_segment_header_crc(const struct history_segment_header *h);
/* Checks a block header read from a file of file_size bytes at offset: magic, sizes in bounds,
 * the whole block inside the file. */
bool history_block_header_valid(const struct history_block_header *b, uint64_t offset, uint64_t file_size);
/* Reads and checks the block at offset of fd: its CRC, then decompresses it into raw (of
 * HISTORY_BLOCK_RAW_MAX bytes) with dctx (a ZSTD_DCtx). comp is scratch of
 * HISTORY_BLOCK_COMP_MAX bytes. Returns the raw size, -EBADMSG for a block that is not intact,
 * or -errno. */
ssize_t history_block_read(
	int fd, uint64_t offset, void *dctx, void *comp, void *raw, struct history_block_header *ret);
