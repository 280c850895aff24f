/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* The record ABI between BPF producers and perfrelayd: every record written into the pinned
 * perf event array starts with struct perfrelay_hdr, followed by a fixed-size payload.
 *
 * Rules (checked by the _Static_asserts below and by the decoder at run time):
 * - only fixed-width integers and bounded char arrays, explicit padding, no bool, no enum;
 * - every string is NUL-terminated within its array (the decoder rejects it otherwise);
 * - hdr.size is the size of the whole record (header + payload) as the producer wrote it;
 *   the kernel may append up to 7 bytes of padding to the raw sample, never more.
 * This header is included by BPF programs (with vmlinux.h) and by user space (with
 * <linux/types.h>), so it uses the kernel's __u8/__u16/__u32/__u64 types only. */
#ifndef PERFRELAY_EVENT_H
#define PERFRELAY_EVENT_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define PERFRELAY_MAGIC   0x5250u /* "PR" little-endian: cheap first check against garbage */
#define PERFRELAY_VERSION 1u      /* bumped on any incompatible change of this file */

/* Producer ids index the pinned per-CPU "counters" array, so they are bounded. */
#define PERFRELAY_MAX_PRODUCERS            1024u
#define PERFRELAY_PRODUCER_EXEC            1u
#define PERFRELAY_PRODUCER_EXIT            2u
#define PERFRELAY_PRODUCER_FORK            3u
#define PERFRELAY_PRODUCER_OPEN            4u
#define PERFRELAY_PRODUCER_CONNECT         5u
#define PERFRELAY_PRODUCER_CAPTURE         6u /* packet captures (docs/capture.md) */
#define PERFRELAY_PRODUCER_BENCH           16u
#define PERFRELAY_PRODUCER_COUNTERS        17u  /* perfrelayd itself: "counters" events */
#define PERFRELAY_PRODUCER_THIRD_PARTY_MIN 256u /* ids below are reserved for perfrelay */

/* Record types. Third-party producers use ids >= PERFRELAY_TYPE_THIRD_PARTY_MIN. */
#define PERFRELAY_TYPE_EXEC            1u
#define PERFRELAY_TYPE_EXIT            2u
#define PERFRELAY_TYPE_FORK            3u
#define PERFRELAY_TYPE_OPEN            4u
#define PERFRELAY_TYPE_CONNECT         5u
/* A packet sample (docs/capture.md): the fixed part, then the packet's first bytes appended by
 * the kernel. Only to subscribers that ask for it by type. */
#define PERFRELAY_TYPE_PACKET          6u
#define PERFRELAY_TYPE_BENCH           16u
/* Made only by perfrelayd (docs/counters.md): one per systemd unit (cgroup) and interval, with
 * the perf counters its tasks used. Below 64 so subscriptions select it by bit like the others;
 * the decoder rejects it from producers. */
#define PERFRELAY_TYPE_COUNTERS        32u
/* Reserved: made only by perfrelayd, in binary streams to clients, to report how many of the
 * client's events were dropped (the payload is a __u64 count). The decoder rejects it from
 * producers. */
#define PERFRELAY_TYPE_LOST            0x7fffu
/* Reserved: made only by perfrelayd, in binary streams to clients, before the first record of a
 * third-party type decoded from its producer's BTF (and again when that changes): the payload
 * is a JSON object describing the record's fields (docs/protocol.md, "Schema frames"), which
 * libperfrelay reads for perfrelay_record_field(). The decoder rejects it from producers. */
#define PERFRELAY_TYPE_SCHEMA          0x7ffeu
/* Reserved: made only by perfrelayd, in binary streams to clients that ask for units
 * ("units": true), right before each record that carries a cgroup id whose systemd unit the
 * daemon knows: struct perfrelay_unit. It applies to the record that follows it, and only to
 * that one (docs/protocol.md, "Unit frames"). perfrelay-export's batches carry it the same way.
 * The decoder rejects it from producers. */
