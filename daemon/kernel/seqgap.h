/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sequence-gap detector for one (producer, CPU): which attempt numbers (hdr.seq) no record
 * carried. Pure, so the unit tests drive it with reordered and duplicated sequences.
 *
 * Records of one CPU carry the producer's attempt numbers, but nested emitters (two programs
 * of one producer on one CPU, one preempting the other between taking its seq and writing)
 * may write them out of order, so no "expected next seq" is tracked:
 *   gaps = gaps0 + (seqs in [base, next)) - (records read with such a seq) - late
 * which a late record corrects. base and gaps0 are where the previous daemon left off (the
 * pinned ledger), so the seqs of the downtime between two daemons count too; a record with a
 * seq below base was counted as a gap by an earlier daemon and reduces the count (late). */
#pragma once

#include <stdint.h>

typedef struct SeqGap {
	uint64_t base;    /* the first seq this daemon expects (the ledger's seq_next at start) */
	uint64_t next;    /* highest seq read + 1, >= base */
	uint64_t in_span; /* records read with seq >= base */
	uint64_t late;    /* records read with seq < base */
	uint64_t gaps0;   /* gaps counted before base (the ledger's seq_gaps at start) */
} SeqGap;

static inline void seqgap_init(SeqGap *s, uint64_t seq_next, uint64_t gaps) {
	*s = (SeqGap){ .base = seq_next, .next = seq_next, .gaps0 = gaps };
}

static inline void seqgap_record(SeqGap *s, uint64_t seq) {
	if (seq < s->base) {
		s->late++;
		return;
	}
	s->in_span++;
	if (seq >= s->next)
		s->next = seq < UINT64_MAX ? seq + 1 : seq;
}

/* Seqs below seqgap_next() that no record carried. Duplicated seqs (only a producer that forges
 * headers makes them) could make the difference negative: that reads as 0. */
static inline uint64_t seqgap_gaps(const SeqGap *s) {
	uint64_t span = s->gaps0 + (s->next - s->base), seen = s->in_span + s->late;

	return span > seen ? span - seen : 0;
}

static inline uint64_t seqgap_next(const SeqGap *s) {
	return s->next;
}
