/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Decoding of perf records and perfrelay records: bytes in, a validated view out. Pure: no
 * I/O, no allocation, never trusts the bytes (they may come from any BPF program that can
 * open the pinned array). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "event.h"

/* Fields of a record in ring memory. The raw data of a sample sits at offset 12 of an 8-aligned
 * perf record, so every multi-byte field is read with memcpy into a local: casting to a struct
 * pointer (even to take a member's address) would be undefined behaviour and traps on
 * strict-alignment architectures. Needs <string.h>. */
#define READ_FIELD(base, type, member)                                                      \
	({                                                                                  \
		__typeof__(((type *) 0)->member) _v;                                        \
		memcpy(&_v, (const uint8_t *) (base) + offsetof(type, member), sizeof(_v)); \
		_v;                                                                         \
	})
/* Address of a char array inside an unaligned record: char has no alignment requirement. */
#define FIELD_PTR(base, type, member) ((const char *) (base) + offsetof(type, member))
#define FIELD_SIZE(type, member)      sizeof(((type *) 0)->member)

/* What a perf record in the ring is, after decode_perf_record(). */
typedef enum PerfRecordKind {
	PERF_REC_SAMPLE, /* PERF_RECORD_SAMPLE with PERF_SAMPLE_RAW: raw/raw_size are set */
	PERF_REC_LOST,   /* PERF_RECORD_LOST: lost is set */
	PERF_REC_OTHER,  /* any other record type: skipped (counted by the caller) */
	PERF_REC_MALFORMED,
} PerfRecordKind;

typedef struct PerfRecordView {
	PerfRecordKind kind;
	const uint8_t *raw; /* PERF_REC_SAMPLE: the raw data (the producer's bytes + kernel padding) */
	uint32_t raw_size;
	uint64_t lost; /* PERF_REC_LOST */
} PerfRecordView;

/* rec points at a whole perf record of `size` bytes (size == perf_event_header.size, already
 * checked by the ring walker to be >= 8 and to fit). Fills *ret; never fails. */
void decode_perf_record(const void *rec, size_t size, PerfRecordView *ret);

/* Why a raw sample was rejected; the daemon counts each reason per producer. */
typedef enum DecodeError {
	DECODE_OK = 0,
	DECODE_TRUNCATED, /* shorter than the header, or than hdr.size */
	DECODE_BAD_MAGIC,
	DECODE_BAD_VERSION,
	DECODE_BAD_SIZE,      /* hdr.size wrong for a known type, < header, or far below raw size */
	DECODE_BAD_STRING,    /* a string field without its NUL, or argv_len out of bounds */
	DECODE_BAD_PRODUCER,  /* producer id >= PERFRELAY_MAX_PRODUCERS */
	DECODE_RESERVED_TYPE, /* PERFRELAY_TYPE_LOST, _SCHEMA or _COUNTERS: only the daemon makes them */
	DECODE_BAD_LENGTH,    /* a packet whose cap_len disagrees with its record or its orig_len */
	_DECODE_ERROR_MAX,
} DecodeError;
const char *decode_error_to_string(DecodeError e);

/* A validated perfrelay record. Pointers point into the caller's buffer, which must outlive
 * the view. Fields a type does not have are 0 / NULL and has_* false. */
typedef struct DecodedEvent {
	struct perfrelay_hdr hdr; /* aligned copy of the header */
	const uint8_t *record;    /* the whole record (record_size bytes), possibly unaligned */
	uint32_t record_size;     /* hdr.size, and for a packet the bytes appended after it */
	const uint8_t *payload;   /* record + sizeof(hdr) */
	uint32_t payload_size;    /* hdr.size - sizeof(hdr) */
	bool known;               /* a built-in type whose payload was validated */
	bool has_pid, has_uid, has_euid, has_exec_id;
	uint32_t pid; /* for filters */
	uint32_t uid;
	uint32_t euid;   /* has_euid: records of probes older than schema 2 have none */
	bool privileged; /* PERFRELAY_CREDS_PRIVILEGED: a set-gid or file-capability program */
	/* has_exec_id: the process image and its parent's (struct perfrelay_process_ids); records
	 * of probes older than schema 3 have none. */
	uint64_t exec_id, parent_exec_id;
	const char *comm;    /* NUL-terminated within the record, or NULL */
	uint64_t cgroup_id;  /* 0 when the type has none */
	uint32_t capture_id; /* a packet's capture, for filters; 0 for other types */
	/* A third-party record with a decoder from its producer's BTF (set by the reader, which
	 * has checked that the record is as large as the decoder's struct), else NULL. */
	const struct BtfRec *btf;
	const char *producer_name;                /* with btf: the events' "producer_name" */
	const struct ProducerType *producer_type; /* with btf: its declaration (producer-scan.h) */
} DecodedEvent;

/* Validates raw sample bytes as a perfrelay record. Known types must have exactly their
 * struct's size and terminated strings; unknown types only a valid header. raw_size may
 * exceed hdr.size by the kernel's alignment padding (< 8 bytes), not more. */
DecodeError decode_event(const void *raw, size_t raw_size, DecodedEvent *ret);

/* A record the daemon made itself (PERFRELAY_TYPE_COUNTERS), trusted: the view of it that
 * decode_event() would give a valid built-in record. */
void decode_daemon_record(const void *rec, DecodedEvent *ret);

/* Types delivered only to subscribers that name them (docs/protocol.md): the units' counters
 * and captured packets, which a subscription of everything (or --stdout) does not get. */
static inline bool event_type_on_request(uint16_t type) {
	return type == PERFRELAY_TYPE_COUNTERS || type == PERFRELAY_TYPE_PACKET;
}

/* Type name for JSON ("exec", ...), or NULL for types without a name. */
const char *event_type_to_string(uint16_t type);
/* The name of one of perfrelay's own producers (PERFRELAY_PRODUCER_EXEC: "exec", ...), or NULL
 * (a third-party id, or an unused one). */
const char *builtin_producer_to_string(uint32_t id);
/* The built-in type name `name` is, in any letter case ("EXEC": "exec"), or NULL. */
const char *event_type_like(const char *name);
/* Whether `name` (any case) is the "type" of a line the daemon makes (lost, unknown, hello,
 * error, goodbye, schema, unit). */
bool event_type_name_is_daemons(const char *name);
/* That, or the name of a built-in type: a third-party type may not be called so. */
bool event_type_name_is_reserved(const char *name);
