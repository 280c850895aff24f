/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's configuration: /etc/perfrelay/export.conf + export.conf.d/NAME.conf (INI), pure
 * parsing without I/O beyond reading the files, so it can be unit-tested without a server. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT_LIST_MAX 32 /* servers, types, units: a bound on every list the file may hold */

typedef struct ExportConfig {
	char *servers[EXPORT_LIST_MAX]; /* [NATS] Servers= */
	size_t n_servers;
	char *credentials_file;        /* [NATS] CredentialsFile=: a .creds file (LoadCredential=) */
	char *tls_ca;                  /* [NATS] TLSCA= */
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
	uint64_t max_in_flight;    /* [Export] MaxInFlight=: unacknowledged publishes */
	uint64_t queue_events;     /* [Export] QueueEvents=: events waiting for a publish slot */
	uint64_t ack_timeout_ms;   /* [Export] AckTimeoutMSec= */
	uint64_t max_retries;      /* [Export] MaxRetries=: republishes of one event before it is dropped */
	uint64_t drain_timeout_ms; /* [Export] DrainTimeoutMSec=: at exit */
	char *hostname;            /* [Export] Hostname=, default gethostname() */
	char *stats_file;          /* [Export] StatsFile= */
} ExportConfig;

int export_config_new(ExportConfig **ret);
ExportConfig *export_config_free(ExportConfig *c);

/* Parses one file's text into c (later keys win, list keys append; an empty value resets a
 * list). On a syntax error returns -EINVAL and, if ret_error, a message naming file and line. */
int export_config_parse_text(
	ExportConfig *c, const char *text, size_t size, const char *filename, char **ret_error);

/* Reads main_path (missing is fine) then dropin_dir/\*.conf in lexical order. */
int export_config_load(ExportConfig *c, const char *main_path, const char *dropin_dir, char **ret_error);