#define PERFRELAY_TYPE_UNIT            0x7ffdu
/* Reserved: made only by perfrelayd, in binary streams served from the history with
 * "cursors": true, right before each event record: hdr (producer, cpu, seq and ts_ns of the
 * record that follows) and the event's cursor, a NUL-terminated string of at most
 * PERFRELAY_CURSOR_MAX bytes with its NUL (docs/history.md, "Cursors"). It applies to the
 * record that follows it, and only to that one. The decoder rejects it from producers. */
#define PERFRELAY_TYPE_CURSOR          0x7ffcu
#define PERFRELAY_CURSOR_MAX           96u
#define PERFRELAY_TYPE_THIRD_PARTY_MIN 0x8000u

/* perf_event_header.size is a __u16, so no record can be larger than this. */
#define PERFRELAY_RECORD_MAX 65535u

#define PERFRELAY_COMM_LEN      16  /* TASK_COMM_LEN */
#define PERFRELAY_PATH_LEN      256 /* bounded copy of a path; longer paths are truncated */
#define PERFRELAY_ARGV_LEN      512 /* argv strings back to back, each NUL-terminated */
#define PERFRELAY_ADDR_LEN      16  /* room for an IPv6 address; IPv4 uses the first 4 bytes */
#define PERFRELAY_ANCESTORS_MAX 8   /* an exec's nearest ancestors (docs/events.md, "Process identity") */

/* Perf counters (docs/counters.md). Each id indexes the counter values below and names one
 * pinned per-CPU counter array, <PinPath>/perf-counters/<name>. */
#define PERFRELAY_COUNTER_TASK_CLOCK       0u /* "task-clock", ns on the CPU */
#define PERFRELAY_COUNTER_CONTEXT_SWITCHES 1u /* "context-switches" */
#define PERFRELAY_COUNTER_PAGE_FAULTS      2u /* "page-faults" */
#define PERFRELAY_COUNTER_CPU_MIGRATIONS   3u /* "cpu-migrations" */
#define PERFRELAY_COUNTER_CYCLES           4u /* "cycles" (hardware PMU) */
#define PERFRELAY_COUNTER_INSTRUCTIONS     5u /* "instructions" (hardware PMU) */
#define PERFRELAY_COUNTER_CACHE_MISSES     6u /* "cache-misses" (hardware PMU) */
#define PERFRELAY_COUNTER_BRANCH_MISSES    7u /* "branch-misses" (hardware PMU) */
#define PERFRELAY_COUNTERS_MAX             8u

/* Common header, 32 bytes, naturally aligned fields. */
struct perfrelay_hdr {
	__u16 magic;    /* PERFRELAY_MAGIC */
	__u8 version;   /* PERFRELAY_VERSION */
	__u8 flags;     /* producers write 0; the daemon sets PERFRELAY_HDR_* in a client's copy */
	__u16 type;     /* PERFRELAY_TYPE_* */
	__u16 size;     /* whole record in bytes, <= PERFRELAY_RECORD_MAX like the perf header */
	__u32 producer; /* producer id, < PERFRELAY_MAX_PRODUCERS, indexes "counters" */
	__u32 cpu;      /* bpf_get_smp_processor_id() at emit time */
	__u64 seq;      /* per (producer, CPU) attempt number: gaps prove loss */
	__u64 ts_ns;    /* bpf_ktime_get_boot_ns(): comparable with CLOCK_BOOTTIME */
};

/* perfrelay_hdr.flags of the copy a client gets (never in the rings): the event matched the
 * client's "ancestor" filter only because the daemon cannot walk its lineage to its end, and the
 * filter asked for such events ("incomplete": true; docs/protocol.md). Decoders ignore flags
 * they do not know. */
#define PERFRELAY_HDR_LINEAGE_INCOMPLETE 0x1u

/* Value of the pinned per-CPU "counters" array, indexed by producer id. Every emit
 * increments attempts; a failed bpf_perf_event_output() also increments failures. */
struct perfrelay_counters {
	__u64 attempts;
	__u64 failures;
};

