/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* The emit helper for BPF producers, perfrelay's own and third parties': it declares the
 * pinned maps perfrelayd reads and stamps the record header.
 *
 * How a third-party producer uses it:
 *
 *   #include "vmlinux.h"              // first: this header relies on its types
 *   #include <bpf/bpf_helpers.h>
 *   #include <perfrelay/event.h>
 *   #include <perfrelay/producer.bpf.h>
 *
 *   #define MY_PRODUCER 300            // >= PERFRELAY_PRODUCER_THIRD_PARTY_MIN, < PERFRELAY_MAX_PRODUCERS
 *   #define MY_TYPE     0x8001         // >= PERFRELAY_TYPE_THIRD_PARTY_MIN
 *   struct my_rec { struct perfrelay_hdr hdr; __u64 value; };
 *
 *   SEC("tp/...") int my_prog(void *ctx)
 *   {
 *           struct my_rec r = { .value = 42 };   // or a per-CPU scratch map if it is large
 *           perfrelay_emit(ctx, &r, sizeof(r), MY_TYPE, MY_PRODUCER);
 *           return 0;
 *   }
 *
 * The loader must open the object with
 *   LIBBPF_OPTS(bpf_object_open_opts, o, .pin_root_path = "/sys/fs/bpf/perfrelay");
 * (perfrelayd's PinPath) so that libbpf reuses the daemon's pinned "events" and "counters"
 * instead of creating private copies nobody reads, and must call
 *   bpf_map__set_max_entries(events_map, libbpf_num_possible_cpus());
 * before load: a pinned map is only reused when its definition matches, and the daemon
 * creates "events" with one slot per possible CPU.
 *
 * Accounting contract (docs/design.md): every call counts one attempt for (producer, CPU) and
 * every failed output one failure, so attempts = received + failures (+ crash_lost after a
 * daemon died) holds per producer. The header's seq is the attempt number, so a gap in what
 * the daemon receives proves loss.
 *
 * Downtime: while no daemon serves the pin root, perfrelay_emit() fails at once (counted)
 * without calling bpf_perf_event_output(). A producer whose records are expensive to build
 * can call perfrelay_idle(MY_PRODUCER) first and return when it is true: the attempt and
 * the failure are counted for it, and nothing is built. */
#ifndef PERFRELAY_PRODUCER_BPF_H
#define PERFRELAY_PRODUCER_BPF_H

#include <bpf/bpf_helpers.h>
#include "event.h"

/* vmlinux.h carries BPF_F_PRESERVE_ELEMS as an enum constant, which the preprocessor cannot
 * see, and older vmlinux.h files lack it; a private macro works with both and cannot clash
 * with a later definition of the enum. The value is kernel ABI (include/uapi/linux/bpf.h). */
#define PERFRELAY_BPF_F_PRESERVE_ELEMS (1U << 11)

/* Negative errno values without <errno.h>, which BPF programs cannot include with vmlinux.h. */
#define PERFRELAY_ENOENT 2
#define PERFRELAY_EINVAL 22

/* The daemon's rings, one slot per CPU. PRESERVE_ELEMS keeps the slots filled when the fd
 * that created the map is closed, so a restarting daemon does not silently unhook everyone.
 * max_entries stays 0 here: the loader sets it to the number of possible CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(map_flags, PERFRELAY_BPF_F_PRESERVE_ELEMS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} events SEC(".maps");

/* Per (producer, CPU) attempts and failures: per-CPU so the hot path never shares a cache
 * line across CPUs, pinned so the counts survive daemon restarts. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PERFRELAY_MAX_PRODUCERS);
	__type(key, __u32);
	__type(value, struct perfrelay_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters SEC(".maps");

/* The same per (cgroup of the task, producer): who emits, who loses (event.h). Per-CPU like
 * "counters"; an emit whose key the map has no room for counts in unit_counts_full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, PERFRELAY_UNIT_COUNTS_MAX);
	__type(key, struct perfrelay_unit_key);
	__type(value, struct perfrelay_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} unit_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perfrelay_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} unit_counts_full SEC(".maps");

/* 1 while no perfrelayd serves the pin root: the daemon clears it once its rings are in the
 * array and sets it on stop, before it empties them. Inverted ("idle", not "serving") on
 * purpose: a pin root no daemon ever served (a producer loaded first, the benchmark's
 * baseline) reads 0 and emits as usual, failing only where no ring is mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} idle SEC(".maps");

/* The flight recorder (docs/recorder.md): a second perf event array whose rings are written
 * backward and never read until a snapshot, so they keep the latest records; "recorder_on"
 * (one __u32) is not 0 while the daemon has recorder rings in it, and says which records they
 * take (perfrelay_recorder_bit(); a producer built with an older header records whenever it is
 * not 0); "recorder_stats" counts its outputs per CPU. A producer built with this header
 * records for free. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(map_flags, PERFRELAY_BPF_F_PRESERVE_ELEMS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} recorder SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} recorder_on SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perfrelay_recorder_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} recorder_stats SEC(".maps");

#define PERFRELAY_ENOSPC 28

/* The largest raw payload a perf sample can carry: perf_event_header.size is a __u16 and
 * holds the 8-byte header, the 4-byte raw size and the payload padded to 8 bytes, so
 * 65528 - 8 - 4. Larger outputs would fail in the kernel, or wrap the size. */
#define PERFRELAY_EMIT_MAX 65516u

static __always_inline struct perfrelay_counters *perfrelay_counters_of(__u32 producer) {
	return bpf_map_lookup_elem(&counters, &producer);
}

/* The cgroup an emit is counted for: the current task's. A program that runs for no task (a
 * packet's, in softirq; one of a type without bpf_get_current_cgroup_id(), as tc's on older
 * kernels) defines PERFRELAY_UNIT_CGROUP() as 0 before including this header. */
#ifndef PERFRELAY_UNIT_CGROUP
#define PERFRELAY_UNIT_CGROUP() bpf_get_current_cgroup_id()
#endif

/* The current task's cgroup's counts for `producer`: its unit_counts entry, made on its first
 * emit, or unit_counts_full's when the map has no room. NULL only if both lookups fail. */
static __always_inline struct perfrelay_counters *perfrelay_unit_counters(__u32 producer) {
	struct perfrelay_unit_key key = { .cgroup_id = PERFRELAY_UNIT_CGROUP(), .producer = producer };
	struct perfrelay_counters *u = bpf_map_lookup_elem(&unit_counts, &key), zero = {};
	__u32 k = 0;

	if (u)
		return u;
	/* Another CPU may make it in between (EEXIST): the lookup after finds it either way. */
	bpf_map_update_elem(&unit_counts, &key, &zero, BPF_NOEXIST);
	u = bpf_map_lookup_elem(&unit_counts, &key);
	return u ? u : bpf_map_lookup_elem(&unit_counts_full, &k);
}

/* An attempt that fails without an output: the failure is counted before the attempt. A
 * daemon settling its accounts reads the pair while such emitters run (the pair is read with
 * plain loads, attempts first); in this order what it can catch between the two increments
 * says one record fewer was accepted, never one more, and a record that never was cannot be
 * taken for one lost with a dead daemon's rings (docs/pipeline.md, "Settling against emitters
 * that keep running"). */
static __always_inline void perfrelay_count_failed(struct perfrelay_counters *c) {
	__sync_fetch_and_add(&c->failures, 1);
	__sync_fetch_and_add(&c->attempts, 1);
}

/* The same for the producer (c, of `producer`) and its emitter's cgroup (unit_counts). */
static __always_inline void perfrelay_count_failed_for(struct perfrelay_counters *c, __u32 producer) {
	struct perfrelay_counters *u = perfrelay_unit_counters(producer);

	perfrelay_count_failed(c);
	if (u)
		perfrelay_count_failed(u);
}

static __always_inline int perfrelay_is_idle(void) {
	__u32 zero = 0, *v = bpf_map_lookup_elem(&idle, &zero);

	return v && *v;
}

/* True (and the attempt and its failure counted) while no daemon serves: the caller returns
 * without building its record. False while a daemon serves, or for an unknown producer id
 * (perfrelay_emit() reports that one). */
static __always_inline int perfrelay_idle(__u32 producer) {
	struct perfrelay_counters *c;

	if (!perfrelay_is_idle())
		return 0;
	c = perfrelay_counters_of(producer);
	if (!c)
		return 0;
	perfrelay_count_failed_for(c, producer);
	return 1;
}

/* recorder_on's bit for records of `type`: the built-in probes' types (RecorderTypes=) have
 * one each, every other type shares PERFRELAY_RECORDER_OTHERS (event.h). */
static __always_inline __u32 perfrelay_recorder_bit(__u16 type) {
	return type >= PERFRELAY_TYPE_EXEC && type <= PERFRELAY_TYPE_CONNECT ? 1u << type :
									       PERFRELAY_RECORDER_OTHERS;
}

/* The flight recorder's copy of a record: not part of the live stream's accounting (its
 * outcome is counted in recorder_stats only). */
static __always_inline void perfrelay_record(void *ctx, void *rec, __u32 size) {
	__u32 zero = 0, *on = bpf_map_lookup_elem(&recorder_on, &zero);
	struct perfrelay_recorder_stats *st;
	long r;

	if (!on || !(*on & perfrelay_recorder_bit(((struct perfrelay_hdr *) rec)->type)))
		return;
	r = bpf_perf_event_output(ctx, &recorder, BPF_F_CURRENT_CPU, rec, size);
	st = bpf_map_lookup_elem(&recorder_stats, &zero);
	if (!st)
		return;
	if (r == 0)
		__sync_fetch_and_add(&st->written, 1);
	else if (r == -PERFRELAY_ENOSPC)
		__sync_fetch_and_add(&st->paused, 1);
	else
		__sync_fetch_and_add(&st->failed, 1);
}

/* Stamps the header of rec (size bytes, header included) and writes it to the current CPU's
 * ring. Returns 0 or a negative errno: -ENOENT for a producer id outside "counters", -EINVAL
 * for a size that cannot hold a header or exceeds a perf sample (PERFRELAY_EMIT_MAX), -ENOENT
 * while no daemon serves (see idle), otherwise the result of bpf_perf_event_output()
 * (-ENOENT when no ring is mapped, -ENOSPC when the ring is full). */
static __always_inline int perfrelay__emit_to(
	void *ctx, void *ring, void *rec, __u32 size, __u16 type, __u32 producer, __u64 ctx_len);

static __always_inline int perfrelay_emit(void *ctx, void *rec, __u32 size, __u16 type, __u32 producer) {
	return perfrelay__emit_to(ctx, &events, rec, size, type, producer, 0);
}

/* perfrelay_emit() that also has the kernel append ctx_len bytes of the program's context
 * after the record (BPF_F_CTXLEN_MASK; skb programs: the packet's first bytes). hdr.size stays
 * the record's own size: the record must say how many bytes follow it (docs/capture.md). Such
 * records do not go to the flight recorder (it would get them without their bytes). */
static __always_inline int
	perfrelay_emit_ctx(void *ctx, void *rec, __u32 size, __u16 type, __u32 producer, __u64 ctx_len) {
	return perfrelay__emit_to(ctx, &events, rec, size, type, producer, ctx_len);
}

/* The emit itself, into `ring`: "events", or for perfrelay's own exec, fork and exit probes
 * their protected lane ("critical", declared in probes.bpf.c, not here: a third party's
 * object need not size it). A producer writes all its records into one array, so that their
 * seq numbers stay in order within one ring of each CPU. */
static __always_inline int perfrelay__emit_to(
	void *ctx, void *ring, void *rec, __u32 size, __u16 type, __u32 producer, __u64 ctx_len) {
	struct perfrelay_hdr *hdr = rec;
	struct perfrelay_counters *c, *u;
	__u64 seq;
	long r;

	c = perfrelay_counters_of(producer);
	if (!c)
		return -PERFRELAY_ENOENT;

	/* A bad size is the producer's bug, but it still counts as an attempt that failed so
	 * the attempts = received + failures invariant holds and the seq gap is explained. */
	if (size < sizeof(struct perfrelay_hdr) || size > PERFRELAY_EMIT_MAX) {
		perfrelay_count_failed_for(c, producer);
		return -PERFRELAY_EINVAL;
	}
	/* The output could only fail: skip it (and the daemon's grace period need not wait for
	 * a write into a ring it is about to empty). */
	if (perfrelay_is_idle()) {
		perfrelay_count_failed_for(c, producer);
		return -PERFRELAY_ENOENT;
	}

	/* Atomic although the slot is per-CPU: a tracepoint program can be preempted on a
	 * PREEMPT kernel and another emitter can run on the same CPU in between; a plain
	 * read-modify-write would then hand out the same seq twice or lose a count. */
#ifdef PERFRELAY_NO_FETCH_ATOMICS
	/* For kernels before 5.12, which refuse a fetching atomic (BPF_FETCH): the add stays
	 * atomic (BPF_XADD), so the counts stay exact; the seq is read back after it, so an
	 * emitter that ran on this CPU in between would give both records the same seq. */
	__sync_fetch_and_add(&c->attempts, 1);
	seq = *(volatile __u64 *) &c->attempts - 1;
#else
	seq = __sync_fetch_and_add(&c->attempts, 1);
#endif

	hdr->magic = PERFRELAY_MAGIC;
	hdr->version = PERFRELAY_VERSION;
	hdr->flags = 0;
	hdr->type = type;
	hdr->size = (__u16) size;
	hdr->producer = producer;
	hdr->cpu = bpf_get_smp_processor_id();
	hdr->seq = seq;
	hdr->ts_ns = bpf_ktime_get_boot_ns();

	r = bpf_perf_event_output(ctx, ring, BPF_F_CURRENT_CPU | (ctx_len << 32), rec, size);
	if (r < 0)
		__sync_fetch_and_add(&c->failures, 1);
	/* Who: after the output, which it would only delay. */
	u = perfrelay_unit_counters(producer);
	if (u) {
		__sync_fetch_and_add(&u->attempts, 1);
		if (r < 0)
			__sync_fetch_and_add(&u->failures, 1);
	}
	if (ctx_len == 0)
		perfrelay_record(ctx, rec, size);
	return (int) r;
}

#endif

/* ---- Record declarations: how perfrelayd learns a third-party record's fields (issue 12) ---- */
#ifndef PERFRELAY_PRODUCER_RECORD_H
#define PERFRELAY_PRODUCER_RECORD_H

/* Declares a record struct to perfrelayd, which then publishes its records with named fields
 * (decoded from this program's BTF) instead of as "unknown" base64 payloads:
 *
 *   struct my_rec { struct perfrelay_hdr hdr; __u32 pid; char comm[16]; };
 *   PERFRELAY_RECORD(0x8001, struct my_rec, "my_name");
 *
 * type is the record type passed to perfrelay_emit() (an integer literal, or a macro expanding
 * to one, >= PERFRELAY_TYPE_THIRD_PARTY_MIN); name is the event's "type" in JSON (a C
 * identifier). It expands to a pointer-sized read-only global carrying two BTF declaration
 * tags (clang >= 14). The global matters: clang only emits BTF for types that globals and
 * functions use, so a struct that lives on the stack would otherwise not be in the program's
 * BTF at all. The tags travel with the BTF into the kernel, where the daemon reads them;
 * nothing happens at run time (see docs/producers.md). */
#define PERFRELAY__STR(x)     #x
#define PERFRELAY__XSTR(x)    PERFRELAY__STR(x)
#define PERFRELAY__CAT2(a, b) a##b
#define PERFRELAY__CAT(a, b)  PERFRELAY__CAT2(a, b)
#define PERFRELAY_RECORD(type, rec, name)                                                \
	rec *const volatile PERFRELAY__CAT(perfrelay__record_, __LINE__) __attribute__(( \
		used,                                                                    \
		btf_decl_tag("perfrelay.type=" PERFRELAY__XSTR(type)),                   \
		btf_decl_tag("perfrelay.name=" name))) = 0

/* Names the producer id this object emits with, for ListProducers(), perfrelayctl producers and
 * the events' "producer_name" (a C identifier; without it, the kernel's name of the program
 * that declared the record type is used):
 *
 *   PERFRELAY_PRODUCER(300, "my_tool");
 *
 * Like PERFRELAY_RECORD, a read-only global carrying BTF declaration tags, nothing at run time. */
#define PERFRELAY_PRODUCER(id, name)                                                      \
	const volatile int PERFRELAY__CAT(perfrelay__producer_, __LINE__) __attribute__(( \
		used,                                                                     \
		btf_decl_tag("perfrelay.producer=" PERFRELAY__XSTR(id)),                  \
		btf_decl_tag("perfrelay.producer_name=" name))) = 0

#endif
