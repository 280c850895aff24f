/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Third-party record types described by their producer's BTF: finding the declarations, turning
 * one record struct into a bounded, flat decoder description, and decoding record bytes with it
 * (a typed field iterator, and JSON fields built on it). Pure: BTF in, plain data out; the BTF is
 * untrusted (whoever loaded the program wrote it), so every walk is bounded and refusals name
 * their reason. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct btf;

/* Bounds on what one producer's BTF may make us build. A record type exceeding any of them
 * gets no decoder (its records stay "unknown" events) and the refusal is counted. */
#define BTFREC_MAX_DEPTH   8u            /* nested structs/arrays below the record struct */
#define BTFREC_MAX_FIELDS  512u          /* flat decoder steps: leaves + struct/array brackets */
#define BTFREC_MAX_ARRAY   256u          /* elements of one non-char array */
#define BTFREC_MAX_NAME    63u           /* field, enumerator and type names: C identifiers */
#define BTFREC_MAX_ENUMS   1024u         /* enumerators over the whole record type */
#define BTFREC_MAX_RESOLVE 16u           /* typedef/const/volatile links followed per member */
#define BTFREC_JSON_MAX    (60u * 1024u) /* worst-case JSON of one record's fields */
#define BTFREC_MAX_DECLS   64u           /* record declarations taken from one producer's BTF */

/* The declaration tags a producer puts on its record struct (see docs/producers.md). */
#define BTFREC_TAG_TYPE          "perfrelay.type="
#define BTFREC_TAG_NAME          "perfrelay.name="
#define BTFREC_TAG_PRODUCER      "perfrelay.producer="
#define BTFREC_TAG_PRODUCER_NAME "perfrelay.producer_name="

typedef enum BtfRecKind {
	BTFREC_UINT,         /* value.u; 1, 2, 4 or 8 bytes, also bool and plain char */
	BTFREC_INT,          /* value.i */
	BTFREC_ENUM,         /* value.i (value.u for unsigned enums) and enum_name (NULL if none matches) */
	BTFREC_STRING,       /* char array with a NUL: bytes/len without the NUL */
	BTFREC_BYTES,        /* char array without a NUL, or a member we do not interpret */
	BTFREC_STRUCT_BEGIN, /* a nested struct: its fields follow, up to the matching END */
	BTFREC_STRUCT_END,
	BTFREC_ARRAY_BEGIN, /* an array: its elements (name NULL) follow, up to the matching END */
	BTFREC_ARRAY_END,
	_BTFREC_KIND_MAX,
} BtfRecKind;
const char *btfrec_kind_to_string(BtfRecKind k);

/* One decoded field, as the iterator returns it. Pointers point into the record or the BtfRec. */
typedef struct BtfRecValue {
	BtfRecKind kind;
	const char *name; /* NULL for array elements and END steps */
	unsigned depth;   /* 0 for members of the record struct */
	uint32_t offset;  /* from the start of the record (header included) */
	uint32_t size;    /* bytes of the field in the record */
	bool is_signed;   /* ENUM: value.i is meaningful, else value.u */
	union {
		uint64_t u;
		int64_t i;
	} value;
	const char *enum_name;
	const uint8_t *bytes; /* STRING / BYTES */
	uint32_t len;
} BtfRecValue;

typedef struct BtfRec BtfRec;

/* Why a record type was refused a decoder. */
typedef enum BtfRecError {
	BTFREC_OK = 0,
	BTFREC_BAD_TYPE,  /* type id missing or not a struct, or a dangling reference */
	BTFREC_NO_HEADER, /* first member is not a struct perfrelay_hdr at offset 0 */
	BTFREC_TOO_DEEP,
	BTFREC_TOO_MANY_FIELDS,
	BTFREC_ARRAY_TOO_LARGE,
	BTFREC_OUT_OF_BOUNDS, /* a member beyond its struct, or the record beyond a perf record */
	BTFREC_BAD_NAME,      /* a name that is not a C identifier of at most BTFREC_MAX_NAME bytes */
	BTFREC_RESERVED_NAME, /* a record type named like a built-in type or a line of the daemon's */
	BTFREC_UNSUPPORTED,   /* bitfields, or integers of odd widths */
	BTFREC_OUTPUT_TOO_LARGE,
	_BTFREC_ERROR_MAX,
} BtfRecError;
const char *btfrec_error_to_string(BtfRecError e);

