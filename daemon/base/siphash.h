/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SipHash-2-4 of one 64-bit word (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
 * 2012): the keyed hash that places exec ids in the process table's buckets, so that nobody who
 * does not know the key (drawn at the table's creation) can choose which ids share a bucket. An
 * exec id is an unkeyed, invertible mix of what a user controls (issue 37). A hand-written copy of
 * the reference algorithm for the one input size used: libsystemd does not export its siphash24,
 * and libsodium's crypto_shorthash would be a new dependency for eight lines; unit test-proctable
 * checks it against the reference's test vector. */
#pragma once

#include <stdint.h>

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIP_ROUND(v0, v1, v2, v3)      \
	do {                           \
		v0 += v1;              \
		v1 = SIP_ROTL(v1, 13); \
		v1 ^= v0;              \
		v0 = SIP_ROTL(v0, 32); \
		v2 += v3;              \
		v3 = SIP_ROTL(v3, 16); \
		v3 ^= v2;              \
		v0 += v3;              \
		v3 = SIP_ROTL(v3, 21); \
		v3 ^= v0;              \
		v2 += v1;              \
		v1 = SIP_ROTL(v1, 17); \
		v1 ^= v2;              \
		v2 = SIP_ROTL(v2, 32); \
	} while (0)

/* SipHash-2-4 of the 8 bytes of m in little-endian order, with the key k[0] (bytes 0-7, little
 * endian) and k[1] (bytes 8-15). */
static inline uint64_t siphash24_u64(uint64_t m, const uint64_t k[2]) {
	uint64_t v0 = k[0] ^ UINT64_C(0x736f6d6570736575), v1 = k[1] ^ UINT64_C(0x646f72616e646f6d);
	uint64_t v2 = k[0] ^ UINT64_C(0x6c7967656e657261), v3 = k[1] ^ UINT64_C(0x7465646279746573);
	uint64_t b = UINT64_C(8) << 56; /* the message length in the last block, no tail bytes */

	v3 ^= m;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	v0 ^= m;
	v3 ^= b;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xff;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}
