/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Validation of perf ring records and perfrelay records: untrusted bytes in, a checked view out. */

#include <linux/perf_event.h>
#include <string.h>
#include <strings.h>

#include "decode/decode.h"
#include "macro.h"
#include "string-table.h"


/* perf_event_header is followed by a u32 size for PERF_SAMPLE_RAW (the only sample_type the
 * daemon opens its rings with), and by {u64 id; u64 lost;} for PERF_RECORD_LOST. */
#define PERF_SAMPLE_RAW_OFFSET (sizeof(struct perf_event_header) + sizeof(uint32_t))
#define PERF_LOST_MIN_SIZE     (sizeof(struct perf_event_header) + 2 * sizeof(uint64_t))

void decode_perf_record(const void *rec, size_t size, PerfRecordView *ret) {
	const uint8_t *p = rec;
	struct perf_event_header h;
	uint32_t raw_size;

	*ret = (PerfRecordView){ .kind = PERF_REC_MALFORMED };

	if (size < sizeof(h))
		return;
	memcpy(&h, p, sizeof(h));
	/* The ring walker hands us exactly one record; a header that disagrees with the length
	 * we were given means the walker and the kernel disagree, so trust neither. */
	if (h.size != size)
		return;

	switch (h.type) {
	case PERF_RECORD_SAMPLE:
		if (size < PERF_SAMPLE_RAW_OFFSET)
			return;
		memcpy(&raw_size, p + sizeof(h), sizeof(raw_size));
		if (raw_size > size - PERF_SAMPLE_RAW_OFFSET)
			return;
		ret->kind = PERF_REC_SAMPLE;
		ret->raw = p + PERF_SAMPLE_RAW_OFFSET;
		ret->raw_size = raw_size;
		return;

	case PERF_RECORD_LOST:
		if (size < PERF_LOST_MIN_SIZE)
			return;
		/* Skip the u64 id: the daemon opens one event per ring, so it names nothing new. */
		memcpy(&ret->lost, p + sizeof(h) + sizeof(uint64_t), sizeof(ret->lost));
		ret->kind = PERF_REC_LOST;
		return;

	default:
		ret->kind = PERF_REC_OTHER;
		return;
	}
}

