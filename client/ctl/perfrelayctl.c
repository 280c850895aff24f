/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl: the command-line client of perfrelayd; `monitor` streams events from the event
 * socket (ctl-monitor.c); `status`, `stats`, `probes`, `clients` and `probe` ask the daemon over
 * D-Bus (ctl-bus.c, ctl-stats.c; docs/dbus.md). This file: options and dispatch; errors and the
 * shared argument parsers are in ctl-args.c. */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perfrelay-config.h"

#include "ctl/ctl.h"

static int verb_help(int argc, char *argv[]);

typedef struct Verb {
	const char *name;
	int (*run)(int argc, char *argv[]);
	const char *summary;
} Verb;

static const Verb verbs[] = {
	{ "monitor", verb_monitor, "Show events as they happen" },
	{ "query", verb_query, "Show the events of the daemon's history" },
	{ "status", verb_status, "Show the daemon's state, rates and loss (D-Bus)" },
	{ "stats", verb_stats, "Show every counter: producers, CPUs, readers, clients (D-Bus)" },
	{ "snapshot", verb_snapshot, "Show the flight recorder's latest events (root, D-Bus)" },
	{ "snapshots", verb_snapshots, "List the snapshots saved when units failed" },
	{ "capture", verb_capture, "Capture a unit's packets as pcapng (root, D-Bus)" },
	{ "top", verb_top, "Show the units using the most CPU (or another perf counter) per second (D-Bus)" },
	{ "producers", verb_producers, "List the producers, their record types and counters (D-Bus)" },
	{ "probes", verb_probes, "List the built-in probes (D-Bus)" },
	{ "clients", verb_clients, "List the socket subscribers (D-Bus)" },
	{ "tree", verb_tree, "Show the live processes as a forest with their exec ids (D-Bus)" },
	{ "probe", verb_probe, "probe enable|disable NAME: attach or detach a probe (root, D-Bus)" },
	{ "help", verb_help, "Show this help" },
};

static void help(void) {
	printf("%s [OPTIONS...] COMMAND ...\n\n"
	       "Query and watch perfrelayd.\n\n"
	       "Commands:\n",
	       program);
	for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
		printf("  %-12s %s\n", verbs[i].name, verbs[i].summary);
	printf("\nOptions:\n"
	       "  -h --help      Show this help\n"
	       "     --version   Show the version\n\n"
	       "'%s COMMAND --help' shows the options of a command.\n",
	       program);
}

static int verb_help(int argc, char *argv[]) {
	help();
	return 0;
}

int main(int argc, char *argv[]) {
	enum { ARG_VERSION = 0x100 };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "version", no_argument, NULL, ARG_VERSION },
						 {} };
	int opt;

	/* '+': options after the command belong to the command. */
	while ((opt = getopt_long(argc, argv, "+h", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return EXIT_SUCCESS;
		case ARG_VERSION:
			printf("perfrelayctl %s\n", PERFRELAY_VERSION_STRING);
			return EXIT_SUCCESS;
		default:
			return EXIT_FAILURE;
		}

	if (optind >= argc) {
		error_msg("missing command; see '%s --help'", program);
		return EXIT_FAILURE;
	}
	for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
		if (streq(argv[optind], verbs[i].name))
			return verbs[i].run(argc - optind, argv + optind) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

	error_msg("unknown command '%s'; see '%s --help'", argv[optind], program);
	return EXIT_FAILURE;
}
