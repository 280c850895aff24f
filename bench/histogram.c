/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Log-linear latency histograms: bucket arithmetic and quantiles. */
#include "histogram.h"

static unsigned bucket_of(uint64_t v) {
	unsigned msb, shift;

	if (v < (1u << HISTOGRAM_SUB_BITS))
		return (unsigned) v; /* exact below 32 ns */
	msb = 63u - (unsigned) __builtin_clzll(v);
	if (msb > HISTOGRAM_MAX_BITS)
		return HISTOGRAM_BUCKETS - 1;
	shift = msb - HISTOGRAM_SUB_BITS;
	/* (msb - SUB_BITS + 1) groups of 32 below, then the 5 bits after the leading one. */
	return ((shift + 1u) << HISTOGRAM_SUB_BITS) +
		(unsigned) ((v >> shift) & ((1u << HISTOGRAM_SUB_BITS) - 1));
}

/* The middle of bucket b, the inverse of bucket_of(). */
static uint64_t bucket_value(unsigned b) {
	unsigned group = b >> HISTOGRAM_SUB_BITS, sub = b & ((1u << HISTOGRAM_SUB_BITS) - 1);
	unsigned shift;

	if (group == 0)
		return sub;
	shift = group - 1;
	return (((uint64_t) (1u << HISTOGRAM_SUB_BITS) + sub) << shift) + ((1ull << shift) >> 1);
}

void histogram_add(Histogram *h, uint64_t ns) {
	h->buckets[bucket_of(ns)]++;
	h->count++;
}

void histogram_merge(Histogram *into, const Histogram *from) {
	for (unsigned i = 0; i < HISTOGRAM_BUCKETS; i++)
		into->buckets[i] += from->buckets[i];
	into->count += from->count;
}

uint64_t histogram_quantile(const Histogram *h, double q) {
	uint64_t rank, seen = 0;

	if (h->count == 0)
		return 0;
	/* The smallest value with at least ceil(q * count) samples at or below it. */
	rank = (uint64_t) (q * (double) h->count + 0.999999);
	if (rank == 0)
		rank = 1;
	for (unsigned i = 0; i < HISTOGRAM_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank)
			return bucket_value(i);
	}
	return bucket_value(HISTOGRAM_BUCKETS - 1);
}
