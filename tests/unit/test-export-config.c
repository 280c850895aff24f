/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's configuration: defaults, every section, lists, and errors naming file:line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export-config.h"
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

int main(void) {
	ExportConfig *c = NULL;
	char *err = NULL;

	test_url_redact();

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
		     "MaxInFlight=2\nBatchEvents=10\nRequireTLS=yes\n",
		     &err) == 0);
	ASSERT(c->targets == (EXPORT_TARGET_NATS | EXPORT_TARGET_OTLP) && c->batch_bytes == 2048 &&
	       c->batch_delay_ms == 0);
	ASSERT(c->otlp_protocol == OTLP_PROTOCOL_JSON && c->n_otlp_headers == 1 &&
	       strcmp(c->otlp_headers[0], "X-Key: a, b") == 0);
	ASSERT(c->otlp_max_in_flight == 2 && c->otlp_batch_events == 10 && c->otlp_require_tls);
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
	return failures ? 1 : 0;
}
