/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of decode.c: every record the daemon may be handed, well-formed or hostile. */

#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"


/* Keeps going after a failure so that one run shows every broken case. */
#include "unit-test.h"

#define ASSERT_DECODE(raw, size, expected)                                       \
	do {                                                                     \
		DecodedEvent _ev;                                                \
		DecodeError _e = decode_event((raw), (size), &_ev);              \
		if (_e != (expected)) {                                          \
			fprintf(stderr,                                          \
				"%s:%d: %s: decode_event() = %s, expected %s\n", \
				__FILE__,                                        \
				__LINE__,                                        \
				__func__,                                        \
				decode_error_to_string(_e),                      \
				decode_error_to_string(expected));               \
			failures++;                                              \
		}                                                                \
	} while (0)

static struct perfrelay_hdr make_hdr(uint16_t type, uint16_t size, uint32_t producer) {
	return (struct perfrelay_hdr){
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = type,
		.size = size,
		.producer = producer,
		.cpu = 3,
		.seq = 0x1122334455667788ull,
		.ts_ns = 0x0102030405060708ull,
	};
}

static struct perfrelay_exec make_exec(void) {
	struct perfrelay_exec r = { .hdr = make_hdr(PERFRELAY_TYPE_EXEC, sizeof(r), PERFRELAY_PRODUCER_EXEC) };
	static const char argv[] = "ls\0-l\0/tmp";

	r.pid = 4242;
	r.ppid = 1;
	r.uid = 1000;
	r.gid = 100;
	r.cgroup_id = 0xdeadbeefcafef00dull;
	r.argc = 3;
	r.argv_len = sizeof(argv);
	memcpy(r.argv, argv, sizeof(argv));
	strcpy(r.comm, "ls");
	strcpy(r.filename, "/usr/bin/ls");
	return r;
}

static struct perfrelay_exit make_exit(void) {
	struct perfrelay_exit r = { .hdr = make_hdr(PERFRELAY_TYPE_EXIT, sizeof(r), PERFRELAY_PRODUCER_EXIT) };

	r.pid = 777;
	r.ppid = 776;
	r.uid = 0;
	r.exit_code = 3;
	r.signal = 0;
	r.runtime_ns = 123456789;
	strcpy(r.comm, "sleep");
	return r;
}

static struct perfrelay_fork make_fork(void) {
	struct perfrelay_fork r = { .hdr = make_hdr(PERFRELAY_TYPE_FORK, sizeof(r), PERFRELAY_PRODUCER_FORK) };

	r.parent_pid = 100;
	r.child_pid = 101;
	r.child_tgid = 101;
	r.uid = 65534;
	strcpy(r.comm, "bash");
	return r;
}

static struct perfrelay_open make_open(void) {
	struct perfrelay_open r = { .hdr = make_hdr(PERFRELAY_TYPE_OPEN, sizeof(r), PERFRELAY_PRODUCER_OPEN) };

	r.pid = 555;
	r.uid = 1001;
	r.flags = 0x80000;
	r.result = -2;
	strcpy(r.comm, "cat");
	strcpy(r.path, "/etc/passwd");
	return r;
}

static struct perfrelay_connect make_connect(void) {
	struct perfrelay_connect r = {
		.hdr = make_hdr(PERFRELAY_TYPE_CONNECT, sizeof(r), PERFRELAY_PRODUCER_CONNECT)
	};

	r.pid = 999;
	r.uid = 33;
	r.result = -115;
	r.family = 2;
	r.port = 443;
	r.addr[0] = 10;
	r.addr[3] = 1;
	strcpy(r.comm, "curl");
	return r;
}

static struct perfrelay_bench make_bench(void) {
	struct perfrelay_bench r = { .hdr = make_hdr(
					     PERFRELAY_TYPE_BENCH, sizeof(r), PERFRELAY_PRODUCER_BENCH) };

	r.call = 31337;
	return r;
}

/* A heap copy of exactly n bytes: valgrind then flags any read past what the decoder was
 * given, which a stack buffer with slack would hide. */
typedef struct Copy {
	uint8_t *data;
} Copy;

static Copy copy_of(const void *p, size_t n) {
	Copy c = { .data = malloc(n > 0 ? n : 1) };

	if (!c.data)
		abort();
	memcpy(c.data, p, n);
	return c;
}

static void copy_free(Copy *c) {
	free(c->data);
	c->data = NULL;
}

/* Decodes n bytes of p from an exact-size heap copy. */
static DecodeError decode_exact(const void *p, size_t n, DecodedEvent *ev) {
	Copy c = copy_of(p, n);
	DecodeError e = decode_event(c.data, n, ev);

	copy_free(&c);
	return e;
}

