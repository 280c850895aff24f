/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of proctable.c: entries in and out, what exec, fork and exit events tell the table,
 * eviction in a full bucket (exited first, then the oldest) with exact counts, lineage walks
 * with their misses, the "ancestor" filter over them, and writers and lock-free readers on
 * threads (build-tsan runs this under ThreadSanitizer). */

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "event.h"
#include "hub/filter.h"
#include "macro.h"
#include "hub/proctable.h"
#include "base/siphash.h"

#include "unit-test.h"

static ProcEntry entry(uint64_t id, uint64_t parent, uint32_t pid, const char *comm) {
	ProcEntry e = { .exec_id = id, .parent_exec_id = parent, .pid = pid, .uid = 1000, .cgroup_id = 7 };

	snprintf(e.comm, sizeof(e.comm), "%s", comm);
	return e;
}

static void test_put_get(void) {
	_cleanup_(proc_table_freep) ProcTable *t = NULL;
	ProcEntry e = entry(0x1234, 0x99, 42, "bash"), got;
	ProcTableStats st;

	ASSERT(proc_table_new(100, &t) == 0);
	proc_table_get_stats(t, &st);
	ASSERT(st.capacity == 128 && st.entries == 0); /* rounded up to a power of two */
	ASSERT(!proc_table_get(t, 0x1234, &got));
	proc_table_put(t, &e, false);
	ASSERT(proc_table_get(t, 0x1234, &got));
	ASSERT(got.exec_id == 0x1234 && got.parent_exec_id == 0x99 && got.pid == 42 && got.uid == 1000 &&
	       got.cgroup_id == 7 && streq(got.comm, "bash") && !got.exited);
	/* only_new leaves what is there; a full put replaces it. */
	e = entry(0x1234, 0x98, 43, "zsh");
	proc_table_put(t, &e, true);
	ASSERT(proc_table_get(t, 0x1234, &got) && got.pid == 42 && streq(got.comm, "bash"));
	proc_table_put(t, &e, false);
	ASSERT(proc_table_get(t, 0x1234, &got) && got.pid == 43 && streq(got.comm, "zsh"));
	/* A 15-byte comm stays whole; exec id 0 is no entry. */
	e = entry(0x55, 0, 1, "123456789012345");
	proc_table_put(t, &e, false);
	ASSERT(proc_table_get(t, 0x55, &got) && streq(got.comm, "123456789012345"));
	e = entry(0, 0, 1, "zero");
	proc_table_put(t, &e, false);
	ASSERT(!proc_table_get(t, 0, &got));

	proc_table_exit(t, 0x1234);
	ASSERT(proc_table_get(t, 0x1234, &got) && got.exited);
	/* An exit read before its fork (another CPU's ring): a tombstone the fork does not revive. */
	proc_table_exit(t, 0x4321);
	ASSERT(proc_table_get(t, 0x4321, &got) && got.exited && got.pid == 0);
	e = entry(0x4321, 0x1234, 77, "late");
	proc_table_put(t, &e, true);
	ASSERT(proc_table_get(t, 0x4321, &got) && got.exited && got.pid == 0);
	/* An exit read before its exec: the exec fills the tombstone in and leaves it exited (it
	 * once came back live, for good: no exit follows). The same for an exited entry. */
	proc_table_put(t, &e, false);
	ASSERT(proc_table_get(t, 0x4321, &got) && got.exited && got.pid == 77 && streq(got.comm, "late"));
	e = entry(0x1234, 0x98, 43, "zsh");
	proc_table_put(t, &e, false);
	ASSERT(proc_table_get(t, 0x1234, &got) && got.exited);
	{
		ProcEntry list[8];
		size_t n = proc_table_list(t, list, ELEMENTSOF(list));

		ASSERT(n == 1 && list[0].exec_id == 0x55); /* the live ones only */
	}
	proc_table_get_stats(t, &st);
	ASSERT(st.entries == 3 && st.live == 1 && st.inserted == 2 && st.exited == 2 && st.evicted == 0);
}

/* n exec ids from `from` on that share the bucket of the first (found through the keyed hash, as
 * no one outside the daemon can). */
