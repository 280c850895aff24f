/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libperfrelay's insides, shared by its files: the client's state (libperfrelay.c: the socket
 * stream) and the shared path's (shared-reader.c: docs/shared-ring.md). Nothing here is
 * exported (libperfrelay.sym). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "lib/perfrelay.h"
#include "lib/schema.h"
#include "shared-ring.h"
#include "unit-frame.h"

#define PERFRELAY_PROTOCOL 1u

/* One buffer holds the unread bytes: it must fit the longest line or frame, plus room to read
 * ahead so that a batch of events costs one read(). */
#define FRAME_MAX   (4u + PERFRELAY_RECORD_MAX)
#define BUFFER_SIZE (PERFRELAY_LINE_MAX + 32u * 1024u)
_Static_assert(BUFFER_SIZE >= FRAME_MAX + 4096u, "the buffer must hold the largest frame");
/* Compact the buffer (move the unread bytes to its start) when less than this is left to read
 * into. Unread bytes never exceed one incomplete line or frame, so compacting is rare. */
#define READ_ROOM_MIN (BUFFER_SIZE / 4u)

/* Daemon messages are short; longer ones are cut, so a hostile peer cannot make us keep 96 KiB. */
#define MESSAGE_MAX 1024u

/* Notices waiting on the shared path: two of the largest. */
#define SHARED_NOTICES_MAX (2u * (PERFRELAY_NOTICE_MAX + 1u))

/* One ring of the shared path, as this client reads it. */
typedef struct SharedCursor {
	const struct perfrelay_shared_ctl *ctl;
	const uint8_t *data;
	uint64_t mask;
	uint64_t pos;      /* the next frame to copy; the member page's pos after each swap */
	uint64_t next_seq; /* the seq that frame should have: a larger one means events were lost */
} SharedCursor;

/* The shared path (docs/shared-ring.md): frames are copied out of the rings, validated by the
 * swap of the member page's position, and their bytes appended to the client's buffer, where
 * the same parsers as for the socket stream read them. The socket carries wakeups ("\n"),
 * notices of records lost upstream and the daemon's goodbye or error line. */
typedef struct Shared {
	uint8_t *map;
	size_t map_size;
	struct perfrelay_shared_member *page;
	unsigned n_rings, next_ring;
	SharedCursor ring[PERFRELAY_SHARED_RINGS_MAX];
	/* Frames copied from one ring: [next, end) not yet read. Binary clients read them in
	 * place: [sub, sub_end) is what is left of the current frame's bytes. */
	uint8_t *scratch_mem;
	/* scratch_mem + 4: frames are 16-aligned and a binary frame's record follows the frame
	 * header and its own 4-byte length, so records land 8-aligned and are read in place. */
	uint8_t *scratch;
	size_t next, end, sub, sub_end;
	uint64_t lost;                       /* events lost before the frames in scratch, not yet told */
	char line[PERFRELAY_NOTICE_MAX + 2]; /* a line coming in on the socket */
	size_t line_len;
	/* Notices of records lost upstream (docs/protocol.md) that came on the socket, whole lines
	 * with their newlines, not handed out yet; one that finds no room is dropped. */
	char notices[SHARED_NOTICES_MAX];
	size_t notices_len;
	int socket_end; /* the socket's last word, a negative errno: told once the rings are drained */
	/* The daemon moved us to a new ring set (a "reshared" line, with its descriptors in
	 * hello_fds): the old one is never written again; read it out, then switch. */
	unsigned reshared_rings;
} Shared;

typedef enum ClientState {
	CLIENT_NEW,       /* perfrelay_connect() not called yet */
	CLIENT_CONNECTED, /* hello received; reads allowed until `error` is set */
	CLIENT_FAILED,    /* perfrelay_connect() failed */
} ClientState;

struct perfrelay_client {
	ClientState state;
	int fd;
	int error; /* sticky negative errno once the stream has ended, else 0 */

	/* Unread bytes are buf[start, end); buf[start, scanned) is known to hold no '\n'. */
	char *buf;
	size_t start, scanned, end;
	/* An 8-aligned copy of the current record when it is not aligned in buf (binary format). */
	void *record;

	struct perfrelay_hello hello;
	char *version;
	char *message;
	char *socket_path;
	char **containers; /* perfrelay_client_set_containers() */
	size_t n_containers;

	/* Binary format: the schema frames received, one per third-party type (schema.h). */
	Schema *schemas[SCHEMA_MAX_KEPT];
	unsigned n_schemas, next_evicted;

	/* Descriptors that came with the hello (the shared path's), until it is parsed. */
	int hello_fds[2];
	unsigned n_hello_fds;
	bool hello_read;
	Shared *shared; /* NULL: the socket stream */

