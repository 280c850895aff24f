/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's configuration: defaults, every section, lists, and errors naming file:line. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "export-config.h"
#include "unit-test.h"

static int parse(ExportConfig *c, const char *text, char **err) {
	return export_config_parse_text(c, text, strlen(text), "export.conf", err);
}

int main(void) {
	ExportConfig *c = NULL;
	char *err = NULL;

	ASSERT(export_config_new(&c) == 0);
	ASSERT(c->n_servers == 1 && strcmp(c->servers[0], "nats://127.0.0.1:4222") == 0);
	ASSERT(strcmp(c->stream, "PERFRELAY") == 0 && c->create_stream && c->replicas == 1);
	ASSERT(strcmp(c->subject_template, "perfrelay.%h.%t") == 0);

	ASSERT(parse(c,
		     "# comment\n[NATS]\nServers=nats://a:1, nats://b:2\nServers=nats://c:3\nCredentialsFile=nats.creds\n"
		     "[Stream]\nName=FLEET\nExportCreateStream=no\nReplicas=3\nDuplicateWindowSec=60\n"
		     "[Export]\nTypes=exec open\nUnits=sshd.service\nMaxInFlight=10\nQueueEvents=20\nSubject=x.%t\n",
		     &err) == 0);
	ASSERT(c->n_servers == 3 && strcmp(c->servers[2], "nats://c:3") == 0);
	ASSERT(strcmp(c->credentials_file, "nats.creds") == 0);
	ASSERT(strcmp(c->stream, "FLEET") == 0 && !c->create_stream && c->replicas == 3);
	ASSERT(c->duplicate_window_sec == 60);
	ASSERT(c->n_types == 2 && strcmp(c->types[1], "open") == 0 && c->n_units == 1);
	ASSERT(c->max_in_flight == 10 && c->queue_events == 20 && strcmp(c->subject_template, "x.%t") == 0);
	ASSERT(parse(c, "[Export]\nTypes=\n", &err) == 0 && c->n_types == 0);

	ASSERT(parse(c, "[Export]\nMaxInFlight=0\n", &err) == -EINVAL);
	ASSERT(err && strcmp(err, "export.conf:2: invalid value") == 0);
	free(err);
	err = NULL;
	ASSERT(parse(c, "[Export]\nNoSuchKey=1\n", &err) == -EINVAL && err && strstr(err, ":2: unknown key"));
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
	export_config_free(c);
	return failures ? 1 : 0;
}