static void same_bucket(const ProcTable *t, uint64_t from, uint64_t *ids, unsigned n) {
	size_t b = proc_table_bucket_index(t, from);
	unsigned k = 0;

	for (uint64_t id = from; k < n; id++)
		if (proc_table_bucket_index(t, id) == b)
			ids[k++] = id;
}

static void test_eviction(void) {
	_cleanup_(proc_table_freep) ProcTable *t = NULL;
	ProcTableStats st;
	ProcEntry got;
	uint64_t id[7];

	/* 64 entries: 16 buckets of 4. */
	ASSERT(proc_table_new(64, &t) == 0);
	same_bucket(t, 17, id, 7);
	for (unsigned k = 1; k <= 4; k++) {
		ProcEntry e = entry(id[k], 0, k, "p");

		proc_table_put(t, &e, false);
	}
	proc_table_exit(t, id[3]);
	{
		/* Full: the exited one goes first, though it is not the oldest. */
		ProcEntry e = entry(id[5], 0, 5, "p");

		proc_table_put(t, &e, false);
	}
	ASSERT(!proc_table_get(t, id[3], &got));
	ASSERT(proc_table_get(t, id[1], &got) && proc_table_get(t, id[5], &got));
	{
		/* Full and all live: the oldest. */
		ProcEntry e = entry(id[6], 0, 6, "p");

		proc_table_put(t, &e, false);
	}
	ASSERT(!proc_table_get(t, id[1], &got));
	ASSERT(proc_table_get(t, id[2], &got) && proc_table_get(t, id[6], &got));
	proc_table_get_stats(t, &st);
	ASSERT(st.inserted == 6 && st.evicted == 2 && st.evicted_live == 1 && st.entries == 4 && st.live == 4);
	/* Other buckets were not touched. */
	for (uint64_t other = id[0] + 1;; other++)
		if (proc_table_bucket_index(t, other) != proc_table_bucket_index(t, id[0])) {
			ASSERT(!proc_table_get(t, other, &got));
			break;
		}
}

/* A live parent outlives live leaves in its bucket (issue 37): whoever fills the bucket of a
 * user's shell with processes of their own pushes out those, not the shell whose descendants'
 * lineage runs through it. */
static void test_parents_kept_over_leaves(void) {
	_cleanup_(proc_table_freep) ProcTable *t = NULL;
	ProcTableStats st;
	ProcEntry got;
	uint64_t id[8], child = 0;

	ASSERT(proc_table_new(64, &t) == 0);
	same_bucket(t, 1000, id, 8);
	/* The shell first (the oldest), then three leaves; the shell's child lives elsewhere. */
	{
		ProcEntry shell = entry(id[0], 0, 1, "bash");

		proc_table_put(t, &shell, false);
	}
	for (child = id[0] + 1; proc_table_bucket_index(t, child) == proc_table_bucket_index(t, id[0]); child++)
		;
	{
		ProcEntry c = entry(child, id[0], 2, "make");

		proc_table_put(t, &c, false);
	}
	for (unsigned k = 1; k <= 3; k++) {
		ProcEntry e = entry(id[k], 0, 10 + k, "leaf");

		proc_table_put(t, &e, false);
	}
	/* Four more into the full bucket: each takes the oldest leaf, never the shell. */
	for (unsigned k = 4; k < 8; k++) {
		ProcEntry e = entry(id[k], 0, 10 + k, "leaf");

		proc_table_put(t, &e, false);
		ASSERT(proc_table_get(t, id[0], &got) && !got.exited && strcmp(got.comm, "bash") == 0);
		ASSERT(!proc_table_get(t, id[k - 3], &got));
	}
	proc_table_get_stats(t, &st);
	ASSERT(st.evicted == 4 && st.evicted_live == 4);
	/* Exited, the shell goes first, parent or not. */
	proc_table_exit(t, id[0]);
	{
		ProcEntry e = entry(id[1], 0, 99, "leaf");

		proc_table_put(t, &e, false);
	}
	ASSERT(!proc_table_get(t, id[0], &got));
	ASSERT(proc_table_get(t, id[5], &got));
}

