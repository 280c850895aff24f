/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Latency histograms for the benchmark: log-linear buckets (about 3% wide) over nanoseconds, one
 * per consumer thread, merged after the run; percentiles without storing samples. */
#pragma once

#include <stdint.h>

/* 32 sub-buckets per power of two: a bucket is at most 1/32 of its value wide. */
#define HISTOGRAM_SUB_BITS 5u
/* Up to 2^40 ns (18 minutes): far beyond any latency the benchmark can see. */
#define HISTOGRAM_MAX_BITS 40u
#define HISTOGRAM_BUCKETS  ((HISTOGRAM_MAX_BITS + 1u) << HISTOGRAM_SUB_BITS)

typedef struct Histogram {
	uint64_t count;
	uint64_t buckets[HISTOGRAM_BUCKETS];
} Histogram;

/* Records one value in nanoseconds; values above the range land in the last bucket. */
void histogram_add(Histogram *h, uint64_t ns);
void histogram_merge(Histogram *into, const Histogram *from);
/* The value below which a fraction q (0..1) of the samples lie, in nanoseconds (the middle of
 * its bucket), or 0 without samples. */
uint64_t histogram_quantile(const Histogram *h, double q);
