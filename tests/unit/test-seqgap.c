/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sequence-gap detector: gaps are the attempt numbers no record carried, records of nested
 * emitters that arrive out of order are not loss, and a daemon continues where the previous
 * one left off. */
#include "kernel/seqgap.h"
#include "unit-test.h"

static void feed(SeqGap *s, const uint64_t *seqs, size_t n) {
	for (size_t i = 0; i < n; i++)
		seqgap_record(s, seqs[i]);
}

static void test_in_order(void) {
	SeqGap s;
	const uint64_t seqs[] = { 0, 1, 2, 3, 4 };

	seqgap_init(&s, 0, 0);
	ASSERT(seqgap_gaps(&s) == 0);
	feed(&s, seqs, 5);
	ASSERT(seqgap_gaps(&s) == 0);
	ASSERT(seqgap_next(&s) == 5);
}

static void test_gaps(void) {
	SeqGap s;
	/* 2, 3 and 7 failed; 9 and later are not known yet. */
	const uint64_t seqs[] = { 0, 1, 4, 5, 6, 8 };

	seqgap_init(&s, 0, 0);
	feed(&s, seqs, 6);
	ASSERT(seqgap_gaps(&s) == 3);
	ASSERT(seqgap_next(&s) == 9);
}

static void test_first_record_late(void) {
	SeqGap s;

	/* A fresh ledger and a producer that failed its first 10 attempts. */
	seqgap_init(&s, 0, 0);
	seqgap_record(&s, 10);
	ASSERT(seqgap_gaps(&s) == 10);
}

static void test_nesting(void) {
	SeqGap s;
	/* Two programs of one producer on one CPU: 3 took its seq, was preempted by 4 and 5, and
	 * wrote last. Between the records the gap is open; the late record closes it. */
	const uint64_t before[] = { 0, 1, 2, 4, 5 };

	seqgap_init(&s, 0, 0);
	feed(&s, before, 5);
	ASSERT(seqgap_gaps(&s) == 1);
	seqgap_record(&s, 3);
	ASSERT(seqgap_gaps(&s) == 0);
	ASSERT(seqgap_next(&s) == 6);
}

static void test_continues_previous_daemon(void) {
	SeqGap s;
	const uint64_t seqs[] = { 120, 121, 123 };

	/* The previous daemon read up to seq 99 and had counted 4 gaps; 100..119 failed while no
	 * daemon served, 122 failed under this one. */
	seqgap_init(&s, 100, 4);
	ASSERT(seqgap_gaps(&s) == 4);
	feed(&s, seqs, 3);
	ASSERT(seqgap_gaps(&s) == 4 + 20 + 1);
	ASSERT(seqgap_next(&s) == 124);

	/* A record older than the previous daemon's last one (its emitter was preempted across
	 * the whole restart) was one of the gaps counted then. */
	seqgap_record(&s, 98);
	ASSERT(seqgap_gaps(&s) == 4 + 20);
}

static void test_forged(void) {
	SeqGap s;
	const uint64_t dup[] = { 5, 5, 5, 5 };

	/* Duplicates and the largest seq: never a wrapped count. */
	seqgap_init(&s, 0, 0);
	feed(&s, dup, 4);
	ASSERT(seqgap_gaps(&s) == 5 - 3);
	seqgap_init(&s, 0, 0);
	feed(&s, (const uint64_t[]){ 0, 1, 1, 1 }, 4);
	ASSERT(seqgap_gaps(&s) == 0);
	seqgap_record(&s, UINT64_MAX);
	ASSERT(seqgap_next(&s) == UINT64_MAX);
}

int main(void) {
	test_in_order();
	test_gaps();
	test_first_record_late();
	test_nesting();
	test_continues_previous_daemon();
	test_forged();
	return failures ? 1 : 0;
}