static void test_valid_records(void) {
	DecodedEvent ev;

	{
		struct perfrelay_exec r = make_exec();

		ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(ev.hdr.type == PERFRELAY_TYPE_EXEC);
		ASSERT(ev.hdr.seq == 0x1122334455667788ull);
		ASSERT(ev.hdr.ts_ns == 0x0102030405060708ull);
		ASSERT(ev.hdr.cpu == 3);
		ASSERT(ev.record == (const uint8_t *) &r);
		ASSERT(ev.payload == (const uint8_t *) &r + sizeof(struct perfrelay_hdr));
		ASSERT(ev.payload_size == sizeof(r) - sizeof(struct perfrelay_hdr));
		ASSERT(ev.has_pid && ev.pid == 4242);
		ASSERT(ev.has_uid && ev.uid == 1000);
		ASSERT(ev.comm == r.comm);
		ASSERT(ev.cgroup_id == 0xdeadbeefcafef00dull);
	}
	{
		struct perfrelay_exit r = make_exit();

		ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(ev.has_pid && ev.pid == 777);
		ASSERT(ev.has_uid && ev.uid == 0);
		ASSERT(ev.comm == r.comm);
		ASSERT(ev.cgroup_id == 0);
	}
	{
		struct perfrelay_fork r = make_fork();

		ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(ev.has_pid && ev.pid == 100); /* the parent */
		ASSERT(ev.has_uid && ev.uid == 65534);
		ASSERT(ev.comm == r.comm);
		ASSERT(ev.cgroup_id == 0);
	}
	{
		struct perfrelay_open r = make_open();

		ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(ev.has_pid && ev.pid == 555);
		ASSERT(ev.has_uid && ev.uid == 1001);
		ASSERT(ev.comm == r.comm);
	}
	{
		struct perfrelay_connect r = make_connect();

		ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(ev.has_pid && ev.pid == 999);
		ASSERT(ev.has_uid && ev.uid == 33);
		ASSERT(ev.comm == r.comm);
	}
	{
		struct perfrelay_bench r = make_bench();

		ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(!ev.has_pid && !ev.has_uid);
		ASSERT(ev.comm == NULL);
		ASSERT(ev.payload_size == 8);
	}
}

/* The layout the daemon really sees: a perf record at an 8-aligned ring offset, its raw data
 * at offset 12, so every u64 of the perfrelay record is misaligned. */
static void test_through_perf_record(void) {
	struct perfrelay_exec r = make_exec();
	/* 8 (perf header) + 4 (raw size) + raw, padded by the kernel to a multiple of 8. */
	size_t raw_size = (sizeof(r) + 4 + 7) / 8 * 8 - 4, total = 8 + 4 + raw_size;
	uint64_t storage[(8 + 4 + sizeof(r) + 8) / 8 + 1] = {};
	uint8_t *rec = (uint8_t *) storage;
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .size = (uint16_t) total };
	uint32_t rs = (uint32_t) raw_size;
	PerfRecordView view;
	DecodedEvent ev;
	Copy c;

	memcpy(rec, &h, sizeof(h));
	memcpy(rec + 8, &rs, 4);
	memcpy(rec + 12, &r, sizeof(r));
	ASSERT(raw_size - sizeof(r) < 8);

	c = copy_of(rec, total);
	decode_perf_record(c.data, total, &view);
	ASSERT(view.kind == PERF_REC_SAMPLE);
	ASSERT(view.raw == c.data + 12);
	ASSERT(view.raw_size == raw_size);
	ASSERT(decode_event(view.raw, view.raw_size, &ev) == DECODE_OK);
	ASSERT(ev.known);
	ASSERT(ev.pid == 4242 && ev.uid == 1000);
	ASSERT(ev.cgroup_id == 0xdeadbeefcafef00dull);
	ASSERT(ev.hdr.seq == 0x1122334455667788ull);
	ASSERT(ev.comm && strcmp(ev.comm, "ls") == 0);
	copy_free(&c);
}

static void check_truncation(const void *rec, size_t size) {
	for (size_t n = 0; n < size; n++) {
		DecodedEvent ev;
		DecodeError e = decode_exact(rec, n, &ev);

		if (e != DECODE_TRUNCATED) {
			fprintf(stderr,
				"%s:%d: length %zu of %zu: %s\n",
				__FILE__,
				__LINE__,
				n,
				size,
				decode_error_to_string(e));
			failures++;
		}
	}
}

