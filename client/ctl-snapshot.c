/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl snapshot: the flight recorder's window (D-Bus Snapshot(), docs/recorder.md) as
 * event lines or JSON lines, on standard output or into a file. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "ctl.h"
#include "format.h"
#include "json-util.h"

#define MAX_LIST 64

static void snapshot_help(void) {
	printf("%s snapshot [OPTIONS...]\n\n"
	       "Show what the flight recorder holds: the latest events of every CPU, oldest first,\n"
	       "then a summary line (docs/recorder.md). Root or AllowGroups= members only.\n\n"
	       "     --since=SPAN     Only the last SPAN (e.g. 10s, 5m)\n"
	       "     --unit=UNIT      Only events of this systemd unit; repeatable\n"
	       "  -t --type=TYPE      Only events of this type; repeatable\n"
	       "  -p --pid=PID        Only events of this process; repeatable\n"
	       "  -j --json           JSON lines as the daemon wrote them (the default is one\n"
	       "                      readable line per event)\n"
	       "  -o --output=FILE    Write to FILE instead of standard output\n"
	       "  -h --help           Show this help\n",
	       program);
}

static int64_t boot_to_realtime(void) {
	struct timespec rt, bt;

	clock_gettime(CLOCK_BOOTTIME, &bt);
	clock_gettime(CLOCK_REALTIME, &rt);
	return ((int64_t) rt.tv_sec - bt.tv_sec) * 1000000000 + (rt.tv_nsec - bt.tv_nsec);
}

static int append_list(
	sd_bus_message *m, const char *key, const char *type, char **s, const uint32_t *u, size_t n) {
	int r = sd_bus_message_open_container(m, 'e', "sv");

	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', type);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', type + 1);
	for (size_t i = 0; r >= 0 && i < n; i++)
		r = s ? sd_bus_message_append(m, "s", s[i]) : sd_bus_message_append(m, "u", u[i]);
	for (unsigned k = 0; r >= 0 && k < 3; k++)
		r = sd_bus_message_close_container(m);
	return r;
}

int verb_snapshot(int argc, char *argv[]) {
	enum { ARG_SINCE = 0x100, ARG_UNIT };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 { "output", required_argument, NULL, 'o' },
						 { "since", required_argument, NULL, ARG_SINCE },
						 { "unit", required_argument, NULL, ARG_UNIT },
						 { "type", required_argument, NULL, 't' },
						 { "pid", required_argument, NULL, 'p' },
						 {} };
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
	_cleanup_(json_tokener_freep) json_tokener *tok = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	char *units[MAX_LIST], *types[MAX_LIST], *line = NULL;
	uint32_t pids[MAX_LIST];
	size_t n_units = 0, n_types = 0, n_pids = 0, cap = 0;
	const char *output = NULL;
	int64_t since = 0;
	bool json = false;
	FILE *in, *out = stdout;
	ssize_t len;
	int opt, r, fd;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "hjo:t:p:", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			snapshot_help();
			return 0;
		case 'j':
			json = true;
			break;
		case 'o':
			output = optarg;
			break;
		case ARG_SINCE:
			if (parse_span(optarg, &since) < 0)
				return error_msg(
					"--since=%s: expected a number followed by s, m, h or d", optarg);
			break;
		case ARG_UNIT:
		case 't':
		case 'p':
			if (n_units >= MAX_LIST || n_types >= MAX_LIST || n_pids >= MAX_LIST)
				return error_msg("snapshot: at most %u of each filter", MAX_LIST);
			if (opt == ARG_UNIT)
				units[n_units++] = optarg;
			else if (opt == 't')
				types[n_types++] = optarg;
			else if (parse_u32(optarg, &pids[n_pids++]) < 0)
				return error_msg("--pid=%s: not a process id", optarg);
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("snapshot: unexpected argument '%s'", argv[optind]);

	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, BUS_INTERFACE, "Snapshot");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0 && since > 0) {
		struct timespec bt;

		clock_gettime(CLOCK_BOOTTIME, &bt);
		r = sd_bus_message_append(
			m,
			"{sv}",
			"since_ns",
			"t",
			(uint64_t) MAX((int64_t) bt.tv_sec * 1000000000 + bt.tv_nsec - since, 1));
	}
	if (r >= 0 && n_units > 0)
		r = append_list(m, "unit", "as", units, NULL, n_units);
	if (r >= 0 && n_types > 0)
		r = append_list(m, "types", "as", types, NULL, n_types);
	if (r >= 0 && n_pids > 0)
		r = append_list(m, "pid", "au", NULL, pids, n_pids);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r < 0)
		return error_errno(r, "Failed to build the Snapshot() call");
	r = sd_bus_call(bus, m, 0, &e, &reply);
	if (r < 0) {
		r = error_msg("Snapshot() failed: %s", e.message ?: strerror(-r));
		sd_bus_error_free(&e);
		return r;
	}
	r = sd_bus_message_read(reply, "h", &fd);
	if (r < 0)
		return error_errno(r, "Failed to read the Snapshot() reply");
	fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0 || !(in = fdopen(fd, "r")))
		return error_errno(-errno, "Failed to read the snapshot");
	if (output && !(out = fopen(output, "we"))) {
		r = error_errno(-errno, "Failed to open %s", output);
		fclose(in);
		return r;
	}
	tok = json_tokener_new();
	while ((len = getline(&line, &cap, in)) > 0) {
		if (json || strstr(line, "{\"type\":\"snapshot\"") == line)
			fputs(line, out);
		else if (tok && format_event(out, tok, line, (size_t) (len - (line[len - 1] == '\n')), boot_to_realtime()) < 0)
			fputs(line, out);
	}
	free(line);
	fclose(in);
	if (out != stdout && fclose(out) != 0)
		return error_errno(-errno, "Failed to write %s", output);
	return 0;
}