/* Who floods (docs/pipeline.md, "Attribution"): the pinned per-CPU hash "unit_counts" holds a
 * struct perfrelay_counters per (cgroup, producer) of the task an emit ran for, up to
 * PERFRELAY_UNIT_COUNTS_MAX keys; an emit whose key found no room counts in the per-CPU
 * "unit_counts_full" instead (one struct perfrelay_counters), so that the sums over both are the
 * producers' attempts and failures. Fixed size: a third party's object declares the same map
 * (producer.bpf.h) and a pinned map is only shared when the definitions match. */
#define PERFRELAY_UNIT_COUNTS_MAX 8192u
struct perfrelay_unit_key {
	__u64 cgroup_id; /* bpf_get_current_cgroup_id() */
	__u32 producer;
	__u32 _pad; /* 0 */
};

/* The pinned "recorder_on" (one __u32): 0, or which records the flight recorder takes: bit t
 * for the built-in probes' types t (PERFRELAY_TYPE_EXEC..CONNECT, RecorderTypes=), this bit for
 * every other type. */
#define PERFRELAY_RECORDER_OTHERS (1u << 31)

/* Value of the pinned per-CPU "recorder_stats" array (one entry): the flight recorder's
 * outputs (docs/recorder.md), apart from the live stream's accounting. */
struct perfrelay_recorder_stats {
	__u64 written; /* records the recorder ring took (each overwrites the oldest when full) */
	__u64 paused;  /* outputs refused while a snapshot paused the ring (-ENOSPC) */
	__u64 failed;  /* other refusals (no recorder ring on that CPU) */
};

/* Value of the pinned "received" array (BPF_F_MMAPABLE, PERFRELAY_MAX_PRODUCERS entries per
 * possible CPU, index producer * n_possible_cpus + cpu). perfrelayd's reader threads update
 * it in place once per batch (one writer per CPU ring) and it outlives the daemon, so that
 * the next daemon can count what a dead one's rings took with them:
 *   attempts = received + malformed + failures + crash_lost   per (producer, CPU). */
struct perfrelay_received {
	__u64 received;   /* valid records read from this CPU's rings, over every daemon */
	__u64 malformed;  /* records naming this producer that the decoder rejected */
	__u64 crash_lost; /* accepted into the rings of a daemon that died before reading them */
	__u64 seq_next;   /* highest hdr.seq read + 1; 0 before the first record */
	__u64 seq_gaps;   /* seqs below seq_next never read (see docs/pipeline.md) */
	__u64 _reserved;  /* 0: room for one later field without a new pin */
};

/* The task's effective uid beside the real one (`uid`): a set-uid program run by a user has that
 * user's uid and root's euid, and the daemon shows its events only to clients who own both
 * (docs/security.md). Appended to a record so that the fields before it keep their offsets. */
struct perfrelay_creds {
	__u32 euid;
	__u32 flags; /* PERFRELAY_CREDS_*; 0 in records of probes before issue 37 */
};

/* perfrelay_creds.flags: the task runs with more than its user has, by a set-gid program
 * (egid != gid) or file capabilities (a non-root uid with permitted capabilities). The kernel
 * makes such a process non-dumpable and hides its /proc details from its own user; the daemon
 * shows its events only to clients who see every uid (docs/security.md). */
#define PERFRELAY_CREDS_PRIVILEGED 0x1u

/* Process identity (docs/events.md, "Process identity"), since event schema 3: the process image
 * a record comes from, and its real parent's. An image is one exec of one process; its exec_id
 * is made from what the kernel keeps for as long as the image lives (perfrelay_exec_id()), so
 * it is the same in every event of that image, for every reader and across daemons, and
 * unique within a boot. 0: none (the parent of a process without one). */
struct perfrelay_process_ids {
	__u64 exec_id;
	__u64 parent_exec_id;
};

/* One ancestor of an exec's process, nearest first (its real parent, then that one's). */
struct perfrelay_ancestor {
	__u64 exec_id;
	__u32 pid;                     /* tgid */
	__u32 _pad;                    /* 0 */
	char comm[PERFRELAY_COMM_LEN]; /* its group leader's comm */
};

