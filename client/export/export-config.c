/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's configuration (docs/export.md lists every key): its schema, read by the
 * daemon's INI parser (conf-parser.h), so both read files the same way and say the same errors. */
#include "export/export-config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/conf-parser.h"
#include "macro.h"

const char *const export_target_names[_EXPORT_TARGET_MAX] = {
#define EXPORT_TARGET_NAME(name) [EXPORT_TARGET_INDEX_##name] = #name,
	EXPORT_TARGETS(EXPORT_TARGET_NAME)
#undef EXPORT_TARGET_NAME
};

int export_config_new(ExportConfig **ret) {
	ExportConfig *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->servers[0] = strdup("nats://127.0.0.1:4222");
	c->n_servers = 1;
	c->stream = strdup("PERFRELAY");
	c->stream_subjects = strdup("perfrelay.>");
	c->subject_template = strdup("perfrelay.%h.%t");
	c->require_tls = EXPORT_TLS_OFF_LOOPBACK;
	c->otlp_require_tls = EXPORT_TLS_OFF_LOOPBACK;
	c->create_stream = true;
	c->replicas = 1;
	c->duplicate_window_sec = 120;
	c->targets = EXPORT_TARGET_NATS;
	c->batch_bytes = 64 * 1024;
	c->batch_delay_ms = 5;
	c->max_in_flight = 256;
	c->otlp_endpoint = strdup("http://127.0.0.1:4318");
	c->otlp_protocol = OTLP_PROTOCOL_PROTOBUF;
	c->otlp_max_in_flight = 16;
	c->otlp_batch_events = 2048;
	c->otlp_timeout_ms = 10000;
	c->file_max_bytes = 100 * 1024 * 1024;
	c->file_max_files = 5;
	c->journal_rate = 1000;
	c->journal_burst = 2000;
	c->queue_events = 65536;
	c->ack_timeout_ms = 5000;
	c->max_retries = 10;
	c->drain_timeout_ms = 10000;
	if (!c->servers[0] || !c->stream || !c->stream_subjects || !c->subject_template || !c->otlp_endpoint) {
		export_config_free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

static void list_clear(char **l, size_t *n) {
	for (size_t i = 0; i < *n; i++)
		free(l[i]);
	*n = 0;
}

ExportConfig *export_config_free(ExportConfig *c) {
	if (!c)
		return NULL;
	list_clear(c->servers, &c->n_servers);
	list_clear(c->types, &c->n_types);
	list_clear(c->units, &c->n_units);
	list_clear(c->containers, &c->n_containers);
	list_clear(c->ancestors, &c->n_ancestors);
	free(c->credentials_file);
	free(c->tls_ca);
	free(c->tls_cert);
	free(c->tls_key);
	free(c->tls_server_name);
	list_clear(c->otlp_headers, &c->n_otlp_headers);
	free(c->otlp_headers_file);
	free(c->otlp_endpoint);
	free(c->otlp_tls_ca);
	free(c->otlp_tls_cert);
	free(c->otlp_tls_key);
	free(c->file_path);
	free(c->stream);
	free(c->stream_subjects);
	free(c->subject_template);
	free(c->socket_path);
	free(c->hostname);
	free(c->stats_file);
	free(c->cursor_file);
	free(c);
	return NULL;
}

static int set_string(char **where, const char *v) {
	char *s = NULL;

	if (*v) {
		s = strdup(v);
		if (!s)
			return -ENOMEM;
	}
	free(*where);
	*where = s;
	return 0;
}

/* Words separated by spaces or commas are appended; an empty value resets the list. */
static int set_list(char **l, size_t *n, const char *v) {
	char buf[4096];
	char *save = NULL;

	if (!*v) {
		list_clear(l, n);
		return 0;
	}
	if (strlen(v) >= sizeof(buf))
		return -E2BIG;
	strcpy(buf, v);
	for (char *w = strtok_r(buf, " \t,", &save); w; w = strtok_r(NULL, " \t,", &save)) {
		if (*n >= EXPORT_LIST_MAX)
			return -E2BIG;
		l[*n] = strdup(w);
		if (!l[*n])
			return -ENOMEM;
		(*n)++;
	}
	return 0;
}

static int set_bool(bool *where, const char *v) {
	if (streq(v, "yes") || streq(v, "true") || streq(v, "1") || streq(v, "on"))
		*where = true;
	else if (streq(v, "no") || streq(v, "false") || streq(v, "0") || streq(v, "off"))
		*where = false;
	else
		return -EINVAL;
	return 0;
}

static int set_tls(int *where, const char *v) {
	bool b;
	int r = set_bool(&b, v);

	if (r < 0)
		return r;
	*where = b ? EXPORT_TLS_YES : EXPORT_TLS_NO;
	return 0;
}

static int set_u64(uint64_t *where, const char *v, uint64_t min) {
	char *end;
	unsigned long long x;

	if (!isdigit((unsigned char) *v))
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x < min)
		return -EINVAL;
	*where = x;
	return 0;
}

static int set_u64_range(uint64_t *where, const char *v, uint64_t min, uint64_t max) {
	uint64_t x;
	int r = set_u64(&x, v, min);

	if (r < 0)
		return r;
	if (x > max)
		return -EINVAL;
	*where = x;
	return 0;
}

static int set_targets(unsigned *where, const char *v) {
	char buf[256];
	char *save = NULL;
	unsigned t = 0;

	if (strlen(v) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, v);
	for (char *w = strtok_r(buf, " \t,", &save); w; w = strtok_r(NULL, " \t,", &save)) {
		size_t i = 0;

		while (i < _EXPORT_TARGET_MAX && !streq(w, export_target_names[i]))
			i++;
		if (i == _EXPORT_TARGET_MAX)
			return -EINVAL;
		t |= 1u << i;
	}
	if (t == 0)
		return -EINVAL;
	*where = t;
	return 0;
}

/* One "Name: value" header per Header= line (values may hold commas and spaces). */
static int add_header(ExportConfig *c, const char *v) {
	const char *colon = strchr(v, ':');

	if (!*v) {
		list_clear(c->otlp_headers, &c->n_otlp_headers);
		return 0;
	}
	if (!colon || colon == v || strpbrk(v, "\r\n"))
		return -EINVAL;
	if (c->n_otlp_headers >= EXPORT_LIST_MAX)
		return -E2BIG;
	c->otlp_headers[c->n_otlp_headers] = strdup(v);
	if (!c->otlp_headers[c->n_otlp_headers])
		return -ENOMEM;
	c->n_otlp_headers++;
	return 0;
}

static int set_key(ExportConfig *c, const char *section, const char *k, const char *v) {
	if (streq(section, "NATS")) {
		if (streq(k, "Servers")) {
			/* A new Servers= replaces the default instead of adding to it. */
			if (c->n_servers == 1 && streq(c->servers[0], "nats://127.0.0.1:4222"))
				list_clear(c->servers, &c->n_servers);
			return set_list(c->servers, &c->n_servers, v);
		}
		if (streq(k, "CredentialsFile"))
			return set_string(&c->credentials_file, v);
		if (streq(k, "TLSCA"))
			return set_string(&c->tls_ca, v);
		if (streq(k, "TLSCert"))
			return set_string(&c->tls_cert, v);
		if (streq(k, "TLSKey"))
			return set_string(&c->tls_key, v);
		if (streq(k, "TLSServerName"))
			return set_string(&c->tls_server_name, v);
		if (streq(k, "RequireTLS"))
			return set_tls(&c->require_tls, v);
	} else if (streq(section, "OTLP")) {
		if (streq(k, "Endpoint"))
			return *v && (startswith(v, "http://") || startswith(v, "https://")) ?
				set_string(&c->otlp_endpoint, v) :
				-EINVAL;
		if (streq(k, "Protocol")) {
			if (streq(v, "http/protobuf"))
				c->otlp_protocol = OTLP_PROTOCOL_PROTOBUF;
			else if (streq(v, "http/json"))
				c->otlp_protocol = OTLP_PROTOCOL_JSON;
			else
				return -EINVAL;
			return 0;
		}
		if (streq(k, "Compression")) {
			if (streq(v, "none"))
				c->otlp_compression = OTLP_COMPRESSION_NONE;
			else if (streq(v, "gzip"))
				c->otlp_compression = OTLP_COMPRESSION_GZIP;
			else
				return -EINVAL;
			return 0;
		}
		if (streq(k, "Header"))
			return add_header(c, v);
		if (streq(k, "TLSCA"))
			return set_string(&c->otlp_tls_ca, v);
		if (streq(k, "TLSCert"))
			return set_string(&c->otlp_tls_cert, v);
		if (streq(k, "TLSKey"))
			return set_string(&c->otlp_tls_key, v);
		if (streq(k, "HeadersFile"))
			return set_string(&c->otlp_headers_file, v);
		if (streq(k, "RequireTLS"))
			return set_tls(&c->otlp_require_tls, v);
		if (streq(k, "MaxInFlight"))
			return set_u64_range(&c->otlp_max_in_flight, v, 1, 64);
		if (streq(k, "BatchEvents"))
			return set_u64_range(&c->otlp_batch_events, v, 1, 65536);
		if (streq(k, "TimeoutMSec"))
			return set_u64(&c->otlp_timeout_ms, v, 1);
	} else if (streq(section, "File")) {
		if (streq(k, "Path"))
			return *v == '/' ? set_string(&c->file_path, v) : -EINVAL;
		if (streq(k, "MaxBytes"))
			return set_u64_range(&c->file_max_bytes, v, EXPORT_FILE_MAX_BYTES_MIN, UINT64_MAX);
		if (streq(k, "MaxFiles"))
			return set_u64_range(&c->file_max_files, v, 1, 1000);
	} else if (streq(section, "Journal")) {
		if (streq(k, "RateLimitPerSec"))
			return set_u64_range(&c->journal_rate, v, 1, 1000000);
		if (streq(k, "RateLimitBurst"))
			return set_u64_range(&c->journal_burst, v, 1, 1000000);
	} else if (streq(section, "Stream")) {
		if (streq(k, "Name"))
			return *v ? set_string(&c->stream, v) : -EINVAL;
		if (streq(k, "Subjects"))
			return *v ? set_string(&c->stream_subjects, v) : -EINVAL;
		if (streq(k, "ExportCreateStream"))
			return set_bool(&c->create_stream, v);
		if (streq(k, "MaxAgeSec"))
			return set_u64(&c->max_age_sec, v, 0);
		if (streq(k, "MaxBytes"))
			return set_u64(&c->max_bytes, v, 0);
		if (streq(k, "Replicas"))
			return set_u64(&c->replicas, v, 1);
		if (streq(k, "DuplicateWindowSec"))
			return set_u64(&c->duplicate_window_sec, v, 1);
	} else if (streq(section, "Export")) {
		if (streq(k, "Subject"))
			return *v ? set_string(&c->subject_template, v) : -EINVAL;
		if (streq(k, "Socket"))
			return set_string(&c->socket_path, v);
		if (streq(k, "Types"))
			return set_list(c->types, &c->n_types, v);
		if (streq(k, "Units"))
			return set_list(c->units, &c->n_units, v);
		if (streq(k, "Containers"))
			return set_list(c->containers, &c->n_containers, v);
		if (streq(k, "Ancestors"))
			return set_list(c->ancestors, &c->n_ancestors, v);
		if (streq(k, "Targets"))
			return set_targets(&c->targets, v);
		if (streq(k, "BatchBytes"))
			return set_u64_range(
				&c->batch_bytes, v, EXPORT_BATCH_BYTES_MIN, EXPORT_BATCH_BYTES_MAX);
		if (streq(k, "BatchDelayMSec"))
			return set_u64_range(&c->batch_delay_ms, v, 0, 10000);
		if (streq(k, "MaxInFlight"))
			return set_u64_range(&c->max_in_flight, v, 1, 65536);
		if (streq(k, "QueueEvents"))
			return set_u64(&c->queue_events, v, 1);
		if (streq(k, "AckTimeoutMSec"))
			return set_u64(&c->ack_timeout_ms, v, 1);
		if (streq(k, "MaxRetries"))
			return set_u64(&c->max_retries, v, 0);
		if (streq(k, "DrainTimeoutMSec"))
			return set_u64(&c->drain_timeout_ms, v, 0);
		if (streq(k, "Hostname"))
			return set_string(&c->hostname, v);
		if (streq(k, "StatsFile"))
			return set_string(&c->stats_file, v);
		if (streq(k, "Resume"))
			return set_bool(&c->resume, v);
		if (streq(k, "CursorFile"))
			return set_string(&c->cursor_file, v);
	}
	/* conf-parser.c refuses unknown sections before calling here. */
	return -ENOKEY;
}

static const char *const export_sections[] = { "NATS", "OTLP", "File", "Journal", "Stream", "Export" };

/* The schema's apply callback of conf-parser.h: the message names the file, line, key and value. */
static int apply_key(ConfParseState *st, void *userdata) {
	int r = set_key(userdata, st->section, st->key, st->value);

	switch (r) {
	case 0:
		return 0;
	case -ENOMEM:
		return r;
	case -ENOKEY:
		return conf_line_error(st, "unknown key in section [%s]", st->section);
	case -E2BIG:
		return conf_line_error(st, "too many list entries (at most %u)", EXPORT_LIST_MAX);
	default:
		return conf_line_error(st, "invalid value");
	}
}

static const ConfSchema export_schema = {
	.sections = export_sections,
	.n_sections = ELEMENTSOF(export_sections),
	.apply = apply_key,
};

int export_config_parse_text(
	ExportConfig *c, const char *text, size_t size, const char *filename, char **ret_error) {
	return conf_parse_text(&export_schema, c, text, size, filename, ret_error);
}

int export_config_load(ExportConfig *c, const char *main_path, const char *dropin_dir, char **ret_error) {
	return conf_parse_files(&export_schema, c, main_path, dropin_dir, EXPORT_CONFIG_FILE_MAX, ret_error);
}

bool export_url_host(const char *url, char *buf, size_t size) {
	const char *host = strstr(url, "://"), *end, *at;
	size_t n;

	host = host ? host + 3 : url;
	end = host + strcspn(host, "/?#");
	at = memrchr(host, '@', (size_t) (end - host));
	if (at)
		host = at + 1;
	if (*host == '[') {
		const char *close = memchr(host, ']', (size_t) (end - host));

		if (!close)
			return false;
		host++;
		end = close;
	} else {
		const char *colon = memchr(host, ':', (size_t) (end - host));

		if (colon)
			end = colon;
	}
	n = (size_t) (end - host);
	if (n == 0 || n >= size)
		return false;
	memcpy(buf, host, n);
	buf[n] = 0;
	return true;
}

bool export_url_is_loopback(const char *url) {
	char host[256];
	struct in_addr a4;
	struct in6_addr a6;

	if (!export_url_host(url, host, sizeof(host)))
		return false;
	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* A URL as an error message may show it: without its user information. */
static void url_shown(const char *url, char *buf, size_t size) {
	snprintf(buf, size, "%s", url);
	export_url_redact(buf);
}

/* NATS: TLS when anything asks for it; off loopback it must be asked for, or refused with
 * RequireTLS=no. nats.c checks a certificate's name only when told which name to expect, so a
 * name is always set: TLSServerName=, or the host every server URL names. */
static const char *check_nats_tls(ExportConfig *c, char *why, size_t size) {
	char host[256], first[256] = "";

	c->tls = c->tls_ca || c->tls_cert || c->require_tls == EXPORT_TLS_YES;
	for (size_t i = 0; i < c->n_servers; i++)
		if (startswith(c->servers[i], "tls://"))
			c->tls = true;
	for (size_t i = 0; i < c->n_servers; i++) {
		char shown[256];

		url_shown(c->servers[i], shown, sizeof(shown));
		if (!export_url_host(c->servers[i], host, sizeof(host))) {
			snprintf(why, size, "[NATS] Servers=%s: no host in the URL", shown);
			return why;
		}
		if (!c->tls && c->require_tls != EXPORT_TLS_NO && !export_url_is_loopback(c->servers[i])) {
			snprintf(
				why,
				size,
				"[NATS] Servers=%s is not on loopback: TLS is required there (TLSCA=, a tls:// "
				"URL or RequireTLS=yes), or say RequireTLS=no",
				shown);
			return why;
		}
		if (c->tls && !c->tls_server_name && first[0] && strcmp(first, host) != 0) {
			snprintf(
				why,
				size,
				"[NATS] Servers= name hosts %s and %s: TLSServerName= must say the name their "
				"certificates carry",
				first,
				host);
			return why;
		}
		if (!first[0])
			snprintf(first, sizeof(first), "%s", host);
	}
	if (c->tls && !c->tls_server_name && first[0]) {
		c->tls_server_name = strdup(first);
		if (!c->tls_server_name)
			return "out of memory";
	}
	return NULL;
}

int export_config_check(ExportConfig *c, char **ret_error) {
	char buf[512];
	const char *why = NULL;
	bool https = startswith(c->otlp_endpoint, "https://");

	if ((c->tls_cert != NULL) != (c->tls_key != NULL))
		why = "[NATS] TLSCert= and TLSKey= go together";
	else if ((c->otlp_tls_cert != NULL) != (c->otlp_tls_key != NULL))
		why = "[OTLP] TLSCert= and TLSKey= go together";
	else if ((c->targets & EXPORT_TARGET_OTLP) && c->otlp_require_tls == EXPORT_TLS_YES && !https)
		why = "[OTLP] RequireTLS=yes needs an https:// Endpoint=";
	else if (
		(c->targets & EXPORT_TARGET_OTLP) && c->otlp_require_tls == EXPORT_TLS_OFF_LOOPBACK &&
		!https && !export_url_is_loopback(c->otlp_endpoint)) {
		char shown[256];

		url_shown(c->otlp_endpoint, shown, sizeof(shown));
		snprintf(
			buf,
			sizeof(buf),
			"[OTLP] Endpoint=%s is not on loopback: TLS is required there (an https:// "
			"endpoint), or say RequireTLS=no",
			shown);
		why = buf;
	} else if ((c->targets & EXPORT_TARGET_FILE) && !c->file_path)
		why = "Targets=file needs [File] Path=";
	else if (c->resume && c->n_ancestors > 0)
		why = "[Export] Resume=yes cannot take Ancestors=: the history keeps no process lineage";
	else if (c->resume && c->n_containers > 0)
		why = "[Export] Resume=yes cannot take Containers=: the history keeps no containers";
	else if (c->resume && !c->cursor_file)
		why = "[Export] Resume=yes needs CursorFile= (or the unit's StateDirectory=, $STATE_DIRECTORY)";
	else if (c->targets & EXPORT_TARGET_NATS)
		why = check_nats_tls(c, buf, sizeof(buf));
	if (!why)
		return 0;
	if (ret_error)
		*ret_error = strdup(why);
	return -EINVAL;
}

static int resolve(char **path, const char *dir) {
	char *p;

	if (!*path || (*path)[0] == '/')
		return 0;
	if (asprintf(&p, "%s/%s", dir, *path) < 0)
		return -ENOMEM;
	free(*path);
	*path = p;
	return 0;
}

int export_config_resolve_credentials(ExportConfig *c, const char *dir) {
	char **paths[] = {
		&c->credentials_file,  &c->tls_ca,      &c->tls_cert,      &c->tls_key,
		&c->otlp_headers_file, &c->otlp_tls_ca, &c->otlp_tls_cert, &c->otlp_tls_key,
	};

	if (!dir || !*dir)
		return 0;
	for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
		int r = resolve(paths[i], dir);

		if (r < 0)
			return r;
	}
	return 0;
}

int export_config_load_headers(ExportConfig *c, char **ret_error) {
	_cleanup_free_ char *text = NULL;
	char *line, *next;
	size_t n = 0;
	unsigned lineno = 0;
	int r;

	if (!c->otlp_headers_file)
		return 0;
	r = conf_read_file(c->otlp_headers_file, EXPORT_HEADERS_FILE_MAX, &text, &n, ret_error);
	if (r == -ENOENT && ret_error &&
	    asprintf(ret_error, "[OTLP] HeadersFile=%s: %s", c->otlp_headers_file, strerror(ENOENT)) < 0)
		*ret_error = NULL;
	for (line = text; r == 0 && line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		lineno++;
		line[strcspn(line, "\r")] = 0;
		if (!*line || *line == '#')
			continue;
		r = add_header(c, line);
		if (r < 0 && ret_error &&
		    asprintf(
			    ret_error,
			    "[OTLP] HeadersFile=%s:%u: %s",
			    c->otlp_headers_file,
			    lineno,
			    r == -E2BIG ? "too many headers" : "not a \"Name: value\" header") < 0)
			*ret_error = NULL;
	}
	return r;
}

void export_url_redact(char *url) {
	char *host = strstr(url, "://"), *at, *end;

	host = host ? host + 3 : url;
	end = host + strcspn(host, "/?#");
	at = memrchr(host, '@', (size_t) (end - host));
	if (at)
		memmove(host, at + 1, strlen(at + 1) + 1);
}
