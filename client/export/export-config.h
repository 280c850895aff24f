/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's configuration: /etc/perfrelay/export.conf + export.conf.d/NAME.conf (INI), pure
 * parsing without I/O beyond reading the files, so it can be unit-tested without a server. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT_LIST_MAX        32 /* servers, types, units: a bound on every list the file may hold */
#define EXPORT_CONFIG_FILE_MAX (1u << 20) /* bytes of one configuration file */

/* [Export] Targets=: every target perfrelay-export has, in the order the stats file lists
 * them (export/target.h): a new target is its folder and one line here. */
#define EXPORT_TARGETS(X) \
	X(nats)           \
	X(otlp)           \
	X(file)           \
	X(journal)

enum {
#define EXPORT_TARGET_INDEX(name) EXPORT_TARGET_INDEX_##name,
	EXPORT_TARGETS(EXPORT_TARGET_INDEX)
#undef EXPORT_TARGET_INDEX
		_EXPORT_TARGET_MAX,
};
#define EXPORT_TARGET_BIT(name) (1u << EXPORT_TARGET_INDEX_##name)
#define EXPORT_TARGET_NATS      EXPORT_TARGET_BIT(nats)
#define EXPORT_TARGET_OTLP      EXPORT_TARGET_BIT(otlp)
#define EXPORT_TARGET_FILE      EXPORT_TARGET_BIT(file)
#define EXPORT_TARGET_JOURNAL   EXPORT_TARGET_BIT(journal)

/* The name Targets= gives target i (EXPORT_TARGET_INDEX_*). */
extern const char *const export_target_names[_EXPORT_TARGET_MAX];

typedef enum OtlpProtocol {
	OTLP_PROTOCOL_PROTOBUF, /* http/protobuf */
	OTLP_PROTOCOL_JSON,     /* http/json */
} OtlpProtocol;

typedef enum OtlpCompression {
	OTLP_COMPRESSION_NONE,
	OTLP_COMPRESSION_GZIP, /* Content-Encoding: gzip */
} OtlpCompression;

/* Bounds of the batch keys: a message never exceeds nats-server's default max_payload (1 MiB). */
#define EXPORT_BATCH_BYTES_MIN 1024u
#define EXPORT_BATCH_BYTES_MAX (1024u * 1024u)

/* RequireTLS=: unset, TLS is required for a server off loopback; "no" allows plain text to any
 * server, "yes" requires TLS even on loopback. */
#define EXPORT_TLS_OFF_LOOPBACK (-1)
#define EXPORT_TLS_NO           0
#define EXPORT_TLS_YES          1

#define EXPORT_FILE_MAX_BYTES_MIN (256u * 1024u) /* [File] MaxBytes=: above the longest line (96 KiB) */
#define EXPORT_HEADERS_FILE_MAX   (64u * 1024u)  /* bytes of a HeadersFile= */

