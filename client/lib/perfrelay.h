/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libperfrelay: subscribe to perfrelayd's event socket and read its events, as JSON lines or as
 * binary records (docs/protocol.md is the wire contract, docs/client.md the guide).
 *
 * Conventions: functions that can fail return an int, >= 0 on success and a negative errno on
 * failure; output parameters are only written on success. The library has no global state and
 * never logs, prints, allocates per event or installs signal handlers. A client may be used by
 * one thread at a time; different clients are independent. */
#ifndef PERFRELAY_PERFRELAY_H
#define PERFRELAY_PERFRELAY_H

#include <stddef.h>
#include <stdint.h>

/* Installed beside this header as <perfrelay/event.h>; a quoted include finds it there first. */
#include "event.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type of the record that reports events the daemon dropped for this client (binary
 * format); its payload is one native-endian uint64_t count. */
#ifndef PERFRELAY_TYPE_LOST
#define PERFRELAY_TYPE_LOST 0x7fffu
#endif
#ifndef PERFRELAY_TYPE_SCHEMA
#define PERFRELAY_TYPE_SCHEMA 0x7ffeu
#endif
#ifndef PERFRELAY_TYPE_UNIT
#define PERFRELAY_TYPE_UNIT 0x7ffdu
#endif
#ifndef PERFRELAY_TYPE_CURSOR
#define PERFRELAY_TYPE_CURSOR 0x7ffcu
#define PERFRELAY_CURSOR_MAX  96u
#endif

/* perfrelay_subscription.flags */
/* Binary format: the daemon sends each record's systemd unit (a unit frame before every record
 * with a cgroup id whose unit it knows); perfrelay_record_unit() returns it. JSON lines carry
 * "unit" anyway. */
#define PERFRELAY_SUBSCRIBE_UNITS               0x1u
/* Read the events from the socket stream, not from a shared ring. By default the library asks
 * the daemon for its shared path (docs/shared-ring.md): the events of all clients with the same
 * subscription are written once into memory they map read-only, each reads at its own pace,
 * and the socket only wakes it. The daemon falls back to the stream when it cannot share; the
 * events, lost notices and results are the same either way. */
#define PERFRELAY_SUBSCRIBE_STREAM              0x2u
/* With ancestor_*: an event whose lineage the daemon cannot walk to its end (an ancestor its
 * process table no longer holds) matches too, rather than silently not (the request's
 * "ancestor": {"incomplete": true}, docs/protocol.md). For consumers that must fail closed. */
#define PERFRELAY_SUBSCRIBE_ANCESTOR_INCOMPLETE 0x4u

/* perfrelay_history.flags */
/* Each event line carries its "cursor" (docs/history.md): the place to resume after. */
#define PERFRELAY_HISTORY_CURSORS   0x1u
/* The stream ends where the history ends (a query), instead of following it. */
#define PERFRELAY_HISTORY_NO_FOLLOW 0x2u

/* A subscription served from the daemon's history (docs/history.md): events from after a
 * cursor, from a time, or from the history's end, then what it records next (JSON lines, or
 * binary records with perfrelay_record_cursor()). The daemon's
 * HistoryTypes= bound what it holds. since_ns and until_ns are CLOCK_REALTIME nanoseconds, 0
 * when not given; after_cursor (an event's "cursor") and since_ns exclude each other. */
struct perfrelay_history {
	const char *after_cursor;
	uint64_t since_ns;
	uint64_t until_ns;
	uint64_t flags;       /* PERFRELAY_HISTORY_*; other bits must be zero */
	uint64_t reserved[4]; /* must be zero */
};

/* Used when perfrelay_connect() gets no path and $PERFRELAY_SOCKET is unset or empty. */
#define PERFRELAY_SOCKET_DEFAULT "/run/perfrelay/events.sock"

/* The longest JSON line the library accepts, '\n' included (the daemon's encoder bound). */
#define PERFRELAY_LINE_MAX (96u * 1024u)

