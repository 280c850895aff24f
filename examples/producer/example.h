/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* The example producer's record, shared by its BPF side and its loader: one of each field kind
 * perfrelayd decodes from BTF (integers of each width and sign, an enum, a string, a nested
 * struct, an array). The BPF side declares it to perfrelay with PERFRELAY_RECORD. */
#ifndef EXAMPLE_H
#define EXAMPLE_H

#define EXAMPLE_PRODUCER 300    /* >= PERFRELAY_PRODUCER_THIRD_PARTY_MIN */
#define EXAMPLE_TYPE     0x8001 /* >= PERFRELAY_TYPE_THIRD_PARTY_MIN */

enum example_color {
	EXAMPLE_RED = 0,
	EXAMPLE_GREEN = 1,
	EXAMPLE_BLUE = 7,
};

struct example_point {
	__u32 x;
	__s16 y;
	__u16 _pad;
};

struct example_rec {
	struct perfrelay_hdr hdr;
	__u8 u8v;
	__s8 s8v;
	__u16 u16v;
	__s16 s16v;
	__u16 _pad;
	__u32 u32v;
	__s32 s32v;
	__u64 u64v;
	__s64 s64v;
	enum example_color color;   /* 4 bytes, published as its enumerator's name */
	char name[16];              /* NUL-terminated: published as a string */
	struct example_point point; /* published as an object */
	__u32 values[3];            /* published as an array */
	__u32 _pad2;
};

#endif
