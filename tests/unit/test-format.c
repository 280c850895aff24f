/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl monitor's event line (client/ctl/format.c): each type's columns and details, escapes
 * of control bytes (aligned by what they print), and lines that are not events. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl/format.h"

#include "unit-test.h"

/* The one line format_event() writes for `line`, in a static buffer; NULL if it failed. */
static const char *format(const char *line, int *ret) {
	static char out[4096];
	json_tokener *tok = json_tokener_new();
	FILE *f;

	memset(out, 0, sizeof(out));
	f = fmemopen(out, sizeof(out), "w");
	if (!tok || !f)
		abort();
	*ret = format_event(f, tok, line, strlen(line), 0);
	fclose(f);
	json_tokener_free(tok);
	return out;
}

static void check(const char *line, const char *want) {
	int r;
	const char *got = format(line, &r);

	ASSERT(r == 0);
	if (strcmp(got, want) != 0) {
		fprintf(stderr, "for %s\n got: %s want: %s", line, got, want);
		failures++;
	}
}

int main(void) {
	int r;

	/* Stamps are boot time plus the offset given (0 here), shown in local time: UTC. */
	setenv("TZ", "UTC", 1);
	tzset();

	check("{\"type\":\"exec\",\"ts\":3723004000000,\"pid\":42,\"uid\":1000,\"comm\":\"cat\","
	      "\"filename\":\"/bin/cat\",\"argv\":[\"cat\",\"a b\",\"x\"],\"argv_truncated\":true}",
	      "01:02:03.004 exec         42   1000 cat             /bin/cat \"a b\" x ...\n");
	check("{\"type\":\"exit\",\"ts\":3723004000000,\"pid\":42,\"uid\":0,\"comm\":\"sleep\",\"signal\":9,"
	      "\"runtime_ns\":1500000}",
	      "01:02:03.004 exit         42      0 sleep           signal KILL, runtime 1.5ms\n");
	/* A control byte in comm is escaped, and the column stays aligned by what is printed. */
	check("{\"type\":\"open\",\"ts\":3723004000000,\"pid\":7,\"uid\":0,\"comm\":\"a\\u001bb\",\"path\":\"/etc/x y\","
	      "\"flags\":577,\"result\":-2}",
	      "01:02:03.004 open          7      0 a\\x1bb          \"/etc/x y\" O_WRONLY|O_CREAT|O_TRUNC = -ENOENT\n");
	check("{\"type\":\"connect\",\"ts\":3723004000000,\"pid\":7,\"uid\":0,\"comm\":\"curl\","
	      "\"family_name\":\"inet6\",\"address\":\"::1\",\"port\":80,\"result\":0}",
	      "01:02:03.004 connect       7      0 curl            [::1]:80 = 0\n");
	check("{\"type\":\"fork\",\"ts\":3723004000000,\"parent_pid\":1,\"uid\":0,\"comm\":\"sh\",\"child_pid\":5,"
	      "\"child_tgid\":4}",
	      "01:02:03.004 fork          1      0 sh              thread 5 of 4\n");
	/* A third-party record decoded from BTF: its producer and fields as key=value. */
	check("{\"type\":\"example\",\"ts\":3723004000000,\"cpu\":0,\"seq\":3,\"producer\":300,"
	      "\"producer_name\":\"example_producer\",\"u8v\":203,\"color\":\"EXAMPLE_BLUE\",\"point\":{\"x\":6},"
	      "\"values\":[3,4]}",
	      "01:02:03.004 example       -      - -               [example_producer] u8v=203 color=\"EXAMPLE_BLUE\" "
	      "point={\"x\":6} values=[3,4]\n");
	/* A type newer than the program: the line as the daemon sent it. */
	check("{\"type\":\"future\",\"ts\":3723004000000,\"x\":1}",
	      "01:02:03.004 future        -      - -               {\"type\":\"future\",\"ts\":3723004000000,\"x\":1}\n");

	/* A lost notice has no stamp: it is about now. */
	{
		const char *got = format("{\"type\":\"lost\",\"count\":5}", &r);

		ASSERT(r == 0 && strlen(got) > 12 &&
		       strcmp(got + 12, " lost          -      - -               count 5\n") == 0);
	}

	/* Not an event: refused, nothing written. */
	ASSERT(strcmp(format("not json", &r), "") == 0 && r == -EBADMSG);
	ASSERT(strcmp(format("{\"no\":\"type\"}", &r), "") == 0 && r == -EBADMSG);

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return EXIT_FAILURE;
	}
	printf("test-format: all passed\n");
	return EXIT_SUCCESS;
}
