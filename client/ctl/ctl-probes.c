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
#include "time-util.h"

static void probes_help(void) {
	printf("%s probes [OPTIONS...]\n\n"
	       "List the built-in probes (D-Bus ListProbes()): name, state and events emitted.\n\n"
	       "     --no-legend   No header line (for scripts and shell completion)\n"
	       "  -h --help        Show this help\n",
	       program);
}

int verb_probes(int argc, char *argv[]) {
	enum { ARG_NO_LEGEND = 0x100 };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "no-legend", no_argument, NULL, ARG_NO_LEGEND },
						 {} };
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	bool legend = true;
	const char *name;
	uint64_t events;
	int enabled, opt, r;

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
	r = bus_connect(&bus);
	if (r >= 0)
		r = bus_call(bus, "ListProbes", &reply, NULL);
	if (r < 0)
		return r;
	if (legend)
		printf("%-10s %-9s %s\n", "PROBE", "STATE", "EVENTS");
	r = sd_bus_message_enter_container(reply, 'a', "(sbt)");
	while (r >= 0 && (r = sd_bus_message_read(reply, "(sbt)", &name, &enabled, &events)) > 0)
		printf("%-10s %-9s %" PRIu64 "\n", name, enabled ? "enabled" : "disabled", events);
	if (r < 0)
		return error_errno(r, "Failed to parse the reply of ListProbes");
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