/* How long perfrelay_connect() waits for the daemon's hello line. Long enough for a socket-
 * activated daemon to load and attach its probes first. */
#define PERFRELAY_HELLO_TIMEOUT_MS 30000

typedef struct perfrelay_client perfrelay_client;

enum perfrelay_format {
	PERFRELAY_FORMAT_JSON = 0,   /* one JSON object per line: perfrelay_next_json() */
	PERFRELAY_FORMAT_BINARY = 1, /* raw records: perfrelay_next_record() */
};

enum perfrelay_overflow {
	PERFRELAY_OVERFLOW_DROP = 0,       /* lose this client's events while its queue is full (counted) */
	PERFRELAY_OVERFLOW_DISCONNECT = 1, /* be disconnected instead (JSON: reads fail with -ENOBUFS) */
};

/* What to receive. Zero-initialize it (`struct perfrelay_subscription sub = {};`) and set what
 * you need: an empty list does not filter. Within one list the entries are alternatives; the
 * lists must all match. The arrays are only read during perfrelay_connect(). */
struct perfrelay_subscription {
	const char *const *types; /* type names ("exec", "open", ...) or decimal type ids ("32768") */
	size_t n_types;
	const uint32_t *pids;
	size_t n_pids;
	const uint32_t *uids;
	size_t n_uids;
	const char *const *comms; /* exact task names, at most 15 bytes */
	size_t n_comms;
	const char *const *units; /* systemd units, e.g. "sshd.service" */
	size_t n_units;
	enum perfrelay_format format;
	enum perfrelay_overflow on_overflow;
	uint64_t flags; /* PERFRELAY_SUBSCRIBE_*; other bits must be zero */
	/* Only events of processes that descend from a process with one of these task names, exec
	 * ids (16 hex digits, as events carry them) or units (the request's "ancestor",
	 * docs/protocol.md); any entry of the three may match. Taken from reserved[]: a program
	 * built before has them zero, so no such filter. */
	const char *const *ancestor_comms;
	size_t n_ancestor_comms;
	const char *const *ancestor_exec_ids;
	size_t n_ancestor_exec_ids;
	const char *const *ancestor_units;
	size_t n_ancestor_units;
	/* Taken from reserved[]: the history (NULL: the live stream; never the shared path). */
	union {
		const struct perfrelay_history *history;
		uint64_t reserved[1]; /* room for new fields without an ABI break */
	};
};

/* The daemon's hello, valid while the client lives. */
struct perfrelay_hello {
	unsigned protocol;   /* socket protocol version (1) */
	unsigned schema;     /* event schema version (docs/schema/) */
	uint64_t client_id;  /* the daemon's id for this connection (D-Bus ListClients) */
	const char *version; /* perfrelayd's version string */
	enum perfrelay_format format;
};

/* Allocates an unconnected client. Returns 0 or -ENOMEM. */
int perfrelay_client_new(perfrelay_client **ret);

/* Connects c to the daemon, sends the subscription (NULL: everything, JSON format) and waits
 * for the hello line, at most PERFRELAY_HELLO_TIMEOUT_MS. socket_path NULL means
 * $PERFRELAY_SOCKET, or PERFRELAY_SOCKET_DEFAULT. A client connects once: a second call
 * returns -EISCONN, even after a failure (make a new client to retry).
 *
 * Errors: -EINVAL bad arguments; -ENAMETOOLONG path too long for a Unix socket; the errno of
 * socket()/connect() (-ENOENT, -ECONNREFUSED, -EACCES, ...); -ETIMEDOUT no hello in time;
 * -EINTR a signal interrupted the wait for it;
 * -ECONNRESET the daemon closed the connection without a word; -EBADMSG, -EPROTO or
 * -EPROTONOSUPPORT an answer that is not a hello of protocol 1. When the daemon refuses the
 * request with an error line, its code is mapped (bad-request and too-deep: -EINVAL,
 * too-large: -E2BIG, timeout: -ETIMEDOUT, too-many-clients: -EUSERS, anything else: -EPROTO)
 * and its message is available from perfrelay_client_error(). */