static void test_truncated(void) {
	struct perfrelay_exec a = make_exec();
	struct perfrelay_exit b = make_exit();
	struct perfrelay_fork c = make_fork();
	struct perfrelay_open d = make_open();
	struct perfrelay_connect e = make_connect();
	struct perfrelay_bench f = make_bench();
	DecodedEvent ev;

	check_truncation(&a, sizeof(a));
	check_truncation(&b, sizeof(b));
	check_truncation(&c, sizeof(c));
	check_truncation(&d, sizeof(d));
	check_truncation(&e, sizeof(e));
	check_truncation(&f, sizeof(f));

	/* And each complete one decodes from an exact-size copy. */
	ASSERT(decode_exact(&a, sizeof(a), &ev) == DECODE_OK);
	ASSERT(decode_exact(&b, sizeof(b), &ev) == DECODE_OK);
	ASSERT(decode_exact(&c, sizeof(c), &ev) == DECODE_OK);
	ASSERT(decode_exact(&d, sizeof(d), &ev) == DECODE_OK);
	ASSERT(decode_exact(&e, sizeof(e), &ev) == DECODE_OK);
	ASSERT(decode_exact(&f, sizeof(f), &ev) == DECODE_OK);
}

static void test_bad_header(void) {
	struct perfrelay_open r = make_open();

	r.hdr.magic = 0x5052; /* byte-swapped */
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_MAGIC);
	r.hdr.magic = 0;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_MAGIC);

	r = make_open();
	r.hdr.version = PERFRELAY_VERSION + 1;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_VERSION);
	r.hdr.version = 0;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_VERSION);

	/* Reserved flags do not make a record invalid. */
	r = make_open();
	r.hdr.flags = 0xff;
	ASSERT_DECODE(&r, sizeof(r), DECODE_OK);

	r = make_open();
	r.hdr.producer = PERFRELAY_MAX_PRODUCERS;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_PRODUCER);
	r.hdr.producer = UINT32_MAX;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_PRODUCER);
	r.hdr.producer = PERFRELAY_MAX_PRODUCERS - 1;
	ASSERT_DECODE(&r, sizeof(r), DECODE_OK);
	r.hdr.producer = 0;
	ASSERT_DECODE(&r, sizeof(r), DECODE_OK);

	/* The daemon's own loss report cannot come from a producer. */
	r = make_open();
	r.hdr.type = PERFRELAY_TYPE_LOST;
	ASSERT_DECODE(&r, sizeof(r), DECODE_RESERVED_TYPE);
	/* Nor its schema frames. */
	r.hdr.type = PERFRELAY_TYPE_SCHEMA;
	ASSERT_DECODE(&r, sizeof(r), DECODE_RESERVED_TYPE);
	/* Nor its unit frames. */
	r.hdr.type = PERFRELAY_TYPE_UNIT;
	ASSERT_DECODE(&r, sizeof(r), DECODE_RESERVED_TYPE);
	/* Nor the history's cursor frames. */
	r.hdr.type = PERFRELAY_TYPE_CURSOR;
	ASSERT_DECODE(&r, sizeof(r), DECODE_RESERVED_TYPE);
	/* Nor a unit's counters. */
	r.hdr.type = PERFRELAY_TYPE_COUNTERS;
	ASSERT_DECODE(&r, sizeof(r), DECODE_RESERVED_TYPE);

	/* hdr.size below the header itself. */
	for (unsigned s = 0; s < sizeof(struct perfrelay_hdr); s++) {
		r = make_open();
		r.hdr.size = (uint16_t) s;
		ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_SIZE);
	}

	/* hdr.size claims more than we were given. */
	r = make_open();
	r.hdr.size = sizeof(r) + 1;
	ASSERT_DECODE(&r, sizeof(r), DECODE_TRUNCATED);
}

static void test_padding(void) {
	uint8_t buf[sizeof(struct perfrelay_fork) + 16];
	struct perfrelay_fork r = make_fork();
	DecodedEvent ev;

	memset(buf, 0xaa, sizeof(buf));
	memcpy(buf, &r, sizeof(r));
	for (size_t pad = 0; pad < 8; pad++) {
		ASSERT(decode_exact(buf, sizeof(r) + pad, &ev) == DECODE_OK);
		ASSERT(ev.known);
		/* Padding is not payload. */
		ASSERT(ev.payload_size == sizeof(r) - sizeof(struct perfrelay_hdr));
	}
	for (size_t pad = 8; pad <= 16; pad++)
		ASSERT(decode_exact(buf, sizeof(r) + pad, &ev) == DECODE_BAD_SIZE);

	/* Same for an unknown type: its size is only known from the header. */
	r.hdr.type = PERFRELAY_TYPE_THIRD_PARTY_MIN;
	memcpy(buf, &r, sizeof(r));
	ASSERT(decode_exact(buf, sizeof(r) + 7, &ev) == DECODE_OK);
	ASSERT(decode_exact(buf, sizeof(r) + 8, &ev) == DECODE_BAD_SIZE);
}

