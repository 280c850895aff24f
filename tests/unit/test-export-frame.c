/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's batch format: unit frames written and read back with their records, packet
 * records whole, and every malformed batch refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/export-frame.h"
#include "unit-test.h"

/* A packet record: the fixed part and its 5 bytes (the struct below is padded beyond that). */
#define PKT_SIZE (sizeof(struct perfrelay_packet) + 5)

static uint8_t batch[8192];
static size_t batch_len;

static void append(const void *p, size_t n) {
	memcpy(batch + batch_len, p, n);
	batch_len += n;
}

static void append_record(const void *rec, uint32_t size) {
	append(&size, sizeof(size));
	append(rec, size);
}

int main(void) {
	struct perfrelay_exec ex = {
		.hdr = { .magic = PERFRELAY_MAGIC,
			 .version = PERFRELAY_VERSION,
			 .type = PERFRELAY_TYPE_EXEC,
			 .size = sizeof(ex),
			 .producer = 1,
			 .cpu = 1,
			 .seq = 7 },
		.cgroup_id = 4242,
	};
	struct {
		struct perfrelay_packet p;
		uint8_t bytes[5];
	} pkt = {
		.p = { .hdr = { .magic = PERFRELAY_MAGIC,
				.version = PERFRELAY_VERSION,
				.type = PERFRELAY_TYPE_PACKET,
				.size = sizeof(struct perfrelay_packet),
				.producer = 6,
				.seq = 1 },
		       .cgroup_id = 99,
		       .cap_len = 5,
		       .orig_len = 60 },
		.bytes = { 1, 2, 3, 4, 5 },
	};
	uint8_t frame[EXPORT_UNIT_FRAME_MAX];
	char long_name[PERFRELAY_UNIT_NAME_MAX + 1];
	ExportRecord r;
	size_t pos = 0, n;

	ASSERT(export_record_cgroup_id(&ex.hdr, &ex, sizeof(ex)) == 4242);
	ASSERT(export_record_cgroup_id(&ex.hdr, &ex, 40) == 0); /* too short to hold it */

	/* exec with its unit, packet without one. */
	n = export_unit_frame(&ex.hdr, &ex, sizeof(ex), "sshd.service", frame);
	ASSERT(n == 4 + sizeof(struct perfrelay_unit) + sizeof("sshd.service"));
	append(frame, n);
	append_record(&ex, sizeof(ex));
	append_record(&pkt, PKT_SIZE);
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == 1);
	ASSERT(r.hdr.type == PERFRELAY_TYPE_EXEC && r.size == sizeof(ex) &&
	       strcmp(r.unit, "sshd.service") == 0);
	ASSERT(memcmp(r.rec, &ex, sizeof(ex)) == 0);
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == 1);
	ASSERT(r.hdr.type == PERFRELAY_TYPE_PACKET && r.size == PKT_SIZE && r.unit[0] == 0);
	ASSERT(memcmp(r.rec, &pkt, PKT_SIZE) == 0);
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == 0);

	/* No unit frame: no unit, no cgroup id, a name too long. */
	memset(long_name, 'a', PERFRELAY_UNIT_NAME_MAX);
	long_name[PERFRELAY_UNIT_NAME_MAX] = 0;
	ASSERT(export_unit_frame(&ex.hdr, &ex, sizeof(ex), NULL, frame) == 0);
	ASSERT(export_unit_frame(&ex.hdr, &ex, sizeof(ex), long_name, frame) == 0);
	ex.cgroup_id = 0;
	ASSERT(export_unit_frame(&ex.hdr, &ex, sizeof(ex), "a.service", frame) == 0);
	ex.cgroup_id = 4242;

	/* Malformed: a cut length, a frame beyond the data, a size that disagrees, a packet
	 * without its bytes, a unit frame at the end or before another, one without its NUL. */
	pos = 0;
	ASSERT(export_batch_next(batch, 3, &pos, &r) == -EBADMSG);
	pos = 0;
	ASSERT(export_batch_next(batch, n + 10, &pos, &r) == -EBADMSG);
	batch_len = 0;
	ex.hdr.size = sizeof(ex) - 8;
	append_record(&ex, sizeof(ex));
	pos = 0;
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == -EBADMSG);
	ex.hdr.size = sizeof(ex);
	batch_len = 0;
	append_record(&pkt, PKT_SIZE - 1);
	pos = 0;
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == -EBADMSG);
	batch_len = 0;
	append(frame, export_unit_frame(&ex.hdr, &ex, sizeof(ex), "x.service", frame));
	pos = 0;
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == -EBADMSG);
	append(frame, export_unit_frame(&ex.hdr, &ex, sizeof(ex), "x.service", frame));
	append_record(&ex, sizeof(ex));
	pos = 0;
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == -EBADMSG);
	batch_len = 0;
	n = export_unit_frame(&ex.hdr, &ex, sizeof(ex), "x.service", frame);
	frame[n - 1] = 'x'; /* the NUL */
	append(frame, n);
	append_record(&ex, sizeof(ex));
	pos = 0;
	ASSERT(export_batch_next(batch, batch_len, &pos, &r) == -EBADMSG);
	return failures ? 1 : 0;
}
