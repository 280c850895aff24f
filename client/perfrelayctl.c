/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl: the command-line client of perfrelayd; `monitor` streams events from the event
 * socket (ctl-monitor.c); `status`, `stats`, `probes`, `clients` and `probe` ask the daemon over
 * D-Bus (ctl-bus.c, ctl-stats.c; docs/dbus.md). This file: errors, options, dispatch. */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perfrelay-config.h"

#include "ctl.h"

const char *program = "perfrelayctl";

int error_errno(int r, const char *fmt, ...) {
	va_list ap;

	fprintf(stderr, "%s: ", program);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (r < 0)
		fprintf(stderr, ": %s", strerror(-r));
	fputc('\n', stderr);
	return r < 0 ? r : -EINVAL;
}

int parse_span(const char *s, int64_t *ret_ns) {
	char *end;
	long long n;
	int64_t unit;

	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno || end == s || n < 0)
		return -EINVAL;
	switch (*end) {
	case 's':
		unit = 1;
		break;
	case 'm':
		unit = 60;
		break;
	case 'h':
		unit = 3600;
		break;
	case 'd':
		unit = 86400;
		break;
	default:
		return -EINVAL;
	}
	if (end[1] || n > INT64_MAX / 1000000000 / unit)
		return -EINVAL;
	*ret_ns = (int64_t) n * unit * 1000000000;
	return 0;
}

int parse_u32(const char *s, uint32_t *ret) {
	unsigned long v;
	char *end;

	if (!s[0] || s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > UINT32_MAX)
		return -ERANGE;
	*ret = (uint32_t) v;
	return 0;
}

/* A numeric UID or a user name. */
int parse_uid(const char *s, uint32_t *ret) {
	struct passwd pw, *found = NULL;
	char buf[4096];

	if (parse_u32(s, ret) == 0)
		return 0;
	if (getpwnam_r(s, &pw, buf, sizeof(buf), &found) != 0 || !found)
		return -ESRCH;
	*ret = found->pw_uid;
	return 0;
}

static int verb_help(int argc, char *argv[]);

typedef struct Verb {
	const char *name;
	int (*run)(int argc, char *argv[]);
	const char *summary;
} Verb;

static const Verb verbs[] = {
	{ "monitor", verb_monitor, "Show events as they happen" },
	{ "status", verb_status, "Show the daemon's state, rates and loss (D-Bus)" },
	{ "stats", verb_stats, "Show every counter: producers, CPUs, readers, clients (D-Bus)" },
	{ "snapshot", verb_snapshot, "Show the flight recorder's latest events (root, D-Bus)" },
	{ "snapshots", verb_snapshots, "List the snapshots saved when units failed" },
	{ "capture", verb_capture, "Capture a unit's packets as pcapng (root, D-Bus)" },
	{ "top", verb_top, "Show the units using the most CPU (or another perf counter) per second (D-Bus)" },
	{ "producers", verb_producers, "List the producers, their record types and counters (D-Bus)" },
	{ "probes", verb_probes, "List the built-in probes (D-Bus)" },
	{ "clients", verb_clients, "List the socket subscribers (D-Bus)" },
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