static void test_known_sizes(void) {
	uint8_t buf[sizeof(struct perfrelay_exec) + 64] = {};
	struct perfrelay_bench b = make_bench();
	struct perfrelay_hdr h;
	DecodedEvent ev;

	/* A known type one byte short or long of its struct, with enough raw bytes to back the
	 * claim, is still wrong. */
	static const struct {
		uint16_t type;
		size_t size, creds, ids; /* the struct, and where its creds and process ids start */
	} types[] = {
#define TYPE(t, s) { t, sizeof(s), offsetof(s, creds), offsetof(s, ids) }
		TYPE(PERFRELAY_TYPE_EXEC, struct perfrelay_exec),
		TYPE(PERFRELAY_TYPE_EXIT, struct perfrelay_exit),
		TYPE(PERFRELAY_TYPE_FORK, struct perfrelay_fork),
		TYPE(PERFRELAY_TYPE_OPEN, struct perfrelay_open),
		TYPE(PERFRELAY_TYPE_CONNECT, struct perfrelay_connect),
#undef TYPE
	};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		memset(buf, 0, sizeof(buf));
		h = make_hdr(types[i].type, (uint16_t) (types[i].size - 1), 1);
		memcpy(buf, &h, sizeof(h));
		ASSERT(decode_exact(buf, types[i].size - 1, &ev) == DECODE_BAD_SIZE);
		h.size = (uint16_t) (types[i].size + 1);
		memcpy(buf, &h, sizeof(h));
		ASSERT(decode_exact(buf, types[i].size + 1, &ev) == DECODE_BAD_SIZE);
		h.size = (uint16_t) types[i].size;
		memcpy(buf, &h, sizeof(h));
		/* A record of schema 3 has its euid and its process ids. */
		memcpy(buf + types[i].creds, &(uint32_t){ 4321 }, 4);
		memcpy(buf + types[i].ids, &(uint64_t){ 0x1234 }, 8);
		memcpy(buf + types[i].ids + 8, &(uint64_t){ 0x5678 }, 8);
		ASSERT(decode_exact(buf, types[i].size, &ev) == DECODE_OK);
		ASSERT(ev.known && ev.has_uid && ev.has_euid && ev.euid == 4321);
		ASSERT(ev.has_exec_id && ev.exec_id == 0x1234 && ev.parent_exec_id == 0x5678);
		/* Of schema 2, it ends before its process ids: valid, with an euid and no ids. */
		h.size = (uint16_t) types[i].ids;
		memcpy(buf, &h, sizeof(h));
		ASSERT(decode_exact(buf, h.size, &ev) == DECODE_OK);
		ASSERT(ev.known && ev.has_euid && ev.euid == 4321 && !ev.has_exec_id && ev.exec_id == 0);
		/* An older probe's record ends before its creds: valid, without an euid. */
		memset(buf, 0, sizeof(buf));
		h.size = (uint16_t) types[i].creds;
		memcpy(buf, &h, sizeof(h));
		ASSERT(decode_exact(buf, h.size, &ev) == DECODE_OK);
		ASSERT(ev.known && ev.has_uid && !ev.has_euid && ev.euid == 0 && !ev.has_exec_id);
	}
	/* An exec of schema 3 with more ancestors than it has room for, or an unterminated path,
	 * is refused. */
	memset(buf, 0, sizeof(buf));
	h = make_hdr(PERFRELAY_TYPE_EXEC, sizeof(struct perfrelay_exec), 1);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + offsetof(struct perfrelay_exec, n_ancestors),
	       &(uint32_t){ PERFRELAY_ANCESTORS_MAX + 1 },
	       4);
	ASSERT(decode_exact(buf, sizeof(struct perfrelay_exec), &ev) == DECODE_BAD_STRING);
	memcpy(buf + offsetof(struct perfrelay_exec, n_ancestors), &(uint32_t){ PERFRELAY_ANCESTORS_MAX }, 4);
	ASSERT(decode_exact(buf, sizeof(struct perfrelay_exec), &ev) == DECODE_OK);
	memset(buf + offsetof(struct perfrelay_exec, cwd), 'x', PERFRELAY_PATH_LEN);
	ASSERT(decode_exact(buf, sizeof(struct perfrelay_exec), &ev) == DECODE_BAD_STRING);
	memset(buf + offsetof(struct perfrelay_exec, cwd), 0, PERFRELAY_PATH_LEN);
	memset(buf + offsetof(struct perfrelay_exec, ancestors[7].comm), 'c', PERFRELAY_COMM_LEN);
	ASSERT(decode_exact(buf, sizeof(struct perfrelay_exec), &ev) == DECODE_BAD_STRING);

	/* The exit record before the counters (V1) too. */
	memset(buf, 0, sizeof(buf));
	h = make_hdr(PERFRELAY_TYPE_EXIT, PERFRELAY_EXIT_SIZE_V1, 1);
	memcpy(buf, &h, sizeof(h));
	ASSERT(decode_exact(buf, PERFRELAY_EXIT_SIZE_V1, &ev) == DECODE_OK && !ev.has_euid);

	/* bench: anything from its struct size up; the rest is opaque. */
	memset(buf, 0x5a, sizeof(buf));
	memcpy(buf, &b, sizeof(b));
	ASSERT(decode_exact(buf, sizeof(b), &ev) == DECODE_OK);
	for (size_t extra = 1; extra < 64; extra++) {
		b.hdr.size = (uint16_t) (sizeof(b) + extra);
		memcpy(buf, &b, sizeof(b));
		ASSERT(decode_exact(buf, sizeof(b) + extra, &ev) == DECODE_OK);
		ASSERT(ev.known);
		ASSERT(ev.payload_size == sizeof(b) + extra - sizeof(struct perfrelay_hdr));
	}
	b.hdr.size = sizeof(b) - 1;
	memcpy(buf, &b, sizeof(b));
	ASSERT(decode_exact(buf, sizeof(b) - 1, &ev) == DECODE_BAD_SIZE);
}