typedef struct ExportConfig {
	char *servers[EXPORT_LIST_MAX]; /* [NATS] Servers= */
	size_t n_servers;
	char *credentials_file;        /* [NATS] CredentialsFile=: a .creds file (LoadCredential=) */
	char *tls_ca;                  /* [NATS] TLSCA= */
	char *tls_cert, *tls_key;      /* [NATS] TLSCert=, TLSKey=: a client certificate */
	int require_tls;               /* [NATS] RequireTLS=: EXPORT_TLS_* */
	char *tls_server_name;         /* [NATS] TLSServerName=; export_config_check() sets the default */
	bool tls;                      /* TLS to the servers: set by export_config_check() */
	char *stream;                  /* [Stream] Name= */
	char *stream_subjects;         /* [Stream] Subjects=: what a created stream captures */
	bool create_stream;            /* [Stream] ExportCreateStream= */
	uint64_t max_age_sec;          /* [Stream] MaxAgeSec=, 0 = unlimited */
	uint64_t max_bytes;            /* [Stream] MaxBytes=, 0 = unlimited */
	uint64_t replicas;             /* [Stream] Replicas= */
	uint64_t duplicate_window_sec; /* [Stream] DuplicateWindowSec= */
	char *subject_template;        /* [Export] Subject=: %h host, %t type name */
	char *socket_path;             /* [Export] Socket= */
	char *types[EXPORT_LIST_MAX];  /* [Export] Types= (the socket's filter) */
	size_t n_types;
	char *units[EXPORT_LIST_MAX]; /* [Export] Units= */
	size_t n_units;
	char *containers[EXPORT_LIST_MAX]; /* [Export] Containers=: names, images or ids (docs/containers.md) */
	size_t n_containers;
	/* [Export] Ancestors=: the socket's "ancestor" filter, split as perfrelayctl monitor
	 * --ancestor does (exec id, unit, task name). */
	char *ancestors[EXPORT_LIST_MAX];
	size_t n_ancestors;
	unsigned targets;          /* [Export] Targets=: EXPORT_TARGET_* */
	uint64_t batch_bytes;      /* [Export] BatchBytes=: a NATS message's records, at most */
	uint64_t batch_delay_ms;   /* [Export] BatchDelayMSec=: how long a batch may wait to fill */
	uint64_t max_in_flight;    /* [Export] MaxInFlight=: unacknowledged messages (batches) */
	uint64_t queue_events;     /* [Export] QueueEvents=: events waiting for a publish slot */
	uint64_t ack_timeout_ms;   /* [Export] AckTimeoutMSec= */
	uint64_t max_retries;      /* [Export] MaxRetries=: republishes of one event before it is dropped */
	uint64_t drain_timeout_ms; /* [Export] DrainTimeoutMSec=: at exit */
	char *hostname;            /* [Export] Hostname=, default gethostname() */
	char *stats_file;          /* [Export] StatsFile= */
	/* [Export] Resume=: events come from the daemon's history, after the cursor of the last
	 * one every target acknowledged, kept in CursorFile= (docs/export.md, "Resuming"). */
	bool resume;
	char *cursor_file; /* [Export] CursorFile=; export_config_check() sets the default */

	char *otlp_endpoint;                 /* [OTLP] Endpoint=: base URL; /v1/logs is added */
	OtlpProtocol otlp_protocol;          /* [OTLP] Protocol= */
	OtlpCompression otlp_compression;    /* [OTLP] Compression= */
	char *otlp_headers[EXPORT_LIST_MAX]; /* [OTLP] Header=: "Name: value", one per key */
	size_t n_otlp_headers;
	char *otlp_headers_file; /* [OTLP] HeadersFile=: more Header= lines, kept out of the 0644 file */
	char *otlp_tls_ca, *otlp_tls_cert, *otlp_tls_key; /* [OTLP] TLSCA=, TLSCert=, TLSKey= */
	int otlp_require_tls;                             /* [OTLP] RequireTLS=: EXPORT_TLS_* */
	uint64_t otlp_max_in_flight;                      /* [OTLP] MaxInFlight=: requests at once */
	uint64_t otlp_batch_events;                       /* [OTLP] BatchEvents=: log records per request */
	uint64_t otlp_timeout_ms;                         /* [OTLP] TimeoutMSec=: one request */

	char *file_path;         /* [File] Path= */
	uint64_t file_max_bytes; /* [File] MaxBytes=: a file is rotated before it grows past this */
	uint64_t file_max_files; /* [File] MaxFiles=: the file and its rotated ones, at most */

	uint64_t journal_rate;  /* [Journal] RateLimitPerSec=: entries, the excess dropped */
	uint64_t journal_burst; /* [Journal] RateLimitBurst= */
} ExportConfig;

/* Checks what needs several keys together and settles what follows from them (whether NATS uses
 * TLS, the name the servers' certificates must carry); on error returns -EINVAL and a message
 * naming the keys at fault. */
int export_config_check(ExportConfig *c, char **ret_error);

/* A relative CredentialsFile=, HeadersFile=, TLSCA=, TLSCert= or TLSKey= names a credential:
 * systemd's LoadCredential= puts it in dir ($CREDENTIALS_DIRECTORY), readable by this service
 * only. dir NULL leaves the names as they are. */
int export_config_resolve_credentials(ExportConfig *c, const char *dir);

/* Adds the "Name: value" lines of HeadersFile= (if set) to the OTLP headers: secrets such as an
 * API key belong there, not in the world-readable export.conf. Errors name the file and line. */
int export_config_load_headers(ExportConfig *c, char **ret_error);

/* The host of a URL ("scheme://user@host:port/path", "[v6]:port", "host:port") into buf; false
 * if it does not fit or is empty. */
bool export_url_host(const char *url, char *buf, size_t size);

/* Whether a URL's host is this machine's loopback: localhost, 127.0.0.0/8 or ::1. */
bool export_url_is_loopback(const char *url);

int export_config_new(ExportConfig **ret);
ExportConfig *export_config_free(ExportConfig *c);

/* Parses one file's text into c (later keys win, list keys append; an empty value resets a
 * list). On a syntax error returns -EINVAL and, if ret_error, a message naming file and line. */
int export_config_parse_text(
	ExportConfig *c, const char *text, size_t size, const char *filename, char **ret_error);

/* Removes the user information ("user:password@") of a server URL in place, for the world-readable
 * stats file and messages: nats.c's connected URL keeps what Servers= said. */
void export_url_redact(char *url);

/* Reads main_path (missing is fine) then dropin_dir/\*.conf in lexical order. */
int export_config_load(ExportConfig *c, const char *main_path, const char *dropin_dir, char **ret_error);