/* The buckets are placed by a keyed hash (issue 37): ids a user can aim at one bucket by their own
 * bits (the low bits, as before) spread over the table, differently in each table; and the hash is
 * SipHash-2-4, checked against the reference implementation's vector for the message 00..07 with
 * the key 00..0f. */
static void test_keyed_buckets(void) {
	_cleanup_(proc_table_freep) ProcTable *a = NULL, *b = NULL;
	const uint64_t key[2] = { UINT64_C(0x0706050403020100), UINT64_C(0x0f0e0d0c0b0a0908) };
	unsigned in_first = 0, same_in_both = 0;

	ASSERT(siphash24_u64(UINT64_C(0x0706050403020100), key) == UINT64_C(0x93f5f5799a932462));
	ASSERT(proc_table_new(PROC_TABLE_DEFAULT, &a) == 0 && proc_table_new(PROC_TABLE_DEFAULT, &b) == 0);
	for (uint64_t k = 0; k < 64; k++) {
		uint64_t id = k * 8192 + 5; /* one bucket of 8192 by the id's own bits */

		in_first += proc_table_bucket_index(a, id) == proc_table_bucket_index(a, 5);
		same_in_both += proc_table_bucket_index(a, id) == proc_table_bucket_index(b, id);
	}
	ASSERT(in_first < 4);     /* 1 (itself), almost surely: 63 ids in 8192 buckets */
	ASSERT(same_in_both < 4); /* each table draws its own key */
}

/* A decoded exec record of `pid` whose ancestors are anc[0..n). */
typedef struct ExecRec {
	_Alignas(8) struct perfrelay_exec r;
	DecodedEvent ev;
} ExecRec;

static void make_exec(
	ExecRec *x, uint64_t id, uint64_t prev, uint32_t pid, const struct perfrelay_ancestor *anc, uint32_t n) {
	memset(x, 0, sizeof(*x));
	x->r.hdr = (struct perfrelay_hdr){ .magic = PERFRELAY_MAGIC,
					   .version = PERFRELAY_VERSION,
					   .type = PERFRELAY_TYPE_EXEC,
					   .size = sizeof(struct perfrelay_exec),
					   .producer = PERFRELAY_PRODUCER_EXEC };
	x->r.pid = pid;
	x->r.uid = 1000;
	x->r.cgroup_id = 77;
	strcpy(x->r.comm, "child");
	x->r.ids.exec_id = id;
	x->r.ids.parent_exec_id = n > 0 ? anc[0].exec_id : 0;
	x->r.prev_exec_id = prev;
	x->r.n_ancestors = n;
	memcpy(x->r.ancestors, anc, n * sizeof(*anc));
	ASSERT(decode_event(&x->r, sizeof(x->r), &x->ev) == DECODE_OK);
}