/* Builds the decoder for struct type_id of btf, published as record type `type` named `name`
 * (a C identifier; NULL takes the struct's name). On success *ret owns a BtfRec independent of
 * btf. On failure returns -EINVAL (or -ENOMEM) and, for -EINVAL, sets *ret_error. */
int btfrec_build(
	const struct btf *btf,
	uint32_t type_id,
	uint16_t type,
	const char *name,
	BtfRec **ret,
	BtfRecError *ret_error);
BtfRec *btfrec_free(BtfRec *r);
static inline void btfrec_freep(BtfRec **r) {
	btfrec_free(*r);
}

const char *btfrec_name(const BtfRec *r);
uint16_t btfrec_type(const BtfRec *r);
uint32_t btfrec_size(const BtfRec *r); /* sizeof the record struct, header included */
unsigned btfrec_n_steps(const BtfRec *r);

/* The description of step i (0 <= i < btfrec_n_steps()) without a record: kind, name, depth,
 * offset and size (STRING steps are reported as BYTES-sized char arrays with kind STRING). */
void btfrec_describe(const BtfRec *r, unsigned i, BtfRecValue *ret);

/* Decodes step i of rec, which must hold at least btfrec_size(r) bytes (callers check
 * size >= btfrec_size(r) once per record). */
void btfrec_get(const BtfRec *r, const void *rec, unsigned i, BtfRecValue *ret);

/* The enumerators of ENUM step i (0 for other steps), and enumerator k of them: its value
 * (sign-extended for signed enums) and name. */
unsigned btfrec_n_enums(const BtfRec *r, unsigned i);
void btfrec_enum(const BtfRec *r, unsigned i, unsigned k, uint64_t *ret_value, const char **ret_name);

/* The step of a top-level integer, enum or string field called name, or -ENOENT. */
int btfrec_find_field(const BtfRec *r, const char *name);

/* A record declaration found in BTF. */
typedef struct BtfRecDecl {
	uint32_t type_id;               /* the struct */
	uint32_t tag_target;            /* what the tags name: the struct or an anchor variable */
	uint16_t type;                  /* perfrelay record type from the tag */
	char name[BTFREC_MAX_NAME + 1]; /* from perfrelay.name=, else the struct's name */
} BtfRecDecl;

/* Collects up to max record declarations (structs, or PERFRELAY_RECORD()'s anchor variables
 * pointing to structs, tagged perfrelay.type=N with N >=
 * PERFRELAY_TYPE_THIRD_PARTY_MIN) from btf. Malformed tags are skipped and counted in
 * *ret_bad (may be NULL). Returns the number found. */
size_t btfrec_find_decls(const struct btf *btf, BtfRecDecl *decls, size_t max, unsigned *ret_bad);
/* Whether the BTF's type section is 4-byte aligned, as its u32 fields are read (libbpf's
 * accessors and ours). The kernel refuses an unaligned one, but libbpf 1.1 parses it: check
 * before using a BTF that did not come from the kernel's checks, and refuse it when false. */
bool btfrec_btf_aligned(const struct btf *btf);

/* PERFRELAY_PRODUCER()'s declaration in btf: 1 with the producer id (a third-party id) and its
 * name (a C identifier) filled in, 0 if btf has none, -EBADMSG if the declaration is malformed
 * (its tags disagree, the id is out of range or the name not an identifier). The first one wins. */
int btfrec_find_producer(const struct btf *btf, uint32_t *ret_id, char ret_name[static BTFREC_MAX_NAME + 1]);
