/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Frames of perfrelay-export's batches: unit frames written, batches read and validated. */
#include "common/export-frame.h"

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

uint64_t export_record_cgroup_id(const struct perfrelay_hdr *hdr, const void *rec, size_t size) {
	size_t off;
	uint64_t id;

	switch (hdr->type) {
	case PERFRELAY_TYPE_EXEC:
		off = offsetof(struct perfrelay_exec, cgroup_id);
		break;
	case PERFRELAY_TYPE_COUNTERS:
		off = offsetof(struct perfrelay_unit_counters, cgroup_id);
		break;
	case PERFRELAY_TYPE_PACKET:
		off = offsetof(struct perfrelay_packet, cgroup_id);
		break;
	default:
		return 0;
	}
	if (size < off + sizeof(id))
		return 0;
	memcpy(&id, (const uint8_t *) rec + off, sizeof(id));
	return id;
}

size_t export_unit_frame(
	const struct perfrelay_hdr *hdr,
	const void *rec,
	size_t size,
	const char *unit,
	uint8_t buf[static EXPORT_UNIT_FRAME_MAX]) {
	return unit_frame_write(hdr, export_record_cgroup_id(hdr, rec, size), unit, buf);
}

/* The frame at *pos: its record's header and bytes; moves *pos past it. */
static int next_frame(
	const uint8_t *data, size_t len, size_t *pos, struct perfrelay_hdr *hdr, const uint8_t **rec, size_t *size) {
	uint32_t le;
	size_t n, want;

	if (len - *pos < sizeof(le))
		return -EBADMSG;
	memcpy(&le, data + *pos, sizeof(le));
	n = le32toh(le);
	if (n < sizeof(*hdr) || n > PERFRELAY_RECORD_MAX || n > len - *pos - sizeof(le))
		return -EBADMSG;
	memcpy(hdr, data + *pos + sizeof(le), sizeof(*hdr));
	want = hdr->size;
	if (hdr->type == PERFRELAY_TYPE_PACKET && hdr->size >= sizeof(struct perfrelay_packet)) {
		struct perfrelay_packet p;

		memcpy(&p, data + *pos + sizeof(le), sizeof(p));
		want += p.cap_len;
	}
	if (hdr->magic != PERFRELAY_MAGIC || want != n)
		return -EBADMSG;
	*rec = data + *pos + sizeof(le);
	*size = n;
	*pos += sizeof(le) + n;
	return 0;
}

int export_batch_next(const uint8_t *data, size_t len, size_t *pos, ExportRecord *ret) {
	const uint8_t *rec;
	size_t size;
	int r;

	if (*pos >= len)
		return 0;
	ret->unit[0] = 0;
	r = next_frame(data, len, pos, &ret->hdr, &rec, &size);
	if (r < 0)
		return r;
	if (ret->hdr.type == PERFRELAY_TYPE_UNIT) {
		if (!unit_frame_name(
			    rec + sizeof(struct perfrelay_hdr), size - sizeof(struct perfrelay_hdr), ret->unit))
			return -EBADMSG;
		if (*pos >= len)
			return -EBADMSG;
		r = next_frame(data, len, pos, &ret->hdr, &rec, &size);
		if (r < 0)
			return r;
		if (ret->hdr.type == PERFRELAY_TYPE_UNIT)
			return -EBADMSG;
	}
	ret->rec = rec;
	ret->size = size;
	return 1;
}