static void test_note_and_lineage(void) {
	_cleanup_(proc_table_freep) ProcTable *t = NULL;
	struct perfrelay_ancestor anc[3] = {
		{ .exec_id = 0xa1, .pid = 100, .comm = "sh" },
		{ .exec_id = 0xa2, .pid = 50, .comm = "sshd" },
		{ .exec_id = 0xa3, .pid = 1, .comm = "systemd" },
	};
	ExecRec x;
	ProcEntry got, forked = entry(0xf0, 0xa1, 200, "sh");
	ProcTableStats st;
	Lineage l;

	ASSERT(proc_table_new(1024, &t) == 0);
	proc_table_put(t, &forked, false); /* the fork's copy the exec replaces */
	make_exec(&x, 0xb0, 0xf0, 200, anc, 3);
	proc_table_note(t, &x.ev);
	ASSERT(proc_table_get(t, 0xb0, &got) && got.pid == 200 && got.parent_exec_id == 0xa1 &&
	       got.cgroup_id == 77 && got.uid == 1000 && streq(got.comm, "child"));
	ASSERT(proc_table_get(t, 0xf0, &got) && got.exited); /* replaced by the exec */
	/* The ancestors, each linked to the next; the last one's parent is not in the record. */
	ASSERT(proc_table_get(t, 0xa1, &got) && got.parent_exec_id == 0xa2 && got.pid == 100 &&
	       got.uid == PROC_UID_UNKNOWN && streq(got.comm, "sh"));
	ASSERT(proc_table_get(t, 0xa3, &got) && got.parent_exec_id == 0 && streq(got.comm, "systemd"));

	/* An exec's lineage is its record's, complete when the kernel's chain ended. */
	lineage_init(&l, t, &x.ev, NULL, NULL);
	lineage_walk(&l);
	ASSERT(l.complete && l.n == 3 && l.a[0].exec_id == 0xa1 && l.a[2].exec_id == 0xa3);

	/* An open of the new image walks the table: parent 0xb0 -> 0xa1 -> 0xa2 -> 0xa3 -> root. */
	{
		DecodedEvent open = { .hdr = { .type = PERFRELAY_TYPE_OPEN },
				      .known = true,
				      .has_exec_id = true,
				      .exec_id = 0xc0,
				      .parent_exec_id = 0xb0 };
		DecodedEvent orphan = open, none = open;

		lineage_init(&l, t, &open, NULL, NULL);
		lineage_walk(&l);
		lineage_walk(&l); /* once */
		ASSERT(l.complete && l.n == 4 && l.a[0].exec_id == 0xb0 && l.a[3].exec_id == 0xa3);

		/* A parent the table does not hold: a miss, counted once per walk. */
		orphan.parent_exec_id = 0xdead;
		lineage_init(&l, t, &orphan, NULL, NULL);
		lineage_walk(&l);
		ASSERT(!l.complete && l.n == 0);
		proc_table_get_stats(t, &st);
		ASSERT(st.misses == 1);

		/* A tombstone is no process: a miss too. */
		proc_table_exit(t, 0xdeae);
		orphan.parent_exec_id = 0xdeae;
		lineage_init(&l, t, &orphan, NULL, NULL);
		lineage_walk(&l);
		ASSERT(!l.complete && l.n == 0);
		proc_table_get_stats(t, &st);
		ASSERT(st.misses == 2);

		/* No process identity (a schema 2 record): no ancestors, no miss. */
		none.has_exec_id = false;
		lineage_init(&l, t, &none, NULL, NULL);
		lineage_walk(&l);
		ASSERT(l.n == 0);
		proc_table_get_stats(t, &st);
		ASSERT(st.misses == 2);
	}

	/* A fork of a process: the child's entry with its parent's cgroup; a thread's: none. */
	{
		_Alignas(8) struct perfrelay_fork f = {
			.hdr = { .magic = PERFRELAY_MAGIC,
				 .version = PERFRELAY_VERSION,
				 .type = PERFRELAY_TYPE_FORK,
				 .size = sizeof(struct perfrelay_fork),
				 .producer = PERFRELAY_PRODUCER_FORK },
			.parent_pid = 200,
			.child_pid = 201,
			.child_tgid = 201,
			.uid = 1000,
			.comm = "child",
			.ids = { .exec_id = 0xd0, .parent_exec_id = 0xb0 },
		};
		DecodedEvent ev;

		ASSERT(decode_event(&f, sizeof(f), &ev) == DECODE_OK);
		proc_table_note(t, &ev);
		ASSERT(proc_table_get(t, 0xd0, &got) && got.pid == 201 && got.parent_exec_id == 0xb0 &&
		       got.cgroup_id == 77);
		f.child_pid = 202; /* a thread of 201 */
		f.ids.exec_id = 0xd1;
		ASSERT(decode_event(&f, sizeof(f), &ev) == DECODE_OK);
		proc_table_note(t, &ev);
		ASSERT(!proc_table_get(t, 0xd1, &got));
	}
}

static const char *unit_of(void *userdata, uint64_t cgroup_id) {
	(*(unsigned *) userdata)++;
	return cgroup_id == 77 ? "sshd.service" : NULL;
}

