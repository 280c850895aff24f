/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Discovery of third-party producers: the BPF programs that write into perfrelayd's pinned
 * "events" map, their names, and decoders for the record types their BTF declares. Runs on the
 * main thread only (syscalls and libbpf); the result is an immutable snapshot that can be
 * handed to reader threads whole and freed once no reader uses it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode/btfrec.h"
#include "event.h"
#include "macro.h"

#define PRODUCERS_MAX_PROGS  64u  /* programs using "events" that one scan keeps */
#define PRODUCERS_MAX_TYPES  256u /* declared record types one scan keeps */
/* A schema frame is a record: its JSON must fit behind the header. */
#define PRODUCERS_SCHEMA_MAX (PERFRELAY_RECORD_MAX - sizeof(struct perfrelay_hdr))

typedef struct ProducerProg {
	uint32_t prog_id;
	uint32_t btf_id;   /* 0 if the program has no BTF */
	char name[16];     /* BPF_OBJ_NAME_LEN, the kernel's program name */
	uint32_t producer; /* from PERFRELAY_PRODUCER(), 0 without one */
	char producer_name[BTFREC_MAX_NAME + 1];
} ProducerProg;

typedef struct ProducerType {
	uint32_t prog_id; /* the first program that declared it */
	uint16_t type;
	char name[BTFREC_MAX_NAME + 1];
	BtfRec *rec;         /* NULL when refused */
	BtfRecError refused; /* why rec is NULL; BTFREC_OK otherwise */
	/* The events' "producer_name": PERFRELAY_PRODUCER()'s name of the declaring program's
	 * object, else that program's name. Points into the scan. */
	const char *producer_name;
	/* Binary clients' schema frame payload (PERFRELAY_TYPE_SCHEMA): the decoder as JSON, or
	 * NULL (no decoder, or the description exceeds PRODUCERS_SCHEMA_MAX: counted). */
	char *schema;
	uint32_t schema_len;
	uint64_t generation; /* the scan's, for the hub's "schema sent" bookkeeping */
} ProducerType;

typedef struct ProducerScan {
	ProducerProg progs[PRODUCERS_MAX_PROGS];
	size_t n_progs;
	ProducerType types[PRODUCERS_MAX_TYPES];
	size_t n_types;
	unsigned bad_decls;         /* malformed or duplicate declarations, over all programs */
	unsigned refused;           /* declared types that got no decoder */
	unsigned schemas_too_large; /* decoders whose description does not fit a schema frame */
	uint64_t generation;        /* set when published (decoders.h), from 1 */
} ProducerScan;

/* Walks every loaded BPF program, keeps those whose maps include events_map_id and whose BTF
 * declares a producer (PERFRELAY_PRODUCER) or record types (PERFRELAY_RECORD), and builds a
 * decoder for each record type declared. Needs CAP_SYS_ADMIN. */
int producers_scan(uint32_t events_map_id, ProducerScan **ret);
ProducerScan *producers_scan_free(ProducerScan *s);

/* Whether program `fd` uses map map_id: 1 if it does, 0 if not, or a negative errno. */
int producers_prog_uses_map(int fd, uint32_t map_id);
/* The decoder of record type, or NULL. */
const ProducerType *producers_scan_find(const ProducerScan *s, uint16_t type);
/* Whether two scans found the same programs (then the newer one has nothing new). */
bool producers_scan_same(const ProducerScan *a, const ProducerScan *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(ProducerScan *, producers_scan_free);