static void test_huge_size(void) {
	uint8_t *buf = calloc(1, PERFRELAY_RECORD_MAX + 7);
	struct perfrelay_hdr h = make_hdr(PERFRELAY_TYPE_THIRD_PARTY_MIN + 5, PERFRELAY_RECORD_MAX, 300);
	DecodedEvent ev;

	if (!buf)
		abort();
	memcpy(buf, &h, sizeof(h));
	/* The largest size a u16 can say, backed by too few bytes. */
	ASSERT(decode_exact(buf, 64, &ev) == DECODE_TRUNCATED);
	ASSERT(decode_exact(buf, PERFRELAY_RECORD_MAX - 1, &ev) == DECODE_TRUNCATED);
	/* Backed in full: fine for a third-party type. */
	ASSERT(decode_exact(buf, PERFRELAY_RECORD_MAX, &ev) == DECODE_OK);
	ASSERT(!ev.known);
	ASSERT(ev.payload_size == PERFRELAY_RECORD_MAX - sizeof(struct perfrelay_hdr));
	ASSERT(decode_exact(buf, PERFRELAY_RECORD_MAX + 7, &ev) == DECODE_OK);
	/* Known types must have their own size. */
	h.type = PERFRELAY_TYPE_OPEN;
	memcpy(buf, &h, sizeof(h));
	ASSERT(decode_exact(buf, PERFRELAY_RECORD_MAX, &ev) == DECODE_BAD_SIZE);
	/* A raw size far beyond hdr.size is not padding. */
	h.type = PERFRELAY_TYPE_THIRD_PARTY_MIN;
	h.size = 40;
	memcpy(buf, &h, sizeof(h));
	ASSERT(decode_exact(buf, PERFRELAY_RECORD_MAX, &ev) == DECODE_BAD_SIZE);
	free(buf);
}

/* Fills the array with non-NUL bytes. The record is passed as bytes because the fields are
 * reached by offset. */
static void check_unterminated(const void *rec, size_t size, size_t off, size_t len) {
	uint8_t *copy = malloc(size);
	DecodedEvent ev;

	if (!copy)
		abort();
	memcpy(copy, rec, size);
	memset(copy + off, 'A', len);
	ASSERT(decode_exact(copy, size, &ev) == DECODE_BAD_STRING);
	/* Terminated by its very last byte is fine. */
	copy[off + len - 1] = 0;
	ASSERT(decode_exact(copy, size, &ev) == DECODE_OK);
	/* Bytes >= 0x80 are not NULs either. */
	memset(copy + off, 0xff, len);
	ASSERT(decode_exact(copy, size, &ev) == DECODE_BAD_STRING);
	free(copy);
}

#define CHECK_UNTERMINATED(rec, type, member) \
	check_unterminated(&(rec), sizeof(rec), offsetof(type, member), sizeof(((type *) 0)->member))

static void test_unterminated_strings(void) {
	struct perfrelay_exec a = make_exec();
	struct perfrelay_exit b = make_exit();
	struct perfrelay_fork c = make_fork();
	struct perfrelay_open d = make_open();
	struct perfrelay_connect e = make_connect();

	CHECK_UNTERMINATED(a, struct perfrelay_exec, comm);
	CHECK_UNTERMINATED(a, struct perfrelay_exec, filename);
	/* argv: its NUL rule is checked with argv_len = 0 (argv_len has its own test). */
	a.argv_len = 0;
	CHECK_UNTERMINATED(a, struct perfrelay_exec, argv);
	CHECK_UNTERMINATED(b, struct perfrelay_exit, comm);
	CHECK_UNTERMINATED(c, struct perfrelay_fork, comm);
	CHECK_UNTERMINATED(d, struct perfrelay_open, comm);
	CHECK_UNTERMINATED(d, struct perfrelay_open, path);
	CHECK_UNTERMINATED(e, struct perfrelay_connect, comm);
}

