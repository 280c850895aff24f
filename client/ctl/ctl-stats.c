/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl stats: every counter of the daemon (D-Bus GetStats()) as tables, or as JSON. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "common/bus-json.h"
#include "ctl/ctl.h"
#include "ctl/format.h"
#include "json-util.h"

static uint64_t juint_or0(json_object *o, const char *key) {
	uint64_t v = 0;

	return juint(o, key, &v) ? v : 0;
}

static void stats_print_producer(json_object *p, const char *name) {
	printf("%-8s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
	       " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 "\n",
	       name,
	       juint_or0(p, "filtered"),
	       juint_or0(p, "attempts"),
	       juint_or0(p, "received"),
	       juint_or0(p, "failures_serving"),
	       juint_or0(p, "failures_downtime"),
	       juint_or0(p, "crash_lost"),
	       juint_or0(p, "malformed"),
	       juint_or0(p, "seq_gaps"),
	       juint_or0(p, "received_session"));
}

static void stats_print(json_object *o) {
	json_object *list, *total, *clients;

	printf("%-8s %12s %12s %12s %10s %10s %10s %10s %10s %10s\n",
	       "PRODUCER",
	       "FILTERED",
	       "ATTEMPTS",
	       "RECEIVED",
	       "FAILED",
	       "FAILED-DOWN",
	       "CRASH-LOST",
	       "MALFORMED",
	       "SEQ-GAPS",
	       "SESSION");
	if (json_object_object_get_ex(o, "producers", &list) && json_object_is_type(list, json_type_array))
		for (size_t i = 0; i < json_object_array_length(list); i++) {
			json_object *p = json_object_array_get_idx(list, i);
			char id[16];

			snprintf(id, sizeof(id), "%" PRIu64, juint_or0(p, "id"));
			stats_print_producer(p, id);
		}
	if (json_object_object_get_ex(o, "total", &total))
		stats_print_producer(total, "total");
	printf("\n%-6s %12s %12s %10s %10s %12s\n", "CPU", "RECEIVED", "RING-LOST", "MALFORMED", "CORRUPT", "BYTES");
	if (json_object_object_get_ex(o, "cpus", &list) && json_object_is_type(list, json_type_array))
		for (size_t i = 0; i < json_object_array_length(list); i++) {
			json_object *c = json_object_array_get_idx(list, i);

			printf("%-6" PRIu64 " %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %10" PRIu64
			       " %12" PRIu64 "\n",
			       juint_or0(c, "cpu"),
			       juint_or0(c, "received"),
			       juint_or0(c, "lost"),
			       juint_or0(c, "malformed"),
			       juint_or0(c, "corrupt"),
			       juint_or0(c, "bytes"));
		}
	if (json_object_object_get_ex(o, "clients", &clients))
		printf("\nClients: %" PRIu64 " connected; %" PRIu64 " events offered, %" PRIu64
		       " delivered, %" PRIu64 " dropped\n",
		       juint_or0(clients, "connected"),
		       juint_or0(clients, "offered"),
		       juint_or0(clients, "delivered"),
		       juint_or0(clients, "dropped"));
}

static void stats_help(void) {
	printf("%s stats [OPTIONS...]\n\n"
	       "Show every counter of perfrelayd (D-Bus GetStats()): per producer the accounting\n"
	       "hits = filtered + attempts and attempts = received + malformed + failures + crash_lost,\n"
	       "per CPU ring, per reader and for the clients. See docs/dbus.md for what each number\n"
	       "means.\n\n"
	       "  -j --json   One JSON object, the GetStats() dictionary as is\n"
	       "  -h --help   Show this help\n",
	       program);
}

int verb_stats(int argc, char *argv[]) {
	_cleanup_(json_object_putp) json_object *o = NULL;
	bool json;
	int r;

	r = parse_json_options(argc, argv, "stats", stats_help, &json);
	if (r <= 0)
		return r;
	r = bus_call_json("GetStats", &o);
	if (r < 0)
		return r;
	if (json)
		puts(json_object_to_json_string_ext(
			o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	else
		stats_print(o);
	return 0;
}
