/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's configuration: defaults, every section, lists, and errors naming file:line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/export-config.h"
#include "macro.h"
#include "unit-test.h"

static int parse(ExportConfig *c, const char *text, char **err) {
	return export_config_parse_text(c, text, strlen(text), "export.conf", err);
}

/* A server URL's credentials never reach the world-readable stats file. */
static void test_url_redact(void) {
	static const char *const cases[][2] = {
		{ "nats://user:secret@host:4222", "nats://host:4222" },
		{ "tls://token@10.0.0.1:4222/x?y=1", "tls://10.0.0.1:4222/x?y=1" },
		{ "nats://a@b:c@host", "nats://host" },
		{ "nats://host:4222", "nats://host:4222" },
		{ "host:4222/p@q", "host:4222/p@q" },
		{ "", "" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char url[64];

		snprintf(url, sizeof(url), "%s", cases[i][0]);
		export_url_redact(url);
		ASSERT(strcmp(url, cases[i][1]) == 0);
	}
}

static ExportConfig *checked(const char *text, int expect, const char *message) {
	ExportConfig *c = NULL;
	char *err = NULL;
	int r;

	ASSERT(export_config_new(&c) == 0);
	ASSERT(parse(c, text, &err) == 0);
	r = export_config_check(c, &err);
	if (r != expect || (message && (!err || !strstr(err, message))))
		fprintf(stderr,
			"%s: check gave %d (%s), expected %d (%s)\n",
			text,
			r,
			err ?: "",
			expect,
			message ?: "");
	ASSERT(r == expect);
	ASSERT(!message || (err && strstr(err, message)));
	free(err);
	return c;
}

/* TLS is needed off loopback unless RequireTLS=no says otherwise, and a certificate's name is
 * always checked: nats.c checks none unless told which to expect. */
static void test_tls_rules(void) {
	static const char *const loopback[] = { "nats://127.0.0.1:4222",
						"nats://127.3.2.1",
						"localhost:4222",
						"nats://u:p@[::1]:4222",
						"http://LOCALHOST" };
	static const char *const remote[] = { "nats://10.0.0.1:4222",
					      "nats://n1",
					      "[fe80::1]:4222",
					      "nats://127.0.0.1.example.com",
					      "nats://127.0.0.1@evil:4222" };
	ExportConfig *c;
	char host[64];

	for (size_t i = 0; i < ELEMENTSOF(loopback); i++)
		ASSERT(export_url_is_loopback(loopback[i]));
	for (size_t i = 0; i < ELEMENTSOF(remote); i++)
		ASSERT(!export_url_is_loopback(remote[i]));
	ASSERT(export_url_host("tls://u:p@n1.example:4222/x", host, sizeof(host)) &&
	       strcmp(host, "n1.example") == 0);
	ASSERT(export_url_host("[::1]:4222", host, sizeof(host)) && strcmp(host, "::1") == 0);
	ASSERT(!export_url_host("nats://:4222", host, sizeof(host)));

	/* Loopback: plain text is fine; a remote server needs TLS or RequireTLS=no. */
	c = checked("[NATS]\nServers=nats://127.0.0.1:4222\n", 0, NULL);
	ASSERT(!c->tls && !c->tls_server_name);
	export_config_free(c);
	c = checked("[NATS]\nServers=nats://u:secret@n1:4222\n", -EINVAL, "nats://n1:4222 is not on loopback");
	export_config_free(c);
	c = checked("[NATS]\nServers=nats://n1:4222\nRequireTLS=no\n", 0, NULL);
	ASSERT(!c->tls);
	export_config_free(c);
	/* TLS by the scheme, TLSCA= or RequireTLS=yes; the name is the servers' host. */
	c = checked("[NATS]\nServers=tls://n1.example:4222\n", 0, NULL);
	ASSERT(c->tls && strcmp(c->tls_server_name, "n1.example") == 0);
	export_config_free(c);
	c = checked("[NATS]\nServers=nats://127.0.0.1:4222\nTLSCA=ca.pem\n", 0, NULL);
	ASSERT(c->tls && strcmp(c->tls_server_name, "127.0.0.1") == 0);
	export_config_free(c);
	c = checked("[NATS]\nServers=nats://n1:1 nats://n1:2\nRequireTLS=yes\n", 0, NULL);
	ASSERT(c->tls && strcmp(c->tls_server_name, "n1") == 0);
	export_config_free(c);
	/* Servers of different names need the one their certificates share. */
	c = checked("[NATS]\nServers=tls://n1:4222 tls://n2:4222\n", -EINVAL, "TLSServerName=");
	export_config_free(c);
	c = checked("[NATS]\nServers=tls://n1:4222 tls://n2:4222\nTLSServerName=nats.example\n", 0, NULL);
	ASSERT(c->tls && strcmp(c->tls_server_name, "nats.example") == 0);
	export_config_free(c);
	/* NATS is not checked when it is not a target. */
	c = checked("[NATS]\nServers=nats://n1:4222\n[Export]\nTargets=otlp\n", 0, NULL);
	export_config_free(c);

	/* OTLP: http:// only on loopback unless RequireTLS=no. */
	c = checked(
		"[Export]\nTargets=otlp\n[OTLP]\nEndpoint=http://collector:4318\n",
		-EINVAL,
		"Endpoint=http://collector:4318 is not on loopback");
	export_config_free(c);
	c = checked("[Export]\nTargets=otlp\n[OTLP]\nEndpoint=http://collector:4318\nRequireTLS=no\n", 0, NULL);
	export_config_free(c);
	c = checked("[Export]\nTargets=otlp\n[OTLP]\nEndpoint=https://collector:4318\n", 0, NULL);
	export_config_free(c);
	c = checked(
		"[Export]\nTargets=otlp\n[OTLP]\nEndpoint=http://[::1]:4318\nRequireTLS=yes\n",
		-EINVAL,
		"needs an https://");
	export_config_free(c);
}

/* Secrets come from files LoadCredential= makes; HeadersFile= holds Header= lines. */
static void test_credentials(void) {
	char dir[] = "/tmp/perfrelay-test-credsXXXXXX", path[128];
	ExportConfig *c = NULL;
	char *err = NULL;
	FILE *f;

	ASSERT(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/otlp-headers", dir);
	f = fopen(path, "w");
	ASSERT(f != NULL);
	fputs("# the collector's key\nAuthorization: Bearer s3cret\r\n\nX-Tenant: a, b\n", f);
	fclose(f);

	ASSERT(export_config_new(&c) == 0);
	ASSERT(parse(c,
		     "[NATS]\nCredentialsFile=nats.creds\nTLSCA=/etc/ssl/ca.pem\nTLSCert=c.pem\nTLSKey=c.key\n"
		     "[OTLP]\nHeader=X-Plain: 1\nHeadersFile=otlp-headers\nTLSKey=o.key\nTLSCert=o.pem\n",
		     &err) == 0);
	ASSERT(export_config_resolve_credentials(c, NULL) == 0 && strcmp(c->tls_key, "c.key") == 0);
	ASSERT(export_config_resolve_credentials(c, dir) == 0);
	snprintf(path, sizeof(path), "%s/nats.creds", dir);
	ASSERT(strcmp(c->credentials_file, path) == 0);
	ASSERT(strcmp(c->tls_ca, "/etc/ssl/ca.pem") == 0);
	snprintf(path, sizeof(path), "%s/c.key", dir);
	ASSERT(strcmp(c->tls_key, path) == 0);
	snprintf(path, sizeof(path), "%s/o.key", dir);
	ASSERT(strcmp(c->otlp_tls_key, path) == 0);
	ASSERT(export_config_load_headers(c, &err) == 0);
	ASSERT(c->n_otlp_headers == 3 && strcmp(c->otlp_headers[1], "Authorization: Bearer s3cret") == 0 &&
	       strcmp(c->otlp_headers[2], "X-Tenant: a, b") == 0);
	export_config_free(c);

	/* A bad line is named by file and line; a missing file by its name. */
	snprintf(path, sizeof(path), "%s/otlp-headers", dir);
	f = fopen(path, "w");
	ASSERT(f != NULL);
	fputs("A: 1\n\nno colon here\n", f);
	fclose(f);
	ASSERT(export_config_new(&c) == 0);
	ASSERT(parse(c, "[OTLP]\nHeadersFile=otlp-headers\n", &err) == 0);
	ASSERT(export_config_resolve_credentials(c, dir) == 0);
	ASSERT(export_config_load_headers(c, &err) == -EINVAL && err && strstr(err, "otlp-headers:3:"));
	free(err);
	err = NULL;
	ASSERT(unlink(path) == 0);
	ASSERT(export_config_load_headers(c, &err) == -ENOENT && err && strstr(err, path));
	free(err);
	export_config_free(c);
	ASSERT(rmdir(dir) == 0);
}

/* Compression=, the file and journal targets: their keys, defaults and bounds. */
static void test_host_targets(void) {
	ExportConfig *c = NULL;
	char *err = NULL;

	ASSERT(export_config_new(&c) == 0);
	ASSERT(c->otlp_compression == OTLP_COMPRESSION_NONE && !c->file_path &&
	       c->file_max_bytes == 104857600 && c->file_max_files == 5 && c->journal_rate == 1000 &&
	       c->journal_burst == 2000);
	ASSERT(parse(c, "[Export]\nTargets=file journal\n", &err) == 0);
	ASSERT(c->targets == (EXPORT_TARGET_FILE | EXPORT_TARGET_JOURNAL));
	ASSERT(export_config_check(c, &err) == -EINVAL && err && strstr(err, "Path="));
	free(err);
	err = NULL;
	ASSERT(parse(c,
		     "[File]\nPath=/var/log/x.json\nMaxBytes=262144\nMaxFiles=1\n"
		     "[Journal]\nRateLimitPerSec=5\nRateLimitBurst=7\n[OTLP]\nCompression=gzip\n",
		     &err) == 0);
	ASSERT(streq(c->file_path, "/var/log/x.json") && c->file_max_bytes == 262144 && c->file_max_files == 1);
	ASSERT(c->journal_rate == 5 && c->journal_burst == 7 && c->otlp_compression == OTLP_COMPRESSION_GZIP);
	ASSERT(export_config_check(c, &err) == 0);
	/* Bounds: a relative path, a file smaller than the longest line, no file, gzip's cousins. */
	ASSERT(parse(c, "[File]\nPath=x.json\n", NULL) == -EINVAL);
	ASSERT(parse(c, "[File]\nMaxBytes=1000\n", NULL) == -EINVAL);
	ASSERT(parse(c, "[File]\nMaxFiles=0\n", NULL) == -EINVAL);
	ASSERT(parse(c, "[Journal]\nRateLimitPerSec=0\n", NULL) == -EINVAL);
	ASSERT(parse(c, "[OTLP]\nCompression=zstd\n", NULL) == -EINVAL);
	ASSERT(parse(c, "[Export]\nTargets=nats otlp file journal\n", NULL) == 0);
	ASSERT(c->targets == (1u << _EXPORT_TARGET_MAX) - 1);
	export_config_free(c);
}

/* Resume=: a cursor file it needs, no Ancestors= it can take. */
static void test_resume(void) {
	ExportConfig *c = NULL;
	char *err = NULL;

	ASSERT(export_config_new(&c) == 0);
	ASSERT(!c->resume && !c->cursor_file);
	ASSERT(parse(c, "[Export]\nResume=yes\n", &err) == 0 && c->resume);
	ASSERT(export_config_check(c, &err) == -EINVAL && err && strstr(err, "CursorFile="));
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nCursorFile=/var/lib/x/cursor\nAncestors=sshd\n", &err) == 0);
	ASSERT(streq(c->cursor_file, "/var/lib/x/cursor"));
	ASSERT(export_config_check(c, &err) == -EINVAL && err && strstr(err, "Ancestors="));
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nAncestors=\n", &err) == 0 && export_config_check(c, &err) == 0);
	/* Nor Containers= (the history keeps no containers); without Resume= they are a list. */
	ASSERT(parse(c, "[Export]\nContainers=web nginx:1.27\n", &err) == 0 && c->n_containers == 2);
	ASSERT(streq(c->containers[0], "web") && streq(c->containers[1], "nginx:1.27"));
	ASSERT(export_config_check(c, &err) == -EINVAL && err && strstr(err, "Containers="));
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nContainers=\n", &err) == 0 && c->n_containers == 0);
	ASSERT(parse(c, "[Export]\nResume=maybe\n", NULL) == -EINVAL);
	export_config_free(c);
}

int main(void) {
	ExportConfig *c = NULL;
	char *err = NULL;

	test_resume();
	test_url_redact();
	test_tls_rules();
	test_credentials();

	ASSERT(export_config_new(&c) == 0);
	ASSERT(c->n_servers == 1 && strcmp(c->servers[0], "nats://127.0.0.1:4222") == 0);
	ASSERT(strcmp(c->stream, "PERFRELAY") == 0 && c->create_stream && c->replicas == 1);
	ASSERT(strcmp(c->subject_template, "perfrelay.%h.%t") == 0);

	ASSERT(parse(c,
		     "# comment\n[NATS]\nServers=nats://a:1, nats://b:2\nServers=nats://c:3\nCredentialsFile=nats.creds\n"
		     "[Stream]\nName=FLEET\nExportCreateStream=no\nReplicas=3\nDuplicateWindowSec=60\n"
		     "[Export]\nTypes=exec open\nUnits=sshd.service\nMaxInFlight=10\nQueueEvents=20\nSubject=x.%t\n"
		     "Ancestors=sshd cron.service\nAncestors=0123456789abcdef\n",
		     &err) == 0);
	ASSERT(c->n_servers == 3 && strcmp(c->servers[2], "nats://c:3") == 0);
	ASSERT(strcmp(c->credentials_file, "nats.creds") == 0);
	ASSERT(strcmp(c->stream, "FLEET") == 0 && !c->create_stream && c->replicas == 3);
	ASSERT(c->duplicate_window_sec == 60);
	ASSERT(c->n_types == 2 && strcmp(c->types[1], "open") == 0 && c->n_units == 1);
	ASSERT(c->max_in_flight == 10 && c->queue_events == 20 && strcmp(c->subject_template, "x.%t") == 0);
	ASSERT(c->n_ancestors == 3 && strcmp(c->ancestors[0], "sshd") == 0 &&
	       strcmp(c->ancestors[2], "0123456789abcdef") == 0);
	ASSERT(parse(c, "[Export]\nAncestors=sshd\nAncestors=\n", &err) == 0 && c->n_ancestors == 0);
	ASSERT(parse(c, "[Export]\nTypes=\n", &err) == 0 && c->n_types == 0);

	ASSERT(parse(c, "[Export]\nMaxInFlight=0\n", &err) == -EINVAL);
	ASSERT(err && strcmp(err, "export.conf:2: MaxInFlight=0: invalid value") == 0);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nNoSuchKey=1\n", &err) == -EINVAL && err &&
	       strstr(err, ":2: NoSuchKey=1: unknown key in section [Export]"));
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Nope]\nA=1\n", &err) == -EINVAL && err && strstr(err, "unknown section"));
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Stream]\nExportCreateStream=maybe\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Stream]\nName=\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "junk\n", &err) == -EINVAL && err && strstr(err, "export.conf:1:"));
	free(err);
	err = NULL;

	/* Targets, batches and OTLP. */
	ASSERT(c->targets == EXPORT_TARGET_NATS && c->batch_bytes == 65536 && c->batch_delay_ms == 5);
	ASSERT(strcmp(c->otlp_endpoint, "http://127.0.0.1:4318") == 0 &&
	       c->otlp_protocol == OTLP_PROTOCOL_PROTOBUF);
	ASSERT(parse(c,
		     "[Export]\nTargets=otlp, nats\nBatchBytes=2048\nBatchDelayMSec=0\n"
		     "[OTLP]\nEndpoint=https://collector:4318/\nProtocol=http/json\nHeader=X-Key: a, b\n"
		     "MaxInFlight=2\nBatchEvents=10\nRequireTLS=yes\n[NATS]\nRequireTLS=no\n",
		     &err) == 0);
	ASSERT(c->targets == (EXPORT_TARGET_NATS | EXPORT_TARGET_OTLP) && c->batch_bytes == 2048 &&
	       c->batch_delay_ms == 0);
	ASSERT(c->otlp_protocol == OTLP_PROTOCOL_JSON && c->n_otlp_headers == 1 &&
	       strcmp(c->otlp_headers[0], "X-Key: a, b") == 0);
	ASSERT(c->otlp_max_in_flight == 2 && c->otlp_batch_events == 10 &&
	       c->otlp_require_tls == EXPORT_TLS_YES);
	ASSERT(export_config_check(c, &err) == 0);
	ASSERT(parse(c, "[OTLP]\nEndpoint=http://plain:4318\n", &err) == 0);
	ASSERT(export_config_check(c, &err) == -EINVAL && err && strstr(err, "RequireTLS"));
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nTargets=kafka\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nBatchBytes=100\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[OTLP]\nProtocol=grpc\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[OTLP]\nEndpoint=ftp://x\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[OTLP]\nHeader=no colon\n", &err) == -EINVAL);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[NATS]\nTLSCert=/c.pem\n", &err) == 0);
	ASSERT(export_config_check(c, &err) == -EINVAL && err && strstr(err, "TLSKey"));
	free(err);
	export_config_free(c);
	test_host_targets();
	return failures ? 1 : 0;
}