static void test_argv_len(void) {
	struct perfrelay_exec r;
	DecodedEvent ev;

	r = make_exec();
	r.argv_len = 0;
	ASSERT_DECODE(&r, sizeof(r), DECODE_OK);

	/* One past the array: the byte there is kernel padding, here a NUL, which must not pass
	 * for the end of argv. */
	{
		uint8_t buf[sizeof(r) + 1];

		r = make_exec();
		memset(r.argv, 0, sizeof(r.argv));
		r.argv_len = PERFRELAY_ARGV_LEN + 1;
		memcpy(buf, &r, sizeof(r));
		buf[sizeof(r)] = 0;
		ASSERT(decode_exact(buf, sizeof(buf), &ev) == DECODE_BAD_STRING);
	}
	r.argv_len = UINT16_MAX;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_STRING);

	/* The whole array in use, ending in its NUL. */
	r = make_exec();
	memset(r.argv, 'x', sizeof(r.argv));
	r.argv[PERFRELAY_ARGV_LEN - 1] = 0;
	r.argv_len = PERFRELAY_ARGV_LEN;
	ASSERT(decode_exact(&r, sizeof(r), &ev) == DECODE_OK);

	/* Last byte in use is not a NUL, though the array holds one. */
	r.argv[PERFRELAY_ARGV_LEN - 1] = 'x';
	r.argv[10] = 0;
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_STRING);

	r = make_exec(); /* "ls\0-l\0/tmp\0", 11 bytes */
	r.argv_len = 10; /* ends inside "/tmp" */
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_STRING);
	r.argv_len = 3; /* just "ls\0" */
	ASSERT_DECODE(&r, sizeof(r), DECODE_OK);
	r.argv_len = 1; /* "l" */
	ASSERT_DECODE(&r, sizeof(r), DECODE_BAD_STRING);
}

static void test_unknown_types(void) {
	uint8_t buf[64];
	struct perfrelay_hdr h;
	DecodedEvent ev;
	static const uint16_t types[] = { 0, 7, 15, 17, 31, 0x7ffb, PERFRELAY_TYPE_THIRD_PARTY_MIN, 0xffff };

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		h = make_hdr(types[i], 50, PERFRELAY_PRODUCER_THIRD_PARTY_MIN);
		memset(buf, 0xee, sizeof(buf)); /* no NULs anywhere: nothing is a string here */
		memcpy(buf, &h, sizeof(h));
		ASSERT(decode_exact(buf, 50, &ev) == DECODE_OK);
		ASSERT(!ev.known);
		ASSERT(ev.hdr.type == types[i]);
		ASSERT(!ev.has_pid && !ev.has_uid && ev.comm == NULL && ev.cgroup_id == 0);
		ASSERT(ev.payload_size == 50 - sizeof(h));
		ASSERT(decode_exact(buf, 56, &ev) == DECODE_OK);
		ASSERT(decode_exact(buf, 58, &ev) == DECODE_BAD_SIZE);
	}
	/* Header only. */
	h = make_hdr(0x9000, sizeof(h), 1);
	ASSERT(decode_exact(&h, sizeof(h), &ev) == DECODE_OK);
	ASSERT(ev.payload_size == 0);
}

/* Output parameters stay untouched on failure. */
static void test_ret_untouched(void) {
	struct perfrelay_open r = make_open();
	DecodedEvent ev, before;

	memset(&ev, 0x77, sizeof(ev));
	before = ev;
	r.path[sizeof(r.path) - 1] = 'x';
	memset(r.path, 'y', sizeof(r.path));
	ASSERT(decode_event(&r, sizeof(r), &ev) == DECODE_BAD_STRING);
	ASSERT(memcmp(&ev, &before, sizeof(ev)) == 0);
	ASSERT(decode_event(&r, 3, &ev) == DECODE_TRUNCATED);
	ASSERT(memcmp(&ev, &before, sizeof(ev)) == 0);
}

static void test_strings(void) {
	const char *seen[_DECODE_ERROR_MAX] = {};

	for (int e = 0; e < _DECODE_ERROR_MAX; e++) {
		seen[e] = decode_error_to_string((DecodeError) e);
		ASSERT(seen[e] != NULL);
		for (int j = 0; j < e; j++)
			ASSERT(seen[j] && seen[e] && strcmp(seen[j], seen[e]) != 0);
	}
	ASSERT(decode_error_to_string(_DECODE_ERROR_MAX) == NULL);
	ASSERT(decode_error_to_string((DecodeError) -1) == NULL);

	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_EXEC), "exec") == 0);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_EXIT), "exit") == 0);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_FORK), "fork") == 0);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_OPEN), "open") == 0);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_CONNECT), "connect") == 0);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_BENCH), "bench") == 0);
	ASSERT(event_type_to_string(0) == NULL);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_PACKET), "packet") == 0);
	ASSERT(strcmp(event_type_to_string(PERFRELAY_TYPE_COUNTERS), "counters") == 0);
	ASSERT(event_type_to_string(7) == NULL);
	ASSERT(event_type_to_string(17) == NULL);
	ASSERT(event_type_to_string(PERFRELAY_TYPE_THIRD_PARTY_MIN) == NULL);
	ASSERT(event_type_to_string(UINT16_MAX) == NULL);
}