int perfrelay_connect(perfrelay_client *c, const char *socket_path, const struct perfrelay_subscription *sub);

/* The next event line of a JSON-format client, without its '\n' but NUL-terminated, in *line
 * and *len; the memory is the client's and valid until the next call on c. Lost-event
 * notifications arrive as {"type":"lost","count":N} lines. The daemon's goodbye and error
 * lines are not returned as events but end the stream.
 *
 * timeout_ms: < 0 waits as long as it takes, 0 only takes what is buffered or readable now,
 * > 0 waits at most that long. Returns 1 with a line, 0 on timeout, or a negative errno:
 * -EINTR a signal interrupted the wait (call again); -ESHUTDOWN the daemon said goodbye;
 * -ECONNRESET the connection closed; -ENOBUFS the daemon disconnected this client because it
 * fell behind (on_overflow disconnect); -EMSGSIZE a line longer than PERFRELAY_LINE_MAX;
 * -EBADMSG the stream ended inside a line; -EINVAL the client is in binary format;
 * -ENOTCONN not connected. Except -EINTR and 0, every failure is final: later calls return
 * the same error. */
int perfrelay_next_json(perfrelay_client *c, const char **line, size_t *len, int timeout_ms);

/* The next record of a binary-format client: *hdr points at the record header (aligned),
 * *payload at the bytes after it, *payload_size is hdr->size - sizeof(*hdr). The memory is the
 * client's and valid until the next call on c. A record of type PERFRELAY_TYPE_LOST reports
 * dropped events; its payload is a uint64_t count (0 in a notice of records lost before they
 * reached the daemon, whose JSON description follows the count: docs/protocol.md). Frames are validated: the length must
 * cover at least the header, at most PERFRELAY_RECORD_MAX bytes, equal hdr->size (for a
 * PERFRELAY_TYPE_PACKET record: hdr->size + cap_len, the packet's bytes being part of the
 * payload), and the magic must be PERFRELAY_MAGIC; otherwise -EBADMSG. Records of types this library does
 * not know are returned as they are: check hdr->type and hdr->version before casting. timeout_ms and the
 * other results are as for perfrelay_next_json() (-EINVAL for a JSON-format client), except that the daemon
 * sends no goodbye or error in binary format: the end of the stream, for whatever reason, is -ECONNRESET. */
int perfrelay_next_record(
	perfrelay_client *c,
	const struct perfrelay_hdr **hdr,
	const void **payload,
	size_t *payload_size,
	int timeout_ms);

/* Only events in one of these containers (the request's "container": a name, an image, or an id
 * of 12 hex digits or more; docs/containers.md), for the next perfrelay_connect() of c; n == 0
 * clears them. A function rather than a field: perfrelay_subscription has no room left. The
 * strings are copied. Returns 0, -EINVAL (c NULL, names NULL with n > 0, more than 64, c already
 * connected) or -ENOMEM. */
#define PERFRELAY_CONTAINERS_MAX 64u
int perfrelay_client_set_containers(perfrelay_client *c, const char *const *names, size_t n);

/* The systemd unit of the record perfrelay_next_record() returned last, if the client
 * subscribed with PERFRELAY_SUBSCRIBE_UNITS and the daemon knew the unit of the record's cgroup;
 * else NULL. Unit frames (PERFRELAY_TYPE_UNIT) are the library's: perfrelay_next_record() takes
 * them and never returns them. Valid until the next perfrelay_next_record() on c. */
const char *perfrelay_record_unit(const perfrelay_client *c);

/* The history cursor of the record perfrelay_next_record() returned last (docs/history.md,
 * "Cursors"), if the subscription is served from the history with PERFRELAY_HISTORY_CURSORS;
 * else NULL. Cursor frames (PERFRELAY_TYPE_CURSOR) are the library's, like unit frames. Valid
 * until the next perfrelay_next_record() on c. */
const char *perfrelay_record_cursor(const perfrelay_client *c);