/* A 64-bit mix of v into h (splitmix64's finalizer): a bijection of h ^ v, so that no two
 * inputs that differ in one step collide by construction. */
static __inline __u64 perfrelay_mix64(__u64 h, __u64 v) {
	h ^= v;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

/* The exec_id of the image of process `tgid` whose group leader started `start_boottime_ns`
 * after boot and has exec'd `self_exec_id` times (task_struct's tgid, group_leader's
 * start_boottime and self_exec_id: an exec keeps the process's start time and counts up the
 * exec count). Never 0. perfrelayd's process table (a task iterator) makes the same. */
static __inline __u64 perfrelay_exec_id(__u32 tgid, __u64 start_boottime_ns, __u64 self_exec_id) {
	__u64 h = perfrelay_mix64(0x7065726672656c61ULL /* "perfrela" */, start_boottime_ns);

	h = perfrelay_mix64(h, tgid);
	h = perfrelay_mix64(h, self_exec_id);
	return h ? h : 1;
}

struct perfrelay_exec {
	struct perfrelay_hdr hdr;
	__u32 pid;  /* tgid */
	__u32 ppid; /* real parent's tgid */
	__u32 uid;
	__u32 gid;
	__u64 cgroup_id;     /* cgroup v2 id: resolves to the systemd unit */
	__u16 argc;          /* NUL-terminated arguments in argv[] (those that fit) */
	__u16 argv_len;      /* bytes of argv[] in use, <= PERFRELAY_ARGV_LEN */
	__u8 argv_truncated; /* 1 if arguments did not fit */
	__u8 _pad[3];
	char comm[PERFRELAY_COMM_LEN];
	char filename[PERFRELAY_PATH_LEN];
	char argv[PERFRELAY_ARGV_LEN];
	/* Since event schema 2; records of older probes end before it (PERFRELAY_EXEC_SIZE_V1). */
	struct perfrelay_creds creds;
	/* Since event schema 3; records of older probes end before it (PERFRELAY_EXEC_SIZE_V2). */
	struct perfrelay_process_ids ids;
	__u32 n_ancestors;  /* ancestors[] in use, nearest first */
	__u32 exe_dev;      /* the executable's device (the kernel's dev_t: major << 20 | minor) */
	__u64 exe_ino;      /* and its inode: a binary renamed or replaced since shows */
	__u64 prev_exec_id; /* the image this exec replaced: the process's exec_id before it */
	struct perfrelay_ancestor ancestors[PERFRELAY_ANCESTORS_MAX];
	char exe[PERFRELAY_PATH_LEN]; /* the executable as the kernel resolved it ("" if unknown) */
	char cwd[PERFRELAY_PATH_LEN]; /* the working directory at exec ("" if unknown) */
};
#define PERFRELAY_EXEC_SIZE_V1 848u
#define PERFRELAY_EXEC_SIZE_V2 856u

/* Counter values of a process or a unit: only the counters in `mask` were counted. */
struct perfrelay_counter_values {
	__u32 mask;   /* bit i: value[i] is a configured counter (PERFRELAY_COUNTER_*) */
	__u32 scaled; /* bit i: value[i] was corrected for multiplexing at least once */
	__u64 value[PERFRELAY_COUNTERS_MAX];
};

struct perfrelay_exit {
	struct perfrelay_hdr hdr;
	__u32 pid;
	__u32 ppid;
	__u32 uid;
	__s32 exit_code; /* the status's exit code (0..255) */
	__u32 signal;    /* terminating signal, 0 if none */
	__u32 _pad;
	__u64 runtime_ns; /* from task start to exit */
	char comm[PERFRELAY_COMM_LEN];
	/* What the process used, all its threads, while counters were on (mask 0 when off).
	 * Records of older probes end before this field (PERFRELAY_EXIT_SIZE_V1). */
	struct perfrelay_counter_values counters;
	struct perfrelay_creds creds;     /* since schema 2 (PERFRELAY_EXIT_SIZE_V2 without) */
	struct perfrelay_process_ids ids; /* since schema 3 (PERFRELAY_EXIT_SIZE_V3 without) */
};
#define PERFRELAY_EXIT_SIZE_V1 80u
#define PERFRELAY_EXIT_SIZE_V2 152u
#define PERFRELAY_EXIT_SIZE_V3 160u

struct perfrelay_fork {
	struct perfrelay_hdr hdr;
	__u32 parent_pid; /* tgid of the parent */
	__u32 child_pid;  /* tid of the new task */
	__u32 child_tgid; /* == child_pid unless a thread was created */
	__u32 uid;
	char comm[PERFRELAY_COMM_LEN]; /* parent's comm (the child inherits it) */
	struct perfrelay_creds creds;  /* since schema 2 (PERFRELAY_FORK_SIZE_V1 without) */
	/* Since schema 3 (PERFRELAY_FORK_SIZE_V2 without): the new task's process image (a thread
	 * is of its process's) and that process's real parent's. */
	struct perfrelay_process_ids ids;
};
#define PERFRELAY_FORK_SIZE_V1 64u
#define PERFRELAY_FORK_SIZE_V2 72u

struct perfrelay_open {
	struct perfrelay_hdr hdr;
	__u32 pid;
	__u32 uid;
	__s32 flags;  /* open(2) flags */
	__s32 result; /* fd or -errno */
	char comm[PERFRELAY_COMM_LEN];
	char path[PERFRELAY_PATH_LEN];
	struct perfrelay_creds creds;     /* since schema 2 (PERFRELAY_OPEN_SIZE_V1 without) */
	struct perfrelay_process_ids ids; /* since schema 3 (PERFRELAY_OPEN_SIZE_V2 without) */
};
#define PERFRELAY_OPEN_SIZE_V1 320u
#define PERFRELAY_OPEN_SIZE_V2 328u

struct perfrelay_connect {
	struct perfrelay_hdr hdr;
	__u32 pid;
	__u32 uid;
	__s32 result;                  /* 0 or -errno (-EINPROGRESS for non-blocking) */
	__u16 family;                  /* AF_INET, AF_INET6, AF_UNIX, ... */
	__u16 port;                    /* host byte order; 0 for families without ports */
	__u8 addr[PERFRELAY_ADDR_LEN]; /* network byte order, as in the sockaddr */
	char comm[PERFRELAY_COMM_LEN];
	struct perfrelay_creds creds;     /* since schema 2 (PERFRELAY_CONNECT_SIZE_V1 without) */
	struct perfrelay_process_ids ids; /* since schema 3 (PERFRELAY_CONNECT_SIZE_V2 without) */
};
#define PERFRELAY_CONNECT_SIZE_V1 80u
#define PERFRELAY_CONNECT_SIZE_V2 88u

/* PERFRELAY_TYPE_COUNTERS, made by perfrelayd: what a cgroup's tasks used in one interval. */
struct perfrelay_unit_counters {
	struct perfrelay_hdr hdr;
	__u64 cgroup_id;
	__u64 interval_ns; /* since this cgroup's previous record, or since the daemon started */
	struct perfrelay_counter_values counters;
};

/* The counters program's configuration (pinned "counters_config", one entry), set by the
 * daemon. */
/* counters_config.exit_probe: */
#define PERFRELAY_EXIT_PROBE_ON    1u /* the exit probe is attached: it takes a process's totals */
/* and the switch program is attached too: the exit probe leaves its record in exit_pending for
 * the process's last switch, which takes the totals after the teardown (counters.bpf.h) */
#define PERFRELAY_EXIT_PROBE_DEFER 2u

struct perfrelay_counters_config {
	__u32 mask;       /* the counters to read (bits PERFRELAY_COUNTER_*); 0: charge nothing */
	__u32 exit_probe; /* PERFRELAY_EXIT_PROBE_* */
};

/* Kernel-side demand (docs/pipeline.md, "Demand"): the pinned, mmapable "demand" array (one
 * entry) that the built-in probes read before they build a record, written by perfrelayd. A
 * record the probe skips because of it is counted in the pinned per-CPU "filtered" array
 * (a __u64 per producer id), never as an attempt: hits = filtered + attempts. */
#define PERFRELAY_DEMAND_COMMS       8u  /* ExcludeComms= entries */
#define PERFRELAY_DEMAND_PATHS       8u  /* ExcludePaths= entries */
#define PERFRELAY_DEMAND_PATH_LEN    64u /* bytes of one, its NUL included */
#define PERFRELAY_DEMAND_UNITS       8u  /* ExcludeUnits= entries */
/* The cgroups of ExcludeUnits= units: a unit's own directory, one per user manager that runs
 * it (user units), and the depth of the cgroup tree the probes look up for them. */
#define PERFRELAY_DEMAND_UNIT_IDS    16u
#define PERFRELAY_DEMAND_UNIT_LEVELS 12u

/* One ExcludePaths= entry: the path (or, with prefix, what a path starts with: a pattern ending
 * in "*"), NUL-terminated, len bytes before the NUL. */
struct perfrelay_demand_path {
	__u32 len;
	__u32 prefix;
	char path[PERFRELAY_DEMAND_PATH_LEN];
};

struct perfrelay_demand {
	/* Bit t: no consumer wants records of type t (< 64) now; their probe counts them as
	 * filtered. Inverted, like "idle": a pin root no daemon wrote (0) wants everything. Written
	 * by the daemon as one aligned 64-bit store. */
	__u64 unwanted;
	/* Static exclusions ([Probes] ExcludeComms=, ExcludePaths=), for the open and connect
	 * probes. The daemon writes the count 0 first, then the entries, then the count. */
	__u32 n_comms;
	__u32 n_paths;
	char comms[PERFRELAY_DEMAND_COMMS][PERFRELAY_COMM_LEN]; /* zero-padded, as the kernel's comm */
	struct perfrelay_demand_path paths[PERFRELAY_DEMAND_PATHS];
	/* [Probes] MaxEventsPerUnitPerSec=: the open and connect records a cgroup's tasks may make
	 * per second (a token bucket per cgroup, "throttle"); 0: no limit. */
	__u64 unit_rate;
	/* [Probes] ExcludeUnits=: the cgroup ids of those units' directories now (the daemon
	 * follows them as units restart); a task in one of them or below is excluded. Written
	 * like the other exclusions: the count 0, the ids, the count. */
	__u32 n_unit_ids;
	__u32 _pad;
	__u64 unit_ids[PERFRELAY_DEMAND_UNIT_IDS];
};

/* The pinned "throttle" hash (docs/pipeline.md, "Throttle"): per cgroup id its token bucket
 * and the records it cost; PERFRELAY_THROTTLE_MAX keys, and cgroups that find no room share the
 * bucket of key 0. A throttled record is counted as filtered (hits = filtered + attempts) and
 * here, as `throttled`. Private to the probes. */
#define PERFRELAY_THROTTLE_MAX 4096u
struct perfrelay_throttle {
	__u64 last_ns;   /* when the bucket was last filled */
	__u64 tokens;    /* nanotokens: a record costs 1e9, the bucket holds one second's */
	__u64 throttled; /* records refused */
	__u64 _pad;
};

/* Slots of the pinned "counters_cgroups_users" array (u64 each): the cgroup table's share for
 * cgroups users made (docs/counters.md). */
#define PERFRELAY_COUNTERS_USERS_HELD    0
#define PERFRELAY_COUNTERS_USERS_MAX     1
#define PERFRELAY_COUNTERS_USERS_REFUSED 2
#define PERFRELAY_COUNTERS_USERS_SLOTS   3

/* Value of the pinned per-CPU "counters_stats" array (one entry): what the counters program
 * did and could not do on that CPU. */
struct perfrelay_counters_stats {
	__u64 charges;      /* context switches (and exits) charged */
	__u64 read_errors;  /* bpf_perf_event_read_value() failures (no event on that CPU) */
	__u64 scaled;       /* deltas corrected for multiplexing */
	__u64 cgroup_full;  /* charges a cgroup lost: the cgroup table was full */
	__u64 process_full; /* charges a process lost: the process table was full */
	__u64 reaped;       /* process totals dropped at exit while the exit probe was off */
};

/* Packet captures (docs/capture.md): CaptureBytes= is at most this, so that a record (fixed part
 * and bytes) stays below the perf sample's u16 size and its JSON below ENCODE_JSON_MAX. */
#define PERFRELAY_CAPTURE_BYTES_MAX 65000u
#define PERFRELAY_PACKET_INGRESS    0u
#define PERFRELAY_PACKET_EGRESS     1u
#define PERFRELAY_PACKET_LINK_RAW   0u /* the bytes start with the IPv4/IPv6 header (a unit's capture) */
#define PERFRELAY_PACKET_LINK_ETHER 1u /* the bytes start with the Ethernet header (an interface's) */

/* PERFRELAY_TYPE_PACKET. hdr.size is the size of this fixed part; the packet's first cap_len
 * bytes follow it in the raw sample, appended by the kernel from the skb (bpf_perf_event_output()
 * with the length in the BPF_F_CTXLEN_MASK bits of the flags), so that they never pass through
 * the BPF stack. A valid record has raw size = hdr.size + cap_len (+ the kernel's padding, < 8),
 * cap_len <= orig_len and cap_len <= PERFRELAY_CAPTURE_BYTES_MAX. `link` says where the bytes
 * start: cgroup_skb programs (a unit's capture) see packets from the network header on, tc
 * programs (an interface's) from the Ethernet header on. */
struct perfrelay_packet {
	struct perfrelay_hdr hdr;
	__u64 cgroup_id;  /* the socket's cgroup: the unit's, or one below it */
	__u32 capture_id; /* the capture that took it (D-Bus StartCapture()) */
	__u32 ifindex;    /* the device the packet came in on or goes out of (0: not known yet) */
	__u32 orig_len;   /* the packet's length (skb->len) */
	__u32 cap_len;    /* bytes that follow: min(orig_len, the capture's bytes) */
	__u16 protocol;   /* ETH_P_IP (0x0800) or ETH_P_IPV6 (0x86dd), host byte order */
	__u8 direction;   /* PERFRELAY_PACKET_INGRESS or _EGRESS */
	__u8 link;        /* PERFRELAY_PACKET_LINK_RAW or _ETHER */
	__u8 _pad[4];
};

/* PERFRELAY_TYPE_UNIT: hdr.size = sizeof(struct perfrelay_unit) + the name's length + 1 (its
 * NUL), the name at most PERFRELAY_UNIT_NAME_MAX bytes with the NUL. hdr.seq and hdr.ts_ns are
 * the record's that follows; producer and cpu too. */
#define PERFRELAY_UNIT_NAME_MAX 256 /* systemd's unit names are shorter (UNIT_NAME_MAX) */
struct perfrelay_unit {
	struct perfrelay_hdr hdr;
	__u64 cgroup_id; /* the cgroup id of the record that follows */
			 /* then the unit's name, NUL-terminated */
};

/* The benchmark producer: a sequence number and a payload of configurable size. */
struct perfrelay_bench {
	struct perfrelay_hdr hdr;
	__u64 call; /* running record count of the producer on this CPU */
};

_Static_assert(sizeof(struct perfrelay_hdr) == 32, "perfrelay_hdr ABI");
_Static_assert(sizeof(struct perfrelay_counters) == 16, "perfrelay_counters ABI");
_Static_assert(sizeof(struct perfrelay_unit_key) == 16, "perfrelay_unit_key ABI");
_Static_assert(sizeof(struct perfrelay_recorder_stats) == 24, "perfrelay_recorder_stats ABI");
_Static_assert(sizeof(struct perfrelay_received) == 48, "perfrelay_received ABI");
_Static_assert(sizeof(struct perfrelay_creds) == 8, "perfrelay_creds ABI");
_Static_assert(sizeof(struct perfrelay_process_ids) == 16, "perfrelay_process_ids ABI");
_Static_assert(sizeof(struct perfrelay_ancestor) == 32, "perfrelay_ancestor ABI");
_Static_assert(PERFRELAY_EXEC_SIZE_V2 == PERFRELAY_EXEC_SIZE_V1 + 8, "perfrelay_exec ABI v2");
_Static_assert(
	sizeof(struct perfrelay_exec) ==
		PERFRELAY_EXEC_SIZE_V2 + 16 + 16 + 8 + 32 * PERFRELAY_ANCESTORS_MAX + 2 * PERFRELAY_PATH_LEN,
	"perfrelay_exec ABI");
_Static_assert(PERFRELAY_EXEC_SIZE_V1 == 32 + 32 + 16 + 256 + 512, "perfrelay_exec ABI v1");
_Static_assert(
	sizeof(struct perfrelay_counter_values) == 8 + 8 * PERFRELAY_COUNTERS_MAX,
	"perfrelay_counter_values ABI");
_Static_assert(PERFRELAY_EXIT_SIZE_V3 == PERFRELAY_EXIT_SIZE_V2 + 8, "perfrelay_exit ABI v3");
_Static_assert(sizeof(struct perfrelay_exit) == PERFRELAY_EXIT_SIZE_V3 + 16, "perfrelay_exit ABI");
_Static_assert(PERFRELAY_EXIT_SIZE_V2 == PERFRELAY_EXIT_SIZE_V1 + 72, "perfrelay_exit ABI v2");
_Static_assert(sizeof(struct perfrelay_unit_counters) == 32 + 16 + 72, "perfrelay_unit_counters ABI");
_Static_assert(sizeof(struct perfrelay_counters_config) == 8, "perfrelay_counters_config ABI");
_Static_assert(sizeof(struct perfrelay_counters_stats) == 48, "perfrelay_counters_stats ABI");
_Static_assert(
	sizeof(struct perfrelay_demand) ==
		32 + PERFRELAY_DEMAND_COMMS * PERFRELAY_COMM_LEN +
			PERFRELAY_DEMAND_PATHS * (8 + PERFRELAY_DEMAND_PATH_LEN) +
			PERFRELAY_DEMAND_UNIT_IDS * 8,
	"perfrelay_demand ABI");
_Static_assert(PERFRELAY_FORK_SIZE_V2 == PERFRELAY_FORK_SIZE_V1 + 8, "perfrelay_fork ABI v2");
_Static_assert(sizeof(struct perfrelay_fork) == PERFRELAY_FORK_SIZE_V2 + 16, "perfrelay_fork ABI");
_Static_assert(PERFRELAY_FORK_SIZE_V1 == 32 + 16 + 16, "perfrelay_fork ABI v1");
_Static_assert(PERFRELAY_OPEN_SIZE_V2 == PERFRELAY_OPEN_SIZE_V1 + 8, "perfrelay_open ABI v2");
_Static_assert(sizeof(struct perfrelay_open) == PERFRELAY_OPEN_SIZE_V2 + 16, "perfrelay_open ABI");
_Static_assert(PERFRELAY_OPEN_SIZE_V1 == 32 + 16 + 16 + 256, "perfrelay_open ABI v1");
_Static_assert(PERFRELAY_CONNECT_SIZE_V2 == PERFRELAY_CONNECT_SIZE_V1 + 8, "perfrelay_connect ABI v2");
_Static_assert(sizeof(struct perfrelay_connect) == PERFRELAY_CONNECT_SIZE_V2 + 16, "perfrelay_connect ABI");
_Static_assert(PERFRELAY_CONNECT_SIZE_V1 == 32 + 16 + 16 + 16, "perfrelay_connect ABI v1");
_Static_assert(sizeof(struct perfrelay_bench) == 40, "perfrelay_bench ABI");
_Static_assert(sizeof(struct perfrelay_unit) == 40, "perfrelay_unit ABI");
_Static_assert(sizeof(struct perfrelay_packet) == 32 + 8 + 16 + 8, "perfrelay_packet ABI");
_Static_assert(
	sizeof(struct perfrelay_packet) + PERFRELAY_CAPTURE_BYTES_MAX + 8 <= PERFRELAY_RECORD_MAX,
	"a packet record fits a perf sample");

#endif