static Subscription *sub(const char *json) {
	RequestLimits lim = { .max_bytes = 65536, .max_depth = 8 };
	Subscription *s = NULL;
	RequestError e;

	ASSERT(request_parse(json, strlen(json), &lim, &s, &e) == 0);
	if (s)
		s->access = SUBSCRIPTION_ACCESS_ALL;
	return s;
}

static void test_ancestor_filter(void) {
	_cleanup_(proc_table_freep) ProcTable *t = NULL;
	ProcEntry sshd = entry(0xa2, 0xa3, 50, "sshd"), sh = entry(0xa1, 0xa2, 100, "sh"),
		  init = entry(0xa3, 0, 1, "systemd");
	DecodedEvent open = { .hdr = { .type = PERFRELAY_TYPE_OPEN },
			      .known = true,
			      .has_exec_id = true,
			      .exec_id = 0xc0,
			      .parent_exec_id = 0xa1 };
	Subscription *by_comm = sub("{\"subscribe\":{\"ancestor\":{\"comm\":[\"sshd\"]}}}"),
		     *by_id = sub("{\"subscribe\":{\"ancestor\":{\"exec_id\":[\"00000000000000a1\"]}}}"),
		     *by_unit = sub("{\"subscribe\":{\"ancestor\":{\"unit\":[\"sshd.service\"]}}}"),
		     *other = sub(
			     "{\"subscribe\":{\"ancestor\":{\"comm\":[\"cron\"],\"exec_id\":[\"00000000000000c0\"]}}}"),
		     *plain = sub("{}");
	unsigned resolved = 0;
	Lineage l;

	ASSERT(proc_table_new(1024, &t) == 0);
	sshd.cgroup_id = 77;
	sh.cgroup_id = 77;
	init.cgroup_id = 1;
	proc_table_put(t, &sshd, false);
	proc_table_put(t, &sh, false);
	proc_table_put(t, &init, false);

	lineage_init(&l, t, &open, unit_of, &resolved);
	ASSERT(filter_match(by_comm, &open, NULL, &l));
	ASSERT(l.walked && l.complete && l.n == 3);
	ASSERT(filter_match(by_id, &open, NULL, &l));
	ASSERT(filter_match(by_unit, &open, NULL, &l));
	ASSERT(resolved == 1); /* sh and sshd share their cgroup: resolved once */
	/* The process itself is not its own ancestor. */
	ASSERT(!filter_match(other, &open, NULL, &l));
	ASSERT(filter_match(plain, &open, NULL, &l));
	/* Without a lineage, an ancestor filter matches nothing; others do not need one. */
	ASSERT(!filter_match(by_comm, &open, NULL, NULL));
	ASSERT(filter_match(plain, &open, NULL, NULL));
	/* A walk that misses matches nothing above the miss; a filter that fails closed
	 * ("incomplete") takes the event for its gap, and the table counts it. */
	open.parent_exec_id = 0xbeef;
	lineage_init(&l, t, &open, unit_of, &resolved);
	ASSERT(!filter_match(by_comm, &open, NULL, &l));
	{
		Subscription *closed = sub(
			"{\"subscribe\":{\"ancestor\":{\"comm\":[\"cron\"],\"incomplete\":true}}}");
		ProcTableStats st;

		ASSERT(filter_match(closed, &open, NULL, &l) && l.incomplete_matched);
		open.parent_exec_id = 0xa1; /* complete again: the gap was the only reason */
		lineage_init(&l, t, &open, unit_of, &resolved);
		ASSERT(!filter_match(closed, &open, NULL, &l));
		proc_table_get_stats(t, &st);
		ASSERT(st.incomplete == 1 && st.misses == 1);
		subscription_free(closed);
	}
	{
		/* sshd pushed out, then learnt again from an exec record: no cgroup. A "unit"
		 * filter cannot tell, and fails closed when asked to. */
		Subscription *closed = sub(
			"{\"subscribe\":{\"ancestor\":{\"unit\":[\"sshd.service\"],\"incomplete\":true}}}");
		ProcEntry relearnt = sshd, moved = sh;
		ProcTableStats st;

		moved.cgroup_id = 88; /* the session's scope: not the unit's */
		proc_table_put(t, &moved, false);
		lineage_init(&l, t, &open, unit_of, &resolved);
		ASSERT(filter_match(by_unit, &open, NULL, &l) && filter_match(closed, &open, NULL, &l));
		relearnt.cgroup_id = 0;
		proc_table_put(t, &relearnt, false);
		lineage_init(&l, t, &open, unit_of, &resolved);
		ASSERT(!filter_match(by_unit, &open, NULL, &l));
		ASSERT(filter_match(closed, &open, NULL, &l));
		proc_table_get_stats(t, &st);
		ASSERT(st.incomplete == 2);
		subscription_free(closed);
	}
	subscription_free(by_comm);
	subscription_free(by_id);
	subscription_free(by_unit);
	subscription_free(other);
	subscription_free(plain);
}

