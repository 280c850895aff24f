/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A built decoder's layout, shared by btfrec.c (which builds and iterates it) and the encoder's
 * JSON for BTF-described records (encode-btf.c), which reads integer steps directly. */
#pragma once

#include <string.h>

#include "decode/btfrec.h"

#define NO_NAME UINT32_MAX

/* One step of the flat description: the walk over the BTF happens once, at build time, so
 * decoding is a loop over this array with no BTF, no recursion and no allocation. */
typedef struct Step {
	uint8_t kind; /* BtfRecKind; char arrays are STRING steps, decoded as STRING or BYTES */
	uint8_t is_signed;
	uint16_t depth;
	uint32_t offset;
	uint32_t size;
	uint32_t name;     /* offset into names, or NO_NAME */
	uint32_t name_len; /* so the encoder copies keys without strlen() */
	uint32_t enum_first;
	uint32_t enum_count;
} Step;

typedef struct EnumVal {
	uint64_t value; /* sign-extended for signed enums */
	uint32_t name;
} EnumVal;

struct BtfRec {
	uint16_t type;
	uint32_t size;
	char name[BTFREC_MAX_NAME + 1];
	Step *steps;
	unsigned n_steps;
	EnumVal *enums;
	unsigned n_enums;
	char *names; /* NUL-separated names, referenced by offset */
	size_t names_len, names_cap;
	size_t json_max;
};

static inline uint64_t read_uint(const uint8_t *p, uint32_t size) {
	switch (size) {
	case 1:
		return p[0];
	case 2: {
		uint16_t v;
		memcpy(&v, p, 2);
		return v;
	}
	case 4: {
		uint32_t v;
		memcpy(&v, p, 4);
		return v;
	}
	default: {
		uint64_t v;
		memcpy(&v, p, 8);
		return v;
	}
	}
}

static inline int64_t sign_extend(uint64_t v, uint32_t size) {
	unsigned shift = 64 - size * 8;

	return (int64_t) (v << shift) >> shift;
}
