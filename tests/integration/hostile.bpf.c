/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A hostile third-party producer for the tests: it opens perfrelay's pinned array by name and
 * writes, in turn, garbage, a truncated header, a wrong magic, a size far beyond the record, a
 * wrong version, an out-of-range producer id, a built-in type with a wrong size, the daemon's
 * reserved loss type, and one valid record of an unknown type. It counts what the kernel took. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "event.h"
#include "producer.bpf.h"

#define HOSTILE_KINDS    9
#define HOSTILE_PRODUCER 301 /* named by the malformed records, so they count per producer */
#define VALID_PRODUCER   300
#define VALID_TYPE       0x8123

/* Hostile BTF (issue 12): record declarations no decoder may be built for: nesting deeper than
 * BTFREC_MAX_DEPTH (8), an array beyond BTFREC_MAX_ARRAY (256) elements, a struct larger than
 * any perf record. The daemon refuses each (counted, logged, listed with its reason), and the
 * valid records of VALID_TYPE stay "unknown". */
struct h9 {
	__u32 v;
};
struct h8 {
	struct h9 n;
};
struct h7 {
	struct h8 n;
};
struct h6 {
	struct h7 n;
};
struct h5 {
	struct h6 n;
};
struct h4 {
	struct h5 n;
};
struct h3 {
	struct h4 n;
};
struct h2 {
	struct h3 n;
};
struct h1 {
	struct h2 n;
};
struct hostile_deep {
	struct perfrelay_hdr hdr;
	struct h1 n;
};
struct hostile_wide {
	struct perfrelay_hdr hdr;
	__u32 v[300];
};
struct hostile_big {
	struct perfrelay_hdr hdr;
	__u8 v[70000];
};
PERFRELAY_RECORD(0x8123, struct hostile_deep, "hostile_deep");
PERFRELAY_RECORD(0x8124, struct hostile_wide, "hostile_wide");
PERFRELAY_RECORD(0x8125, struct hostile_big, "hostile_big");
/* Names that would pass for the daemon's own lines or a built-in type (issue 24): a decoder
 * could be built for each, but the names are reserved. */
struct hostile_lost {
	struct perfrelay_hdr hdr;
	__u64 count;
};
struct hostile_exec {
	struct perfrelay_hdr hdr;
	__u32 pid;
	__u32 pad;
};
PERFRELAY_RECORD(0x8126, struct hostile_lost, "lost");
PERFRELAY_RECORD(0x8127, struct hostile_exec, "Exec");

const volatile __u32 target_tgid = 0;

__u64 calls = 0;
/* 16 slots, indexed with a mask the verifier can follow; the first HOSTILE_KINDS are used. */
__u64 sent[16] = {};
__u64 failed[16] = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[128]);
} hostile_scratch SEC(".maps");

static __always_inline void header(
	struct perfrelay_hdr *h, __u16 magic, __u8 version, __u16 type, __u16 size, __u32 producer, __u64 seq) {
	h->magic = magic;
	h->version = version;
	h->flags = 0;
	h->type = type;
	h->size = size;
	h->producer = producer;
	h->cpu = bpf_get_smp_processor_id();
	h->seq = seq;
	h->ts_ns = bpf_ktime_get_boot_ns();
}

SEC("tp/syscalls/sys_enter_getppid")
int hostile(void *ctx) {
	__u32 zero = 0, kind;
	__u64 n;
	__u8 *buf;
	long r;

	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	buf = bpf_map_lookup_elem(&hostile_scratch, &zero);
	if (!buf)
		return 0;
	n = __sync_fetch_and_add(&calls, 1);
	kind = n % HOSTILE_KINDS;

	for (int i = 0; i < 128; i++)
		buf[i] = 0xab; /* the payload pattern the test checks, and the garbage */

	struct perfrelay_hdr *h = (void *) buf;
	switch (kind) {
	case 0: /* garbage: no header at all */
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 64);
		break;
	case 1: /* a header cut after 16 bytes */
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION, VALID_TYPE, 48, HOSTILE_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 16);
		break;
	case 2:
		header(h, 0x1234, PERFRELAY_VERSION, VALID_TYPE, 48, HOSTILE_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 48);
		break;
	case 3: /* claims 60000 bytes, has 64 */
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION, VALID_TYPE, 60000, HOSTILE_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 64);
		break;
	case 4:
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION + 1, VALID_TYPE, 48, HOSTILE_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 48);
		break;
	case 5:
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION, VALID_TYPE, 48, 5000, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 48);
		break;
	case 6: /* an "open" record of 64 bytes: built-in types must have their exact size */
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION, PERFRELAY_TYPE_OPEN, 64, HOSTILE_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 64);
		break;
	case 7: /* a forged loss report */
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION, PERFRELAY_TYPE_LOST, 40, HOSTILE_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 40);
		break;
	default: /* valid: an unknown type, published with its payload */
		header(h, PERFRELAY_MAGIC, PERFRELAY_VERSION, VALID_TYPE, 48, VALID_PRODUCER, n);
		r = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, 48);
		break;
	}
	/* Clang knows kind < HOSTILE_KINDS and would drop the mask the verifier needs. */
	asm volatile("" : "+r"(kind));
	kind &= 15;
	if (r < 0)
		__sync_fetch_and_add(&failed[kind], 1);
	else
		__sync_fetch_and_add(&sent[kind], 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
