/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Frames of perfrelay-export's batches: unit frames written, batches read and validated. */
#include "export-frame.h"

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
	struct perfrelay_unit u;
	size_t name_len;
	uint32_t le;

	if (!unit)
		return 0;
	name_len = strnlen(unit, PERFRELAY_UNIT_NAME_MAX);
	if (name_len == 0 || name_len >= PERFRELAY_UNIT_NAME_MAX)
		return 0;
	u = (struct perfrelay_unit){
		.hdr = *hdr,
		.cgroup_id = export_record_cgroup_id(hdr, rec, size),
	};
	if (u.cgroup_id == 0)
		return 0;
	u.hdr.type = PERFRELAY_TYPE_UNIT;
	u.hdr.size = (uint16_t) (sizeof(u) + name_len + 1);
	le = htole32(u.hdr.size);
	memcpy(buf, &le, sizeof(le));
	memcpy(buf + sizeof(le), &u, sizeof(u));
	memcpy(buf + sizeof(le) + sizeof(u), unit, name_len + 1);
	return sizeof(le) + u.hdr.size;
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
		const char *name = (const char *) rec + sizeof(struct perfrelay_unit);
		size_t max, n;

		if (size <= sizeof(struct perfrelay_unit))
			return -EBADMSG;
		max = size - sizeof(struct perfrelay_unit);
		n = strnlen(name, max);
		if (n == 0 || n >= max || n >= sizeof(ret->unit))
			return -EBADMSG;
		memcpy(ret->unit, name, n + 1);
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
