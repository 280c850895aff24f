/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl probes and probe: the built-in probes (ListProbes(), SetProbeEnabled()). */
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
#include "json-util.h"
#include "time-util.h"

static void probes_help(void) {
	printf("%s probes [OPTIONS...]\n\n"
	       "List the built-in probes (D-Bus GetStats(), \"probes\"): name, state (attached,\n"
	       "or off and why), records emitted, records filtered in the kernel, runs of its\n"
	       "programs, their mean run time and their share of the CPUs since perfrelayd started.\n\n"
	       "     --no-legend   No header line (for scripts and shell completion)\n"
	       "  -h --help        Show this help\n",
	       program);
}

/* The daemon's state words (docs/dbus.md, "probes"), as the table shows them. */
static const char *state_text(const char *state) {
	static const char *const table[][2] = {
		{ "attached", "attached" },
		{ "unwanted", "lingering" }, /* nobody wants it: detached in a moment */
		{ "off-config", "off:Probes=" },
		{ "off-bus", "off:SetProbeEnabled" },
		{ "off-demand", "off:no-consumer" },
		{ "failed", "failed" },
	};

	for (size_t i = 0; i < ELEMENTSOF(table); i++)
		if (streq(state, table[i][0]))
			return table[i][1];
	return state;
}

static void probes_print_one(const char *name, json_object *p, uint64_t stats_usec, long n_cpus) {
	uint64_t attempts = 0, filtered = 0, runs = 0, run_ns = 0;
	json_object *state = NULL;
	char per_run[32] = "-", share[32] = "-";

	(void) juint(p, "attempts", &attempts);
	(void) juint(p, "filtered", &filtered);
	(void) juint(p, "runs", &runs);
	(void) juint(p, "run_ns", &run_ns);
	(void) json_object_object_get_ex(p, "state", &state);
	if (runs > 0)
		snprintf(per_run, sizeof(per_run), "%" PRIu64, run_ns / runs);
	if (stats_usec > 0 && n_cpus > 0)
		snprintf(
			share,
			sizeof(share),
			"%.3f",
			(double) run_ns / 10.0 / ((double) stats_usec * (double) n_cpus));
	printf("%-10s %-20s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %8s %8s\n",
	       name,
	       state_text(state ? json_object_get_string(state) : "?"),
	       attempts,
	       filtered,
	       runs,
	       per_run,
	       share);
}

int verb_probes(int argc, char *argv[]) {
	enum { ARG_NO_LEGEND = 0x100 };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "no-legend", no_argument, NULL, ARG_NO_LEGEND },
						 {} };
	_cleanup_(json_object_putp) json_object *stats = NULL;
	json_object *probes;
	uint64_t stats_usec = 0; /* how long the daemon has counted the probes' runs */
	bool legend = true;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			probes_help();
			return 0;
		case ARG_NO_LEGEND:
			legend = false;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("probes: unexpected argument '%s'", argv[optind]);
	r = bus_call_json("GetStats", &stats);
	if (r < 0)
		return r;
	if (!json_object_object_get_ex(stats, "probes", &probes) ||
	    !json_object_is_type(probes, json_type_object))
		return error_msg("GetStats() has no \"probes\" section (perfrelayd older than perfrelayctl?)");
	if (juint(probes, "run_stats_since_usec", &stats_usec) && stats_usec > 0)
		stats_usec = now_usec(CLOCK_MONOTONIC) - stats_usec; /* the daemon's clock: the same host */
	if (legend)
		printf("%-10s %-20s %12s %12s %12s %8s %8s\n",
		       "PROBE",
		       "STATE",
		       "EVENTS",
		       "FILTERED",
		       "RUNS",
		       "NS/RUN",
		       "CPU%");
	json_object_object_foreach(probes, name, p) if (json_object_is_type(p, json_type_object))
		probes_print_one(name, p, stats_usec, sysconf(_SC_NPROCESSORS_ONLN));
	return 0;
}

static void probe_help(void) {
	printf("%s probe enable|disable NAME\n\n"
	       "Attach or detach a built-in probe (D-Bus SetProbeEnabled(), root). The next reload\n"
	       "applies Probes= again. 'perfrelayctl probes' lists the names.\n\n"
	       "  -h --help   Show this help\n",
	       program);
}

int verb_probe(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	bool enable;
	int r;

	if (argc >= 2 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
		probe_help();
		return 0;
	}
	if (argc != 3 || (!streq(argv[1], "enable") && !streq(argv[1], "disable")))
		return error_msg("usage: %s probe enable|disable NAME", program);
	enable = streq(argv[1], "enable");
	r = bus_connect(&bus);
	if (r < 0)
		return r;
	return bus_call(bus, "SetProbeEnabled", NULL, "sb", argv[2], (int) enable);
}
