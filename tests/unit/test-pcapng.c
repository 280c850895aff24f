/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for client/ctl/pcapng.c: every block's two lengths agree and are 32-bit aligned, the
 * section header's byte-order magic, the packet block's timestamp halves, lengths and padded
 * bytes, the statistics block's options, as the pcapng draft lays them out. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/pcapng.h"

#include "unit-test.h"

static uint32_t u32_at(const uint8_t *p) {
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t u64_at(const uint8_t *p) {
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

int main(void) {
	static const uint8_t packet[5] = { 0x45, 0x00, 0x00, 0x1c, 0x7f };
	char *buf = NULL;
	size_t size = 0, off = 0;
	FILE *f = open_memstream(&buf, &size);
	const uint8_t *p;
	unsigned blocks = 0;
	uint32_t types[5];

	ASSERT(f);
	if (!f)
		return 1;
	ASSERT(pcapng_write_shb(f, "test") == 0);
	ASSERT(pcapng_write_idb(f, PCAPNG_LINKTYPE_RAW, 64, "lo", "perfrelay capture of x.service") == 0);
	ASSERT(pcapng_write_epb(f, 0, UINT64_C(0x0000000112345678), packet, sizeof(packet), 1500) == 0);
	ASSERT(pcapng_write_isb(f, 0, 10, 1, 9, &(uint64_t){ 100 }, &(uint64_t){ 7 }) == 0);
	/* A further interface's statistics: the counts it does not know are left out. */
	ASSERT(pcapng_write_isb(f, 1, 10, 1, 9, NULL, NULL) == 0);
	fclose(f);

	p = (const uint8_t *) buf;
	while (off + 12 <= size && blocks < 5) {
		uint32_t len = u32_at(p + off + 4);

		ASSERT(len % 4 == 0 && len >= 12 && off + len <= size);
		if (len % 4 != 0 || len < 12 || off + len > size)
			break;
		ASSERT(u32_at(p + off + len - 4) == len); /* the trailing length */
		types[blocks++] = u32_at(p + off);
		off += len;
	}
	ASSERT(off == size && blocks == 5);
	ASSERT(types[0] == 0x0A0D0D0A && types[1] == 1 && types[2] == 6 && types[3] == 5 && types[4] == 5);
	ASSERT(u32_at(p + 8) == 0x1A2B3C4D); /* byte-order magic */

	/* The packet block: interface 0, timestamp high then low, caplen 5, len 1500, 5 bytes and
	 * 3 of padding. */
	off = u32_at(p + 4);        /* skip the SHB */
	off += u32_at(p + off + 4); /* and the IDB */
	ASSERT(u32_at(p + off + 4) == 28 + 8 + 4);
	ASSERT(u32_at(p + off + 8) == 0);
	ASSERT(u32_at(p + off + 12) == 1 && u32_at(p + off + 16) == 0x12345678);
	ASSERT(u32_at(p + off + 20) == 5 && u32_at(p + off + 24) == 1500);
	ASSERT(memcmp(p + off + 28, packet, 5) == 0 && p[off + 33] == 0 && p[off + 35] == 0);

	/* The statistics block: options 2, 3 (start, end), 4 (ifrecv) and 5 (ifdrop), 8 bytes each. */
	off += u32_at(p + off + 4);
	ASSERT(u32_at(p + off + 4) == 20 + 4 * 12 + 4 + 4);
	ASSERT(u32_at(p + off + 20) == (8u << 16 | 2u) && u32_at(p + off + 24) == 0 &&
	       u32_at(p + off + 28) == 1);
	ASSERT(u32_at(p + off + 44) == (8u << 16 | 4u) && u64_at(p + off + 48) == 100);
	ASSERT(u32_at(p + off + 56) == (8u << 16 | 5u) && u64_at(p + off + 60) == 7);
	ASSERT(u32_at(p + off + 68) == 0); /* opt_endofopt */

	/* The second: interface 1, start and end only. */
	off += u32_at(p + off + 4);
	ASSERT(u32_at(p + off + 4) == 20 + 2 * 12 + 4 + 4);
	ASSERT(u32_at(p + off + 8) == 1);
	ASSERT(u32_at(p + off + 20) == (8u << 16 | 2u) && u32_at(p + off + 32) == (8u << 16 | 3u));
	ASSERT(u32_at(p + off + 44) == 0); /* opt_endofopt right after: no ifrecv, no ifdrop */
	free(buf);
	if (failures)
		return 1;
	printf("test-pcapng: all passed\n");
	return 0;
}
