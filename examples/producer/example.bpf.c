/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* An example third-party producer: on each getppid() of the loader's process it publishes one
 * struct example_rec through perfrelay, its fields derived from a running count so a test can
 * predict every value. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <perfrelay/event.h>
#include <perfrelay/producer.bpf.h>

#include "example.h"

/* Tells perfrelayd how to decode EXAMPLE_TYPE records: as struct example_rec, named "example". */
PERFRELAY_RECORD(EXAMPLE_TYPE, struct example_rec, "example");
/* And names its producer id. */
PERFRELAY_PRODUCER(EXAMPLE_PRODUCER, "example_producer");

const volatile __u32 target_tgid = 0;

/* Records per run, readable by the loader; only this program's CPU-pinned loader runs it. */
__u64 count = 0;

SEC("tp/syscalls/sys_enter_getppid")
int example_emit(void *ctx) {
	struct example_rec r = {};
	__u64 n;

	if ((__u32) (bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	n = __sync_fetch_and_add(&count, 1);
	r.u8v = 200 + (n & 15);
	r.s8v = -100 - (__s8) (n & 15);
	r.u16v = 60000 + n;
	r.s16v = -30000 + (__s16) n;
	r.u32v = 4000000000u + (__u32) n;
	r.s32v = -2000000000 + (__s32) n;
	r.u64v = 18000000000000000000ull + n;
	r.s64v = -9000000000000000000ll + (__s64) n;
	r.color = (n & 1) ? EXAMPLE_BLUE : EXAMPLE_GREEN;
	__builtin_memcpy(r.name, "example", 8);
	r.point.x = n * 2;
	r.point.y = -(__s16) n;
	r.values[0] = n;
	r.values[1] = n + 1;
	r.values[2] = n + 2;
	perfrelay_emit(ctx, &r, sizeof(r), EXAMPLE_TYPE, EXAMPLE_PRODUCER);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
