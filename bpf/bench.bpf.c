/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The benchmark producer: K records of a configurable size per getpgid() call from one
 * process, so readers can be measured against a known, controllable load. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "event.h"
#include "producer.bpf.h"

/* Largest record the benchmark builds: the scratch buffer's size, and a bound the verifier
 * can check the output size against. Power of two so sizes can be masked. */
#define BENCH_RECORD_MAX  1024u
/* Upper bound of records_per_call, so the loop is bounded for the verifier. */
#define BENCH_RECORDS_MAX 256u

/* Set before load. target_tgid 0 matches nothing, so a bench object loaded without
 * configuration stays silent instead of flooding the rings with every process's calls. */
const volatile __u32 target_tgid = 0;
const volatile __u32 records_per_call = 1;                          /* K, 1..BENCH_RECORDS_MAX */
const volatile __u32 payload_size = sizeof(struct perfrelay_bench); /* 40..1024, multiple of 8 */

struct bench_buf {
	union {
		struct perfrelay_bench rec;
		__u8 bytes[BENCH_RECORD_MAX];
	};
};

/* Per-CPU record buffer. Map values start zeroed and only the first 40 bytes are ever
 * written, so the padding up to payload_size stays zero without a memset per call. rec.call
 * doubles as the per-CPU call counter, since the buffer outlives the call. Not pinned: it is
 * private to one bench object. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_buf);
} bench_scratch SEC(".maps");

SEC("tp/syscalls/sys_enter_getpgid")
int handle_getpgid(void *ctx) {
	struct bench_buf *b;
	__u32 zero = 0, size, n, i;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;

	b = bpf_map_lookup_elem(&bench_scratch, &zero);
	if (!b)
		return 0;

	/* Clamp what user space configured to what the buffer holds and the ABI allows; the
	 * mask keeps sizes 8-byte aligned like the rest of the record ABI. */
	size = payload_size;
	if (size < sizeof(struct perfrelay_bench))
		size = sizeof(struct perfrelay_bench);
	if (size > BENCH_RECORD_MAX)
		size = BENCH_RECORD_MAX;
	size &= (2 * BENCH_RECORD_MAX - 1) & ~7u;

	n = records_per_call;
	if (n > BENCH_RECORDS_MAX)
		n = BENCH_RECORDS_MAX;

	b->rec.call++;
	for (i = 0; i < BENCH_RECORDS_MAX; i++) {
		if (i >= n)
			break;
		perfrelay_emit(ctx, b, size, PERFRELAY_TYPE_BENCH, PERFRELAY_PRODUCER_BENCH);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