/* ---- perf records ---- */

static PerfRecordView perf_decode_exact(const void *rec, size_t size) {
	Copy c = copy_of(rec, size);
	PerfRecordView v;

	memset(&v, 0x55, sizeof(v));
	decode_perf_record(c.data, size, &v);
	copy_free(&c);
	return v;
}

static size_t make_sample(uint8_t *buf, uint16_t size, uint32_t raw_size) {
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .size = size };

	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &raw_size, sizeof(raw_size));
	for (size_t i = 12; i < size; i++)
		buf[i] = (uint8_t) i;
	return size;
}

static void test_perf_sample(void) {
	uint8_t buf[256] = {};
	PerfRecordView v;
	Copy c;

	/* raw_size filling the record exactly, and smaller than the record. */
	make_sample(buf, 64, 52);
	c = copy_of(buf, 64);
	decode_perf_record(c.data, 64, &v);
	ASSERT(v.kind == PERF_REC_SAMPLE);
	ASSERT(v.raw == c.data + 12);
	ASSERT(v.raw_size == 52);
	copy_free(&c);

	make_sample(buf, 64, 0);
	v = perf_decode_exact(buf, 64);
	ASSERT(v.kind == PERF_REC_SAMPLE && v.raw_size == 0);

	/* Raw size one byte beyond the record, and absurdly large. */
	make_sample(buf, 64, 53);
	v = perf_decode_exact(buf, 64);
	ASSERT(v.kind == PERF_REC_MALFORMED);
	ASSERT(v.raw == NULL && v.raw_size == 0);
	make_sample(buf, 64, UINT32_MAX);
	v = perf_decode_exact(buf, 64);
	ASSERT(v.kind == PERF_REC_MALFORMED);
	make_sample(buf, 64, UINT32_MAX - 8); /* would wrap a naive 12 + raw_size check */
	v = perf_decode_exact(buf, 64);
	ASSERT(v.kind == PERF_REC_MALFORMED);

	/* Too short for the u32 size. */
	for (uint16_t s = 8; s < 12; s++) {
		make_sample(buf, s, 0);
		v = perf_decode_exact(buf, s);
		ASSERT(v.kind == PERF_REC_MALFORMED);
	}
	make_sample(buf, 12, 0);
	v = perf_decode_exact(buf, 12);
	ASSERT(v.kind == PERF_REC_SAMPLE && v.raw_size == 0);

	/* Header size disagreeing with the length we were given. */
	make_sample(buf, 64, 52);
	v = perf_decode_exact(buf, 72);
	ASSERT(v.kind == PERF_REC_MALFORMED);
	v = perf_decode_exact(buf, 56);
	ASSERT(v.kind == PERF_REC_MALFORMED);
}

static void test_perf_lost(void) {
	uint8_t buf[64] = {};
	struct perf_event_header h = { .type = PERF_RECORD_LOST, .size = 24 };
	uint64_t id = 7, lost = 0x123456789abcull;
	PerfRecordView v;

	memcpy(buf, &h, sizeof(h));
	memcpy(buf + 8, &id, 8);
	memcpy(buf + 16, &lost, 8);
	v = perf_decode_exact(buf, 24);
	ASSERT(v.kind == PERF_REC_LOST);
	ASSERT(v.lost == 0x123456789abcull);
	ASSERT(v.raw == NULL);

	/* With a trailing sample_id the count is at the same place. */
	h.size = 40;
	memcpy(buf, &h, sizeof(h));
	v = perf_decode_exact(buf, 40);
	ASSERT(v.kind == PERF_REC_LOST && v.lost == 0x123456789abcull);

	for (uint16_t s = 8; s < 24; s++) {
		h.size = s;
		memcpy(buf, &h, sizeof(h));
		v = perf_decode_exact(buf, s);
		ASSERT(v.kind == PERF_REC_MALFORMED);
		ASSERT(v.lost == 0);
	}
}