static const char *const decode_error_table[_DECODE_ERROR_MAX] = {
	[DECODE_OK] = "ok",
	[DECODE_TRUNCATED] = "truncated",
	[DECODE_BAD_MAGIC] = "bad-magic",
	[DECODE_BAD_VERSION] = "bad-version",
	[DECODE_BAD_SIZE] = "bad-size",
	[DECODE_BAD_STRING] = "bad-string",
	[DECODE_BAD_PRODUCER] = "bad-producer",
	[DECODE_RESERVED_TYPE] = "reserved-type",
	[DECODE_BAD_LENGTH] = "bad-length",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(decode_error, DecodeError);

static const char *const event_type_table[] = {
	[PERFRELAY_TYPE_EXEC] = "exec",         [PERFRELAY_TYPE_EXIT] = "exit",
	[PERFRELAY_TYPE_FORK] = "fork",         [PERFRELAY_TYPE_OPEN] = "open",
	[PERFRELAY_TYPE_CONNECT] = "connect",   [PERFRELAY_TYPE_BENCH] = "bench",
	[PERFRELAY_TYPE_COUNTERS] = "counters", [PERFRELAY_TYPE_PACKET] = "packet",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(event_type, uint16_t);

/* perfrelay's own producers, as ListProducers() and `perfrelayctl producers` name them. */
static const char *const builtin_producer_table[PERFRELAY_PRODUCER_THIRD_PARTY_MIN] = {
	[PERFRELAY_PRODUCER_EXEC] = "exec",       [PERFRELAY_PRODUCER_EXIT] = "exit",
	[PERFRELAY_PRODUCER_FORK] = "fork",       [PERFRELAY_PRODUCER_OPEN] = "open",
	[PERFRELAY_PRODUCER_CONNECT] = "connect", [PERFRELAY_PRODUCER_CAPTURE] = "capture",
	[PERFRELAY_PRODUCER_BENCH] = "bench",     [PERFRELAY_PRODUCER_COUNTERS] = "counters",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(builtin_producer, uint32_t);

/* The "type" of lines and frames the daemon makes itself (docs/protocol.md). */
static const char *const daemon_line_types[] = { "lost",    "unknown", "hello", "error",
						 "goodbye", "schema",  "unit" };

bool event_type_name_is_daemons(const char *name) {
	for (size_t i = 0; i < ELEMENTSOF(daemon_line_types); i++)
		if (strcasecmp(daemon_line_types[i], name) == 0)
			return true;
	return false;
}

const char *event_type_like(const char *name) {
	for (size_t i = 0; i < ELEMENTSOF(event_type_table); i++)
		if (event_type_table[i] && strcasecmp(event_type_table[i], name) == 0)
			return event_type_table[i];
	return NULL;
}

bool event_type_name_is_reserved(const char *name) {
	return event_type_like(name) || event_type_name_is_daemons(name);
}

static bool has_nul(const char *s, size_t n) {
	return memchr(s, 0, n) != NULL;
}

/* The strings of every built-in type must end inside their arrays: the encoder and filters
 * use them as C strings and must never run past the record. */
#define CHECK_STRING(rec, type, member)                                               \
	do {                                                                          \
		if (!has_nul(FIELD_PTR(rec, type, member), FIELD_SIZE(type, member))) \
			return DECODE_BAD_STRING;                                     \
	} while (0)

/* Validation of the built-in types' payloads; nothing is written until all of it passed. */
static DecodeError check_exec(const uint8_t *rec, uint16_t size) {
	uint16_t argv_len;

	CHECK_STRING(rec, struct perfrelay_exec, comm);
	CHECK_STRING(rec, struct perfrelay_exec, filename);
	CHECK_STRING(rec, struct perfrelay_exec, argv);
	if (size == sizeof(struct perfrelay_exec)) {
		/* Schema 3: the ancestors in use, each comm, and the paths, terminated. */
		uint32_t n = READ_FIELD(rec, struct perfrelay_exec, n_ancestors);

		if (n > PERFRELAY_ANCESTORS_MAX)
			return DECODE_BAD_STRING;
		for (uint32_t i = 0; i < PERFRELAY_ANCESTORS_MAX; i++)
			CHECK_STRING(rec, struct perfrelay_exec, ancestors[i].comm);
		CHECK_STRING(rec, struct perfrelay_exec, exe);
		CHECK_STRING(rec, struct perfrelay_exec, cwd);
	}

	/* argv_len bounds the bytes the encoder splits into arguments; the last one in use must
	 * be a NUL so that the final argument ends where argv_len says. */
	argv_len = READ_FIELD(rec, struct perfrelay_exec, argv_len);
	if (argv_len > PERFRELAY_ARGV_LEN)
		return DECODE_BAD_STRING;
	if (argv_len > 0 && FIELD_PTR(rec, struct perfrelay_exec, argv)[argv_len - 1] != '\0')
		return DECODE_BAD_STRING;
	return DECODE_OK;
}

static DecodeError check_exit(const uint8_t *rec) {
	CHECK_STRING(rec, struct perfrelay_exit, comm);
	return DECODE_OK;
}

static DecodeError check_fork(const uint8_t *rec) {
	CHECK_STRING(rec, struct perfrelay_fork, comm);
	return DECODE_OK;
}

static DecodeError check_open(const uint8_t *rec) {
	CHECK_STRING(rec, struct perfrelay_open, comm);
	CHECK_STRING(rec, struct perfrelay_open, path);
	return DECODE_OK;
}

static DecodeError check_connect(const uint8_t *rec) {
	CHECK_STRING(rec, struct perfrelay_connect, comm);
	return DECODE_OK;
}

/* The fields filters use: pid, uid and comm of the built-in types that have them, the cgroup
 * of exec. Every field is written, so nothing of a previous event survives in *ev. */
#define FILL_PID_UID_COMM(ev, rec, type, pid_member)           \
	do {                                                   \
		(ev)->has_pid = (ev)->has_uid = true;          \
		(ev)->pid = READ_FIELD(rec, type, pid_member); \
		(ev)->uid = READ_FIELD(rec, type, uid);        \
		(ev)->comm = FIELD_PTR(rec, type, comm);       \
	} while (0)

/* The euid of a record that has its creds (schema 2 probes); older ones end before them. */
#define FILL_EUID(ev, rec, type)                                                                            \
	do {                                                                                                \
		if ((ev)->hdr.size >= offsetof(type, creds) + sizeof(struct perfrelay_creds)) {             \
			(ev)->has_euid = true;                                                              \
			(ev)->euid = READ_FIELD(rec, type, creds.euid);                                     \
			(ev)->privileged = READ_FIELD(rec, type, creds.flags) & PERFRELAY_CREDS_PRIVILEGED; \
		}                                                                                           \
	} while (0)

/* The process ids of a record that has them (schema 3 probes); older ones end before them. */
#define FILL_IDS(ev, rec, type)                                                                     \
	do {                                                                                        \
		if ((ev)->hdr.size >= offsetof(type, ids) + sizeof(struct perfrelay_process_ids)) { \
			(ev)->has_exec_id = true;                                                   \
			(ev)->exec_id = READ_FIELD(rec, type, ids.exec_id);                         \
			(ev)->parent_exec_id = READ_FIELD(rec, type, ids.parent_exec_id);           \
		}                                                                                   \
	} while (0)

static inline __attribute__((always_inline)) void
	fill_fields(const uint8_t *rec, uint16_t type, bool known, DecodedEvent *ev) {
	ev->has_pid = ev->has_uid = ev->has_euid = ev->has_exec_id = ev->privileged = false;
	ev->pid = ev->uid = ev->euid = 0;
	ev->exec_id = ev->parent_exec_id = 0;
	ev->comm = NULL;
	ev->cgroup_id = 0;
	ev->capture_id = 0;
	if (!known)
		return;
	switch (type) {
	case PERFRELAY_TYPE_EXEC:
		FILL_PID_UID_COMM(ev, rec, struct perfrelay_exec, pid);
		FILL_EUID(ev, rec, struct perfrelay_exec);
		FILL_IDS(ev, rec, struct perfrelay_exec);
		ev->cgroup_id = READ_FIELD(rec, struct perfrelay_exec, cgroup_id);
		break;
	case PERFRELAY_TYPE_EXIT:
		FILL_PID_UID_COMM(ev, rec, struct perfrelay_exit, pid);
		FILL_EUID(ev, rec, struct perfrelay_exit);
		FILL_IDS(ev, rec, struct perfrelay_exit);
		break;
	case PERFRELAY_TYPE_FORK:
		/* Filters by pid match the process that forked: the child has not run anything yet. */
		FILL_PID_UID_COMM(ev, rec, struct perfrelay_fork, parent_pid);
		FILL_EUID(ev, rec, struct perfrelay_fork);
		FILL_IDS(ev, rec, struct perfrelay_fork);
		break;
	case PERFRELAY_TYPE_OPEN:
		FILL_PID_UID_COMM(ev, rec, struct perfrelay_open, pid);
		FILL_EUID(ev, rec, struct perfrelay_open);
		FILL_IDS(ev, rec, struct perfrelay_open);
		break;
	case PERFRELAY_TYPE_CONNECT:
		FILL_PID_UID_COMM(ev, rec, struct perfrelay_connect, pid);
		FILL_EUID(ev, rec, struct perfrelay_connect);
		FILL_IDS(ev, rec, struct perfrelay_connect);
		break;
	case PERFRELAY_TYPE_COUNTERS:
		ev->cgroup_id = READ_FIELD(rec, struct perfrelay_unit_counters, cgroup_id);
		break;
	case PERFRELAY_TYPE_PACKET:
		ev->cgroup_id = READ_FIELD(rec, struct perfrelay_packet, cgroup_id);
		ev->capture_id = READ_FIELD(rec, struct perfrelay_packet, capture_id);
		break;
	}
}

/* A packet: its fixed part exactly, and cap_len bytes after it, no more than the packet had and
 * than a capture may take. Sets *ret_tail to cap_len. */
static DecodeError check_packet(const uint8_t *rec, uint16_t size, size_t raw_size, uint32_t *ret_tail) {
	uint32_t cap_len, orig_len;

	if (size != sizeof(struct perfrelay_packet))
		return DECODE_BAD_SIZE;
	cap_len = READ_FIELD(rec, struct perfrelay_packet, cap_len);
	orig_len = READ_FIELD(rec, struct perfrelay_packet, orig_len);
	if (cap_len > PERFRELAY_CAPTURE_BYTES_MAX || cap_len > orig_len)
		return DECODE_BAD_LENGTH;
	if (raw_size - size < cap_len)
		return DECODE_BAD_LENGTH; /* the bytes it says follow are not there */
	if (READ_FIELD(rec, struct perfrelay_packet, direction) > PERFRELAY_PACKET_EGRESS ||
	    READ_FIELD(rec, struct perfrelay_packet, link) > PERFRELAY_PACKET_LINK_ETHER)
		return DECODE_BAD_LENGTH;
	*ret_tail = cap_len;
	return DECODE_OK;
}

DecodeError decode_event(const void *raw, size_t raw_size, DecodedEvent *ret) {
	const uint8_t *rec = raw;
	struct perfrelay_hdr hdr;
	DecodeError e = DECODE_OK;
	uint32_t tail = 0;
	bool known = true;

	if (raw_size < sizeof(hdr))
		return DECODE_TRUNCATED;
	memcpy(&hdr, rec, sizeof(hdr));

	if (hdr.magic != PERFRELAY_MAGIC)
		return DECODE_BAD_MAGIC;
	if (hdr.version != PERFRELAY_VERSION)
		return DECODE_BAD_VERSION;
	/* hdr.flags is reserved and deliberately not checked, so a later version can set
	 * informational flags without old daemons dropping every record. */
	if (hdr.producer >= PERFRELAY_MAX_PRODUCERS)
		return DECODE_BAD_PRODUCER;
	/* Binary clients read this type as the daemon's own loss report: a producer that could
	 * emit it would forge one. */
	if (hdr.type == PERFRELAY_TYPE_LOST || hdr.type == PERFRELAY_TYPE_SCHEMA ||
	    hdr.type == PERFRELAY_TYPE_UNIT || hdr.type == PERFRELAY_TYPE_CURSOR ||
	    hdr.type == PERFRELAY_TYPE_COUNTERS)
		return DECODE_RESERVED_TYPE;
	if (hdr.size < sizeof(hdr))
		return DECODE_BAD_SIZE;
	if (hdr.size > raw_size)
		return DECODE_TRUNCATED;
	/* A packet's bytes follow its fixed part, appended by the kernel: they count as the
	 * record's from here on (cap_len says how many; checked against the raw size first). */
	if (hdr.type == PERFRELAY_TYPE_PACKET) {
		e = check_packet(rec, hdr.size, raw_size, &tail);
		if (e != DECODE_OK)
			return e;
	}
	/* The kernel pads raw samples so that the u32 size plus the data is a multiple of 8;
	 * anything beyond that is not padding but a producer writing a size it did not mean. */
	if (raw_size - hdr.size - tail >= 8)
		return DECODE_BAD_SIZE;

	switch (hdr.type) {
	/* Records of probes older than schema 2 end before their creds (the euid), of schema 2
	 * before their process ids: they come from links still attached while a newer daemon
	 * replaces them. */
	case PERFRELAY_TYPE_EXEC:
		if (hdr.size != sizeof(struct perfrelay_exec) && hdr.size != PERFRELAY_EXEC_SIZE_V2 &&
		    hdr.size != PERFRELAY_EXEC_SIZE_V1)
			return DECODE_BAD_SIZE;
		e = check_exec(rec, hdr.size);
		break;
	case PERFRELAY_TYPE_EXIT:
		/* Probes of an older perfrelay (still attached while it is replaced) write the
		 * record without its counters. */
		if (hdr.size != sizeof(struct perfrelay_exit) && hdr.size != PERFRELAY_EXIT_SIZE_V3 &&
		    hdr.size != PERFRELAY_EXIT_SIZE_V2 && hdr.size != PERFRELAY_EXIT_SIZE_V1)
			return DECODE_BAD_SIZE;
		e = check_exit(rec);
		break;
	case PERFRELAY_TYPE_FORK:
		if (hdr.size != sizeof(struct perfrelay_fork) && hdr.size != PERFRELAY_FORK_SIZE_V2 &&
		    hdr.size != PERFRELAY_FORK_SIZE_V1)
			return DECODE_BAD_SIZE;
		e = check_fork(rec);
		break;
	case PERFRELAY_TYPE_OPEN:
		if (hdr.size != sizeof(struct perfrelay_open) && hdr.size != PERFRELAY_OPEN_SIZE_V2 &&
		    hdr.size != PERFRELAY_OPEN_SIZE_V1)
			return DECODE_BAD_SIZE;
		e = check_open(rec);
		break;
	case PERFRELAY_TYPE_CONNECT:
		if (hdr.size != sizeof(struct perfrelay_connect) && hdr.size != PERFRELAY_CONNECT_SIZE_V2 &&
		    hdr.size != PERFRELAY_CONNECT_SIZE_V1)
			return DECODE_BAD_SIZE;
		e = check_connect(rec);
		break;
	case PERFRELAY_TYPE_PACKET:
		break; /* check_packet() above */
	case PERFRELAY_TYPE_BENCH:
		/* The benchmark varies the record size to measure its cost; the bytes past
		 * struct perfrelay_bench are opaque filler. */
		if (hdr.size < sizeof(struct perfrelay_bench))
			return DECODE_BAD_SIZE;
		break;
	default:
		/* A third-party (or future) type: the header is all we can vouch for, the
		 * payload is passed on as opaque bytes. */
		known = false;
		break;
	}
	if (e != DECODE_OK)
		return e;

	/* *ret only now that everything passed, so that it stays untouched on failure; and field
	 * by field: copying a whole local DecodedEvent out made every event wait for a wide load
	 * of fields just written narrowly (a store-forwarding stall, about a third of this
	 * function's time in the benchmark). */
	ret->hdr = hdr;
	ret->record = rec;
	ret->record_size = hdr.size + tail;
	ret->payload = rec + sizeof(hdr);
	ret->payload_size = hdr.size - sizeof(hdr);
	ret->known = known;
	ret->btf = NULL;
	ret->producer_name = NULL;
	ret->producer_type = NULL;
	fill_fields(rec, hdr.type, known, ret);
	return DECODE_OK;
}

void decode_daemon_record(const void *rec, DecodedEvent *ret) {
	const uint8_t *r = rec;

	memcpy(&ret->hdr, r, sizeof(ret->hdr));
	ret->record = r;
	ret->record_size = ret->hdr.size;
	ret->payload = r + sizeof(ret->hdr);
	ret->payload_size = ret->hdr.size - sizeof(ret->hdr);
	ret->known = true;
	ret->btf = NULL;
	ret->producer_name = NULL;
	ret->producer_type = NULL;
	fill_fields(r, ret->hdr.type, true, ret);
}
