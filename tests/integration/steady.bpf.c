/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A well-behaved third-party producer for the exactness tests: one record per getppid() call of
 * the loader, emitted with producer.bpf.h's perfrelay_emit(), and its own count of the records
 * the kernel accepted (bpf_perf_event_output() returned 0), independent of perfrelay's maps. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "event.h"
#include "producer.bpf.h"

#define STEADY_PRODUCER 310
#define STEADY_TYPE     0x8310

const volatile __u32 target_tgid = 0;

__u64 calls = 0;    /* emits attempted */
__u64 accepted = 0; /* emits the kernel took into a ring */
/* When not 0, records are this many bytes, from `big`: tests perfrelay_emit()'s size limit. */
__u32 big_size = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[65536]);
} big SEC(".maps");

/* check[i] = call * STEADY_CHECK_MUL + i: a record torn by a write over part of it (a
 * snapshot copying a ring while a record lands in it) does not check out. */
#define STEADY_CHECK_MUL 0x9E3779B97F4A7C15ull
struct steady_rec {
	struct perfrelay_hdr hdr;
	__u64 call;
	__u64 check[4];
};

SEC("tp/syscalls/sys_enter_getppid")
int steady(void *ctx) {
	struct steady_rec r = {};
	__u32 size = big_size, zero = 0;
	__u8 *buf;

	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	if (size) {
		buf = bpf_map_lookup_elem(&big, &zero);
		if (!buf)
			return 0;
		if (size > sizeof(__u8[65536]))
			size = sizeof(__u8[65536]);
		__sync_fetch_and_add(&calls, 1);
		if (perfrelay_emit(ctx, buf, size, STEADY_TYPE, STEADY_PRODUCER) == 0)
			__sync_fetch_and_add(&accepted, 1);
		return 0;
	}
	r.call = __sync_fetch_and_add(&calls, 1);
	for (int i = 0; i < 4; i++)
		r.check[i] = r.call * STEADY_CHECK_MUL + i;
	if (perfrelay_emit(ctx, &r, sizeof(r), STEADY_TYPE, STEADY_PRODUCER) == 0)
		__sync_fetch_and_add(&accepted, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