/* The connected socket, for poll()/epoll (POLLIN). Events may already be buffered in the
 * client when the socket is not readable, so after a wakeup call perfrelay_next_json() or
 * perfrelay_next_record() with timeout 0 until it returns 0, then poll again. Do not read
 * from or close the fd yourself. Returns the fd or -ENOTCONN. */
int perfrelay_fd(const perfrelay_client *c);

/* The daemon's hello, or NULL if c is not connected. */
const struct perfrelay_hello *perfrelay_client_hello(const perfrelay_client *c);

/* The daemon's explanation of the last failure: the message of its error line, or the reason
 * of its goodbye. NULL if the daemon gave none (or c is NULL). Valid until c is closed. */
const char *perfrelay_client_error(const perfrelay_client *c);

/* The socket path perfrelay_connect() used (after resolving NULL), or NULL before it was
 * called. Handy for error messages. */
const char *perfrelay_client_socket_path(const perfrelay_client *c);

/* Closes the connection and frees c. Accepts NULL; returns NULL. */
perfrelay_client *perfrelay_close(perfrelay_client *c);

/* ---- Third-party records with named fields (binary format) ----
 * A third-party producer that declares its record types (PERFRELAY_RECORD, docs/producers.md)
 * has them decoded from its BTF. A JSON client gets named fields in each line; a binary client
 * gets the raw records, and the daemon sends a schema frame (PERFRELAY_TYPE_SCHEMA) before the
 * first record of such a type, which this library keeps (it is not returned by
 * perfrelay_next_record()). With it, perfrelay_record_field() gives a binary client the same
 * fields and values a JSON client sees. */

enum perfrelay_field_kind {
	PERFRELAY_FIELD_UINT,         /* value.u */
	PERFRELAY_FIELD_INT,          /* value.i */
	PERFRELAY_FIELD_ENUM,         /* value.i if is_signed, else value.u; enum_name (or NULL) */
	PERFRELAY_FIELD_STRING,       /* a char array holding a NUL: bytes, len without the NUL */
	PERFRELAY_FIELD_BYTES,        /* a char array without a NUL: bytes, len */
	PERFRELAY_FIELD_STRUCT_BEGIN, /* a nested struct: its fields follow, up to the STRUCT_END */
	PERFRELAY_FIELD_STRUCT_END,
	PERFRELAY_FIELD_ARRAY_BEGIN, /* an array: its elements (name NULL) follow, up to ARRAY_END */
	PERFRELAY_FIELD_ARRAY_END,
};

struct perfrelay_field {
	const char *name; /* NULL for array elements and the END kinds */
	enum perfrelay_field_kind kind;
	unsigned depth;  /* 0 for members of the record struct */
	uint32_t offset; /* from the start of the record (header included) */
	uint32_t size;   /* bytes of the field */
	int is_signed;
	union {
		uint64_t u;
		int64_t i;
	} value;
	const char *enum_name;
	const void *bytes; /* STRING, BYTES: into the record */
	size_t len;
};

/* The name a third-party record type was declared with (the JSON "type"), and its producer's
 * name (the JSON "producer_name"), as the daemon's schema frame said; NULL if it sent none for
 * that type. Valid until the next perfrelay_next_record() on c. */
const char *perfrelay_record_type_name(const perfrelay_client *c, uint16_t type);
const char *perfrelay_record_producer_name(const perfrelay_client *c, uint16_t type);

/* The fields of a third-party record hdr (as perfrelay_next_record() returned it), one per call:
 * set *iter to 0 first. Returns 1 and fills *f, 0 after the last field, -ENOENT if the daemon
 * sent no schema for hdr->type, -EBADMSG if the record is shorter than its declaration, or
 * -EINVAL. Pointers in *f point into the record or into c, valid until the next
 * perfrelay_next_record() on c. */
int perfrelay_record_field(
	const perfrelay_client *c, const struct perfrelay_hdr *hdr, unsigned *iter, struct perfrelay_field *f);

#ifdef __cplusplus
}
#endif

#endif
