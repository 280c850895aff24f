/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The memory layout of the shared fan-out path (docs/shared-ring.md), the one contract between
 * the daemon, which writes it, and libperfrelay, which reads it: a ring set (one memfd, mapped
 * read-only by every client of one subscription) and a member page (one memfd per client,
 * mapped read-write by that client and the daemon). Fixed-width fields only; everything is
 * native-endian (both sides run on the same host). */
#pragma once

#include <stdint.h>

#define PERFRELAY_SHARED_MAGIC     UINT64_C(0x50524c59534852ff)
#define PERFRELAY_SHARED_VERSION   1u
/* One ring per hub slot (reader threads and the main thread's own): more is refused, and the
 * client falls back to the socket stream. 64 rings keep the member page within one 4 KiB page. */
#define PERFRELAY_SHARED_RINGS_MAX 60u
/* Frames start at multiples of this, so that a padding frame always fits at the ring's end. */
#define PERFRELAY_SHARED_ALIGN     16u
/* The most bytes a frame holds after its header (a JSON line, a record behind its unit frame, or
 * a schema frame, which goes in a frame of its own when the three together would be more), so
 * that a reader's copy room of this plus a header always holds a whole frame. */
#define PERFRELAY_SHARED_FRAME_MAX (96u * 1024u)
/* A notice of records lost upstream (docs/protocol.md, "Lost upstream"): its JSON's bytes at
 * most, without the newline. A member that sent "notices": true gets them as lines on its
 * socket, between the wakeups. */
#define PERFRELAY_NOTICE_MAX       (16u * 1024u)

/* At offset 0 of the ring set, one page. Written once by the daemon before it passes the fd. */
struct perfrelay_shared_header {
	uint64_t magic;   /* PERFRELAY_SHARED_MAGIC */
	uint32_t version; /* PERFRELAY_SHARED_VERSION */
	uint32_t n_rings; /* 1..PERFRELAY_SHARED_RINGS_MAX */
	uint64_t size;    /* of the whole memfd, for the client's bound checks */
	struct {
		uint64_t offset; /* of the ring's struct perfrelay_shared_ctl; data follows it */
		uint64_t size;   /* of the ring's data: a power of two */
	} ring[PERFRELAY_SHARED_RINGS_MAX];
};
_Static_assert(sizeof(struct perfrelay_shared_header) == 24 + 16 * PERFRELAY_SHARED_RINGS_MAX, "no padding");
_Static_assert(sizeof(struct perfrelay_shared_header) <= 4096, "one page");

/* Before each ring's data. Positions are bytes written since the ring was made; a frame at
 * position p starts at data[p & (size - 1)] and never wraps the data's end. */
struct perfrelay_shared_ctl {
	/* Frames in [.., head) are whole. Stored with release after the frames. */
	_Alignas(64) uint64_t head;
	/* Frames before this position may be being overwritten: the daemon stores it before it
	 * reclaims them (and moves every member still behind it, see the member page). */
	_Alignas(64) uint64_t evict;
	uint8_t reserved[56];
};
_Static_assert(sizeof(struct perfrelay_shared_ctl) == 128, "two cache lines");

/* Every frame: this header, then the bytes a socket client of the same subscription would read
 * for one event (a binary frame, maybe behind a schema and a unit frame; or a JSON line), then
 * zeros up to the next multiple of PERFRELAY_SHARED_ALIGN. */
struct perfrelay_shared_frame {
	uint32_t size; /* the whole frame, header and padding included: a multiple of 16 */
	uint32_t len;  /* the event's bytes after this header; 0: padding up to the ring's end */
	uint64_t seq;  /* the ring's event number: the frames before this one hold seq events */
};
_Static_assert(sizeof(struct perfrelay_shared_frame) == 16, "no padding");

/* A client's own page. The client moves ring[r].pos forward over frames it copied, only with a
 * compare-and-swap from the position it copied from; the daemon, before it reclaims frames a
 * member has not passed, moves pos to the first frame it keeps, with a compare-and-swap too.
 * Whoever's swap wins owns those events: read (sent) or lost (dropped), never both. A client
 * whose swap failed resumes at the position the daemon set; the seq of the first frame it then
 * reads, less the seq it expected, is what it lost: the daemon counts the same. */
struct perfrelay_shared_member {
	struct {
		_Alignas(64) uint64_t pos;
		uint64_t start_seq; /* the ring's seq at pos when the client joined */
	} ring[PERFRELAY_SHARED_RINGS_MAX];
	/* The client stores 1 before it sleeps in poll() on the socket, then checks the heads
	 * again; the daemon, after it published a head, exchanges it for 0 and, if it was 1,
	 * writes one "\n" to the socket. */
	_Alignas(64) uint32_t sleeping;
	uint32_t pad;
};
_Static_assert(sizeof(struct perfrelay_shared_member) <= 4096, "one page");
