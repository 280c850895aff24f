/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pcapng blocks: each is type, total length, body (options padded to 4 bytes, ended by
 * opt_endofopt), total length again. */
#include <errno.h>
#include <string.h>

#include "ctl/pcapng.h"

#define BT_SHB 0x0A0D0D0Au
#define BT_IDB 0x00000001u
#define BT_EPB 0x00000006u
#define BT_ISB 0x00000005u

#define OPT_END       0
#define OPT_COMMENT   1
#define OPT_SHB_APP   4
#define OPT_IF_NAME   2
#define OPT_IF_TSRES  9
#define OPT_ISB_START 2
#define OPT_ISB_END   3
#define OPT_ISB_RECV  4
#define OPT_ISB_DROP  5

#define PAD4(n) (((n) + 3u) & ~3u)

static int put(FILE *f, const void *p, size_t n) {
	return fwrite(p, 1, n, f) == n ? 0 : -EIO;
}

static int put_u32(FILE *f, uint32_t v) {
	return put(f, &v, sizeof(v));
}

static int put_pad(FILE *f, size_t n) {
	static const uint8_t zero[4];

	return put(f, zero, PAD4(n) - n);
}

static size_t opt_size(size_t len) {
	return 4 + PAD4(len);
}

static int put_opt(FILE *f, uint16_t code, const void *value, uint16_t len) {
	uint16_t h[2] = { code, len };
	int r = put(f, h, sizeof(h));

	if (r >= 0 && len > 0)
		r = put(f, value, len);
	if (r >= 0)
		r = put_pad(f, len);
	return r;
}

static uint16_t bounded(const char *s) {
	size_t n = s ? strlen(s) : 0;

	return (uint16_t) (n > 1024 ? 1024 : n); /* an option value is at most 64 KiB */
}

/* A timestamp in two u32 halves, high first, as EPB and ISB carry them. */
static void ts_split(uint64_t ts, uint32_t out[2]) {
	out[0] = (uint32_t) (ts >> 32);
	out[1] = (uint32_t) ts;
}

int pcapng_write_shb(FILE *f, const char *application) {
	uint16_t app = bounded(application);
	uint32_t len = 28 + (app ? opt_size(app) : 0) + 4;
	uint16_t version[2] = { 1, 0 };
	int64_t section_length = -1; /* not known */
	int r;

	r = put_u32(f, BT_SHB);
	if (r >= 0)
		r = put_u32(f, len);
	if (r >= 0)
		r = put_u32(f, 0x1A2B3C4Du); /* byte-order magic */
	if (r >= 0)
		r = put(f, version, sizeof(version));
	if (r >= 0)
		r = put(f, &section_length, sizeof(section_length));
	if (r >= 0 && app)
		r = put_opt(f, OPT_SHB_APP, application, app);
	if (r >= 0)
		r = put_opt(f, OPT_END, NULL, 0);
	if (r >= 0)
		r = put_u32(f, len);
	return r;
}

int pcapng_write_idb(FILE *f, uint16_t linktype, uint32_t snaplen, const char *name, const char *comment) {
	uint16_t n = bounded(name), c = bounded(comment), reserved = 0;
	uint8_t tsresol = 9; /* 10^-9 s */
	uint32_t len = 16 + (n ? opt_size(n) : 0) + (c ? opt_size(c) : 0) + opt_size(1) + 4 + 4;
	int r;

	r = put_u32(f, BT_IDB);
	if (r >= 0)
		r = put_u32(f, len);
	if (r >= 0)
		r = put(f, &linktype, sizeof(linktype));
	if (r >= 0)
		r = put(f, &reserved, sizeof(reserved));
	if (r >= 0)
		r = put_u32(f, snaplen);
	if (r >= 0 && n)
		r = put_opt(f, OPT_IF_NAME, name, n);
	if (r >= 0 && c)
		r = put_opt(f, OPT_COMMENT, comment, c);
	if (r >= 0)
		r = put_opt(f, OPT_IF_TSRES, &tsresol, 1);
	if (r >= 0)
		r = put_opt(f, OPT_END, NULL, 0);
	if (r >= 0)
		r = put_u32(f, len);
	return r;
}

/* The start of an EPB or ISB: type, total length, interface id, timestamp. */
static int put_stamped(FILE *f, uint32_t type, uint32_t len, uint32_t interface, uint64_t ts_ns) {
	uint32_t ts[2];
	int r;

	ts_split(ts_ns, ts);
	r = put_u32(f, type);
	if (r >= 0)
		r = put_u32(f, len);
	if (r >= 0)
		r = put_u32(f, interface);
	if (r >= 0)
		r = put(f, ts, sizeof(ts));
	return r;
}

int pcapng_write_epb(
	FILE *f, uint32_t interface, uint64_t ts_ns, const void *data, uint32_t caplen, uint32_t origlen) {
	uint32_t len = 28 + PAD4(caplen) + 4;
	int r;

	r = put_stamped(f, BT_EPB, len, interface, ts_ns);
	if (r >= 0)
		r = put_u32(f, caplen);
	if (r >= 0)
		r = put_u32(f, origlen);
	if (r >= 0 && caplen > 0)
		r = put(f, data, caplen);
	if (r >= 0)
		r = put_pad(f, caplen);
	if (r >= 0)
		r = put_u32(f, len);
	return r;
}

int pcapng_write_isb(
	FILE *f,
	uint32_t interface,
	uint64_t ts_ns,
	uint64_t start_ns,
	uint64_t end_ns,
	const uint64_t *ifrecv,
	const uint64_t *ifdrop) {
	uint32_t len = 20 + (2 + !!ifrecv + !!ifdrop) * opt_size(8) + 4 + 4, start[2], end[2];
	int r;

	ts_split(start_ns, start);
	ts_split(end_ns, end);
	r = put_stamped(f, BT_ISB, len, interface, ts_ns);
	if (r >= 0)
		r = put_opt(f, OPT_ISB_START, start, 8);
	if (r >= 0)
		r = put_opt(f, OPT_ISB_END, end, 8);
	if (r >= 0 && ifrecv)
		r = put_opt(f, OPT_ISB_RECV, ifrecv, 8);
	if (r >= 0 && ifdrop)
		r = put_opt(f, OPT_ISB_DROP, ifdrop, 8);
	if (r >= 0)
		r = put_opt(f, OPT_END, NULL, 0);
	if (r >= 0)
		r = put_u32(f, len);
	return r;
}
