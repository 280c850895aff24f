/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl clients: the daemon's subscribers (ListClients()). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "perfrelay-config.h"

#include "macro.h"
#include "common/bus-json.h"
#include "ctl/ctl.h"
#include "ctl/format.h"
#include "time-util.h"

typedef struct ClientRow {
	uint64_t id, sent, dropped, queued;
	uint32_t uid, pid;
	char *filter;
} ClientRow;

static int client_row_compare(const void *a, const void *b) {
	const ClientRow *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static void clients_help(void) {
	printf("%s clients [OPTIONS...]\n\n"
	       "List the socket subscribers (D-Bus ListClients()): id, uid, pid, events sent, dropped\n"
	       "and queued, and the filter. Root sees every client, anyone else only their own\n"
	       "uid's (docs/security.md).\n\n"
	       "  -h --help   Show this help\n",
	       program);
}

int verb_clients(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_free_ ClientRow *rows = NULL;
	size_t n = 0;
	int r;

	r = parse_help_option(argc, argv, "clients", clients_help);
	if (r <= 0)
		return r;
	r = bus_connect(&bus);
	if (r >= 0)
		r = bus_call(bus, "ListClients", &reply, NULL);
	if (r < 0)
		return r;
	r = sd_bus_message_enter_container(reply, 'a', "(tuusttt)");
	for (;;) {
		ClientRow row;
		const char *filter;
		ClientRow *a;

		if (r >= 0)
			r = sd_bus_message_read(
				reply,
				"(tuusttt)",
				&row.id,
				&row.uid,
				&row.pid,
				&filter,
				&row.sent,
				&row.dropped,
				&row.queued);
		if (r <= 0)
			break;
		a = realloc(rows, sizeof(*rows) * (n + 1));
		if (!a)
			return error_errno(-ENOMEM, "Failed to allocate");
		rows = a;
		row.filter = (char *) filter; /* valid while reply lives */
		rows[n++] = row;
	}
	if (r < 0)
		return error_errno(r, "Failed to parse the reply of ListClients");
	qsort(rows, n, sizeof(*rows), client_row_compare);
	printf("%6s %7s %8s %10s %8s %10s %s\n", "ID", "UID", "PID", "SENT", "DROPPED", "QUEUED", "FILTER");
	for (size_t i = 0; i < n; i++) {
		printf("%6" PRIu64 " %7" PRIu32 " %8" PRIu32 " %10" PRIu64 " %8" PRIu64 " %10" PRIu64 " ",
		       rows[i].id,
		       rows[i].uid,
		       rows[i].pid,
		       rows[i].sent,
		       rows[i].dropped,
		       rows[i].queued);
		format_escaped(stdout, rows[i].filter, false);
		fputc('\n', stdout);
	}
	return 0;
}