	/* Binary format: the name of the last unit frame, for the record right after it. */
	bool unit_pending;                   /* a unit frame came and its record has not yet */
	bool unit_current;                   /* the record returned last had one */
	bool cursor_pending, cursor_current; /* as unit_*, for cursor frames: beside them, as
					      * every record writes all four */
	char unit[PERFRELAY_UNIT_NAME_MAX];
	char cursor[PERFRELAY_CURSOR_MAX];
};

/* Hidden: calls between the library's files are direct (no PLT, no interposition), and the
 * compiler may inline them within a file, as it did when they were static. */
#define _internal_ __attribute__((visibility("hidden")))

/* libperfrelay.c: the socket stream. */
_internal_ int fail(perfrelay_client *c, int error); /* sets the sticky error; returns it */
_internal_ ssize_t recv_keep_fds(perfrelay_client *c, void *buf, size_t size);
/* How long poll() may wait: -1 without a timeout, else the milliseconds left (0: none). The
 * deadline is set at a call's first wait, so that a call that finds data never reads the clock. */
_internal_ int wait_ms(int timeout_ms, uint64_t *deadline);
/* Waits up to that for fd to become readable: 1 when poll() returned, 0 when the time is up
 * (at once for a timeout of 0), or -errno (-EINTR: a signal came). */
_internal_ int wait_readable(int fd, int timeout_ms, uint64_t *deadline);
_internal_ int read_line(perfrelay_client *c, char **ret, size_t *ret_len, int timeout_ms);
_internal_ json_object *parse_object(const char *line, size_t len);
_internal_ const char *get_string(json_object *o, const char *key);
_internal_ bool get_uint(json_object *o, const char *key, uint64_t *ret);
/* Binary frames, from the socket or a shared ring: a record's checks, its length prefix, and the
 * record handed out. Inline: both files run them for every record. */
/* A packet record's bytes after its fixed part (cap_len), when the frame holds them; else 0. */
static inline uint32_t packet_bytes(const struct perfrelay_hdr *h, const char *rec, uint32_t length) {
	struct perfrelay_packet p;

	if (h->type != PERFRELAY_TYPE_PACKET || h->size != sizeof(p) || length < sizeof(p))
		return 0;
	memcpy(&p, rec, sizeof(p));
	return length - sizeof(p) == p.cap_len ? p.cap_len : 0;
}

/* A binary frame's little-endian u32 length prefix. */
static inline uint32_t frame_length_at(const void *p) {
	uint8_t le[4];

	memcpy(le, p, sizeof(le));
	return (uint32_t) le[0] | (uint32_t) le[1] << 8 | (uint32_t) le[2] << 16 | (uint32_t) le[3] << 24;
}

/* Hands out a checked record of `length` bytes: in place if it is 8-aligned, else an aligned
 * copy (frames follow each other without padding). */
static inline void frame_out(
	perfrelay_client *c,
	const char *rec,
	uint32_t length,
	const struct perfrelay_hdr **hdr,
	const void **payload,
	size_t *payload_size) {
	if ((uintptr_t) rec % _Alignof(struct perfrelay_hdr) != 0) {
		memcpy(c->record, rec, length);
		rec = c->record;
	}
	*hdr = (const struct perfrelay_hdr *) rec;
	*payload = rec + sizeof(struct perfrelay_hdr);
	*payload_size = length - sizeof(struct perfrelay_hdr);
}

/* A binary frame's record of `length` bytes, as perfrelay_next_record() documents it. */
static inline int frame_check(const char *rec, uint32_t length) {
	struct perfrelay_hdr h;

	if (length < sizeof(h) || length > PERFRELAY_RECORD_MAX)
		return -EBADMSG;
	memcpy(&h, rec, sizeof(h));
	if (h.magic != PERFRELAY_MAGIC || h.size != length - packet_bytes(&h, rec, length))
		return -EBADMSG;
	return 0;
}

/* shared-reader.c: the shared path. */
_internal_ int shared_setup(perfrelay_client *c, unsigned n_rings); /* maps the hello's ring set */
_internal_ void shared_unmap(Shared *s);
/* JSON clients: the frames' lines appended to c->buf for read_line(). */
_internal_ int shared_fill(perfrelay_client *c, int timeout_ms, uint64_t *deadline);
/* Binary clients: the next record frame, read in place. */
_internal_ int shared_next_frame(
	perfrelay_client *c,
	const struct perfrelay_hdr **hdr,
	const void **payload,
	size_t *payload_size,
	int timeout_ms);
