/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* One packet capture (docs/capture.md): cgroup_skb programs attached to a unit's cgroup that
 * emit a packet record per packet of its sockets, the packet's first bytes appended by the
 * kernel (BPF_F_CTXLEN_MASK), into the daemon's pinned "events" array; or tc programs on one
 * interface for an interface's capture. The daemon loads one
 * instance of this object per capture, with its id, byte count and rate in .rodata. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "event.h"
/* Packets are seen in whichever task or softirq carries them, and tc programs of older kernels
 * cannot ask for the current cgroup: their emits count under cgroup 0 in unit_counts (the
 * record itself names the socket's cgroup). */
#define PERFRELAY_UNIT_CGROUP() 0
#include "producer.bpf.h"

const volatile __u32 capture_id = 0;
const volatile __u32 capture_bytes = 128;    /* at most PERFRELAY_CAPTURE_BYTES_MAX */
const volatile __u32 packets_per_second = 0; /* 0: no limit */

/* Per CPU: what this capture did. seen = captured + rate_dropped + failed. Added to
 * atomically: an ingress program (softirq) may interrupt an egress one on the same CPU. */
struct capture_stats {
	__u64 seen;
	__u64 captured;     /* records the ring took */
	__u64 rate_dropped; /* over packets_per_second */
	__u64 failed;       /* bpf_perf_event_output() failed: ring full, no ring, daemon idle */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_stats);
} capture_stats SEC(".maps");

/* The rate limit: packets taken in the current one-second window, over all CPUs. */
struct capture_rate {
	struct bpf_spin_lock lock;
	__u32 _pad;
	__u64 window_start_ns;
	__u64 taken;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_rate);
} capture_rate SEC(".maps");

static __always_inline int rate_allows(void) {
	__u32 zero = 0;
	struct capture_rate *r;
	__u64 now;
	int ok;

	if (packets_per_second == 0)
		return 1;
	r = bpf_map_lookup_elem(&capture_rate, &zero);
	if (!r)
		return 0;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&r->lock);
	if (now - r->window_start_ns >= 1000000000ULL) {
		r->window_start_ns = now;
		r->taken = 0;
	}
	ok = r->taken < packets_per_second;
	if (ok)
		r->taken++;
	bpf_spin_unlock(&r->lock);
	return ok;
}

static __always_inline int capture(struct __sk_buff *skb, __u8 direction, __u8 link) {
	struct perfrelay_packet rec = {};
	struct capture_stats *st;
	__u32 zero = 0, len = skb->len;
	__u64 cap = len < capture_bytes ? len : capture_bytes;

	st = bpf_map_lookup_elem(&capture_stats, &zero);
	if (!st)
		return 1;
	__sync_fetch_and_add(&st->seen, 1);
	if (!rate_allows()) {
		__sync_fetch_and_add(&st->rate_dropped, 1);
		return 1;
	}
	rec.cgroup_id = bpf_skb_cgroup_id(skb);
	rec.capture_id = capture_id;
	rec.ifindex = skb->ifindex;
	rec.orig_len = len;
	rec.cap_len = (__u32) cap;
	rec.protocol = bpf_ntohs((__u16) skb->protocol);
	rec.direction = direction;
	rec.link = link;
	if (perfrelay_emit_ctx(
		    skb, &rec, sizeof(rec), PERFRELAY_TYPE_PACKET, PERFRELAY_PRODUCER_CAPTURE, cap) == 0)
		__sync_fetch_and_add(&st->captured, 1);
	else
		__sync_fetch_and_add(&st->failed, 1);
	return 1; /* observe, never drop */
}

SEC("cgroup_skb/ingress")
int capture_ingress(struct __sk_buff *skb) {
	return capture(skb, PERFRELAY_PACKET_INGRESS, PERFRELAY_PACKET_LINK_RAW);
}

SEC("cgroup_skb/egress")
int capture_egress(struct __sk_buff *skb) {
	return capture(skb, PERFRELAY_PACKET_EGRESS, PERFRELAY_PACKET_LINK_RAW);
}

/* An interface's capture: tc (clsact) programs, which see every packet of the interface from
 * its Ethernet header on, whatever unit it belongs to. TC_ACT_UNSPEC: the next filter decides,
 * as if we were not there. */
#define PERFRELAY_TC_ACT_UNSPEC (-1)

SEC("tc")
int capture_tc_ingress(struct __sk_buff *skb) {
	capture(skb, PERFRELAY_PACKET_INGRESS, PERFRELAY_PACKET_LINK_ETHER);
	return PERFRELAY_TC_ACT_UNSPEC;
}

SEC("tc")
int capture_tc_egress(struct __sk_buff *skb) {
	capture(skb, PERFRELAY_PACKET_EGRESS, PERFRELAY_PACKET_LINK_ETHER);
	return PERFRELAY_TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
