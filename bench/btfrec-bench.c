/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Micro-benchmark of issue 12's cost bound: a reader's work for a BTF-described record against
 * the built-in record of the same layout (struct perfrelay_exit, 80 bytes): decode_event() and
 * the JSON line, encode_json() for the built-in one, encode_json_btf() for the third-party copy
 * of it (the daemon's path: the reader attaches the decoder, the hub encodes once). Prints one
 * JSON line with ns per record of each and their ratio. Not a test: timings depend on the
 * machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/btf.h>

#include "decode/btfrec.h"
#include "decode/decode.h"
#include "hub/encode.h"
#include "event.h"

#define ROUNDS  1000000u
#define REPEATS 5u

static char out[ENCODE_JSON_MAX];

static double now_ns(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The BTF a producer's clang would emit for a copy of struct perfrelay_exit. */
static struct btf *exit_btf(int *ret_id) {
	struct btf *btf = btf__new_empty();
	int u32 = btf__add_int(btf, "unsigned int", 4, 0);
	int s32 = btf__add_int(btf, "int", 4, BTF_INT_SIGNED);
	int u64 = btf__add_int(btf, "unsigned long long", 8, 0);
	int chr = btf__add_int(btf, "char", 1, BTF_INT_SIGNED);
	int comm = btf__add_array(btf, u32, chr, 16);
	int hdr = btf__add_struct(btf, "perfrelay_hdr", 32);

	btf__add_field(btf, "seq", u64, 128, 0);
	*ret_id = btf__add_struct(btf, "perfrelay_exit", sizeof(struct perfrelay_exit));
	btf__add_field(btf, "hdr", hdr, 0, 0);
	btf__add_field(btf, "pid", u32, 32 * 8, 0);
	btf__add_field(btf, "ppid", u32, 36 * 8, 0);
	btf__add_field(btf, "uid", u32, 40 * 8, 0);
	btf__add_field(btf, "exit_code", s32, 44 * 8, 0);
	btf__add_field(btf, "signal", u32, 48 * 8, 0);
	btf__add_field(btf, "runtime_ns", u64, 56 * 8, 0);
	btf__add_field(btf, "comm", comm, 64 * 8, 0);
	return btf;
}

int main(void) {
	struct perfrelay_exit rec = {
		.hdr = { .magic = PERFRELAY_MAGIC,
			 .version = PERFRELAY_VERSION,
			 .type = PERFRELAY_TYPE_EXIT,
			 .size = sizeof(rec),
			 .producer = PERFRELAY_PRODUCER_EXIT,
			 .cpu = 1,
			 .seq = 123456,
			 .ts_ns = 987654321012345ull },
		.pid = 4242,
		.ppid = 1,
		.uid = 1000,
		.exit_code = 3,
		.signal = 0,
		.runtime_ns = 123456789,
		.comm = "bash",
	};
	struct perfrelay_exit third = rec;
	DecodedEvent builtin, ev;
	BtfRecError err;
	BtfRec *r = NULL;
	double t0, t1, t2, best_builtin = 0, best_btf = 0;
	size_t sink = 0;
	int id;
	struct btf *btf = exit_btf(&id);

	third.hdr.type = 0x8001;
	third.hdr.producer = 300;
	if (btfrec_build(btf, id, 0x8001, "exit_btf", &r, &err) < 0) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}

	/* Best of REPEATS: the machine is shared, and the minimum is the least disturbed run. */
	for (unsigned k = 0; k < REPEATS; k++) {
		t0 = now_ns();
		for (unsigned i = 0; i < ROUNDS; i++) {
			sink += decode_event(&rec, sizeof(rec), &builtin);
			sink += (size_t) encode_json(&builtin, NULL, out, sizeof(out));
		}
		t1 = now_ns();
		for (unsigned i = 0; i < ROUNDS; i++) {
			sink += decode_event(&third, sizeof(third), &ev);
			if (ev.hdr.size >= btfrec_size(r)) {
				ev.btf = r;
				ev.producer_name = "bench_producer";
			}
			sink += (size_t) encode_json_btf(
				&ev, ev.btf, ev.producer_name, NULL, NULL, out, sizeof(out));
		}
		t2 = now_ns();
		best_builtin = k == 0 || t1 - t0 < best_builtin ? t1 - t0 : best_builtin;
		best_btf = k == 0 || t2 - t1 < best_btf ? t2 - t1 : best_btf;
	}

	printf("{\"record_bytes\":%zu,\"builtin_ns\":%.1f,\"btf_ns\":%.1f,\"ratio\":%.2f,\"sink\":%zu}\n",
	       sizeof(rec),
	       best_builtin / ROUNDS,
	       best_btf / ROUNDS,
	       best_btf / best_builtin,
	       sink);
	btfrec_free(r);
	btf__free(btf);
	return 0;
}