/* Writers and lock-free readers: every entry a reader sees is whole (its fields derive from
 * its id), however the writers interleave. */
#define N_WRITERS 2
#define N_READERS 2
#define N_IDS     512u
#define ROUNDS    200

static ProcTable *shared;

static ProcEntry derived(uint64_t id, unsigned round) {
	ProcEntry e = entry(id, id * 3, (uint32_t) id + round, "");

	snprintf(e.comm, sizeof(e.comm), "r%u-%" PRIu64, round % 1000, id % 1000);
	e.cgroup_id = id ^ round;
	return e;
}

static void *writer_main(void *arg) {
	unsigned w = (unsigned) (uintptr_t) arg;

	for (unsigned round = 0; round < ROUNDS; round++)
		for (uint64_t id = 1 + w; id <= N_IDS; id += N_WRITERS) {
			ProcEntry e = derived(id, round);

			proc_table_put(shared, &e, false);
			if (round % 7 == 0)
				proc_table_exit(shared, id);
		}
	return NULL;
}

static void *reader_main(void *arg) {
	uintptr_t bad = 0;

	for (unsigned round = 0; round < ROUNDS * 4; round++)
		for (uint64_t id = 1; id <= N_IDS; id++) {
			ProcEntry got;

			if (!proc_table_get(shared, id, &got))
				continue;
			/* The round it was written in, from its pid: every other field must agree. */
			{
				unsigned r = got.pid - (uint32_t) id;
				ProcEntry want = derived(id, r);

				if (r >= ROUNDS || got.parent_exec_id != want.parent_exec_id ||
				    got.cgroup_id != want.cgroup_id || strcmp(got.comm, want.comm) != 0)
					bad++;
			}
		}
	return (void *) bad;
}

static void test_threads(void) {
	pthread_t w[N_WRITERS], r[N_READERS];
	uintptr_t bad = 0;

	/* Large enough that nothing is evicted (the ids land in random buckets; at 16 buckets an
	 * id, five in one bucket has a chance below 1e-4 in the whole table): a reader may then
	 * check every entry it sees. */
	ASSERT(proc_table_new(64 * N_IDS, &shared) == 0);
	for (unsigned i = 0; i < N_WRITERS; i++)
		ASSERT(pthread_create(&w[i], NULL, writer_main, (void *) (uintptr_t) i) == 0);
	for (unsigned i = 0; i < N_READERS; i++)
		ASSERT(pthread_create(&r[i], NULL, reader_main, NULL) == 0);
	for (unsigned i = 0; i < N_WRITERS; i++)
		pthread_join(w[i], NULL);
	for (unsigned i = 0; i < N_READERS; i++) {
		void *ret;

		pthread_join(r[i], &ret);
		bad += (uintptr_t) ret;
	}
	ASSERT(bad == 0);
	{
		ProcTableStats st;

		proc_table_get_stats(shared, &st);
		ASSERT(st.entries == N_IDS && st.evicted == 0 && st.inserted == N_IDS);
	}
	shared = proc_table_free(shared);
}

int main(void) {
	test_put_get();
	test_eviction();
	test_keyed_buckets();
	test_parents_kept_over_leaves();
	test_note_and_lineage();
	test_ancestor_filter();
	test_threads();

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return EXIT_FAILURE;
	}
	printf("test-proctable: all passed\n");
	return EXIT_SUCCESS;
}