static void test_perf_other(void) {
	uint8_t buf[64] = {};
	static const uint32_t types[] = {
		PERF_RECORD_MMAP, PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE, PERF_RECORD_COMM, 0, 1000,
		UINT32_MAX
	};
	PerfRecordView v;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct perf_event_header h = { .type = types[i], .size = 48 };

		memcpy(buf, &h, sizeof(h));
		v = perf_decode_exact(buf, 48);
		ASSERT(v.kind == PERF_REC_OTHER);
		ASSERT(v.raw == NULL && v.lost == 0);
		h.size = 8;
		memcpy(buf, &h, sizeof(h));
		v = perf_decode_exact(buf, 8);
		ASSERT(v.kind == PERF_REC_OTHER);
	}

	/* Shorter than a perf header, whatever it says. */
	for (size_t s = 0; s < sizeof(struct perf_event_header); s++) {
		struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .size = (uint16_t) s };

		memcpy(buf, &h, sizeof(h));
		v = perf_decode_exact(buf, s);
		ASSERT(v.kind == PERF_REC_MALFORMED);
	}
}

/* A packet record with `appended` bytes after its fixed part (as the kernel appends them) and
 * `pad` bytes of padding. */
static size_t make_packet(uint8_t *buf, uint32_t cap_len, uint32_t orig_len, size_t appended, size_t pad) {
	struct perfrelay_packet p = {
		.hdr = make_hdr(PERFRELAY_TYPE_PACKET, sizeof(p), PERFRELAY_PRODUCER_CAPTURE),
		.cgroup_id = 77,
		.capture_id = 5,
		.ifindex = 1,
		.orig_len = orig_len,
		.cap_len = cap_len,
		.protocol = 0x0800,
		.direction = PERFRELAY_PACKET_EGRESS,
	};

	memcpy(buf, &p, sizeof(p));
	for (size_t i = 0; i < appended + pad; i++)
		buf[sizeof(p) + i] = (uint8_t) (i < appended ? 0x45 + i : 0);
	return sizeof(p) + appended + pad;
}

static void test_packets(void) {
	static uint8_t buf[sizeof(struct perfrelay_packet) + PERFRELAY_CAPTURE_BYTES_MAX + 64];
	DecodedEvent ev;
	size_t n;

	/* Valid: the bytes after the fixed part are the record's; padding is not. */
	n = make_packet(buf, 40, 60, 40, 4);
	ASSERT(decode_exact(buf, n, &ev) == DECODE_OK);
	ASSERT(ev.known && ev.record_size == sizeof(struct perfrelay_packet) + 40 && ev.cgroup_id == 77 &&
	       ev.capture_id == 5);
	n = make_packet(buf, 0, 60, 0, 0); /* nothing captured: a valid empty sample */
	ASSERT(decode_exact(buf, n, &ev) == DECODE_OK);
	ASSERT(ev.record_size == sizeof(struct perfrelay_packet));
	n = make_packet(buf, PERFRELAY_CAPTURE_BYTES_MAX, 70000, PERFRELAY_CAPTURE_BYTES_MAX, 0);
	ASSERT(decode_exact(buf, n, &ev) == DECODE_OK);

	/* cap_len says more bytes follow than the sample has. */
	n = make_packet(buf, 200, 300, 40, 0);
	ASSERT(decode_exact(buf, n, &ev) == DECODE_BAD_LENGTH);
	/* More captured than the packet had, or than any capture may take. */
	n = make_packet(buf, 40, 20, 40, 0);
	ASSERT(decode_exact(buf, n, &ev) == DECODE_BAD_LENGTH);
	n = make_packet(buf, PERFRELAY_CAPTURE_BYTES_MAX + 1, 70000, PERFRELAY_CAPTURE_BYTES_MAX + 1, 0);
	ASSERT(decode_exact(buf, n, &ev) == DECODE_BAD_LENGTH);
	/* More bytes than cap_len: not padding, a record that says less than it carries. */
	n = make_packet(buf, 8, 60, 40, 0);
	ASSERT(decode_exact(buf, n, &ev) == DECODE_BAD_SIZE);
	/* A fixed part of another size. */
	n = make_packet(buf, 8, 60, 8, 0);
	((struct perfrelay_hdr *) buf)->size = sizeof(struct perfrelay_packet) + 8;
	ASSERT(decode_exact(buf, n, &ev) == DECODE_BAD_SIZE);
	/* A direction that is neither. */
	n = make_packet(buf, 8, 60, 8, 0);
	buf[offsetof(struct perfrelay_packet, direction)] = 2;
	ASSERT(decode_exact(buf, n, &ev) == DECODE_BAD_LENGTH);
}

int main(void) {
	test_valid_records();
	test_packets();
	test_through_perf_record();
	test_truncated();
	test_bad_header();
	test_padding();
	test_known_sizes();
	test_huge_size();
	test_unterminated_strings();
	test_argv_len();
	test_unknown_types();
	test_ret_untouched();
	test_strings();
	test_perf_sample();
	test_perf_lost();
	test_perf_other();

	if (failures > 0) {
		fprintf(stderr, "test-decode: %u failure(s)\n", failures);
		return 1;
	}
	printf("test-decode: all passed\n");
	return 0;
}
