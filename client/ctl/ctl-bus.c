/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl's way to the daemon's bus: the connection, calls with their errors said once,
 * and the option parsing the bus verbs share (ctl-status.c, ctl-probes.c, ctl-clients.c,
 * ctl-stats.c, ...). */
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


static const char *system_bus_address(void) {
	const char *a = getenv("DBUS_SYSTEM_BUS_ADDRESS");

	return a && *a ? a : DEFAULT_SYSTEM_BUS;
}

int bus_connect(sd_bus **ret) {
	int r = sd_bus_open_system(ret);

	if (r < 0)
		return error_errno(r, "Failed to connect to the system bus (%s)", system_bus_address());
	return 0;
}

/* Names the bus, the method and the D-Bus error, with a hint for the common ones. */
int bus_call_error(const char *method, const sd_bus_error *e, int r) {
	const char *hint = "";

	if (!e || !e->name)
		return error_errno(r, "%s.%s() on the system bus failed", BUS_NAME, method);
	if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
		hint = " (is perfrelayd running, and was it started with a system bus?)";
	else if (sd_bus_error_has_name(e, SD_BUS_ERROR_ACCESS_DENIED))
		hint = " (this needs root)";
	fprintf(stderr,
		"%s: %s.%s() on the system bus failed: %s: %s%s\n",
		program,
		BUS_NAME,
		method,
		e->name,
		e->message ?: "",
		hint);
	return r < 0 ? r : -EIO;
}

int bus_call(sd_bus *bus, const char *method, sd_bus_message **ret_reply, const char *types, ...) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	va_list ap;
	int r;

	r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, BUS_INTERFACE, method);
	if (r >= 0 && types) {
		va_start(ap, types);
		r = sd_bus_message_appendv(m, types, ap);
		va_end(ap);
	}
	if (r < 0)
		return error_errno(r, "Failed to build a %s() call", method);
	r = sd_bus_call(bus, m, 0, &e, ret_reply);
	if (r < 0)
		r = bus_call_error(method, &e, r);
	sd_bus_error_free(&e);
	return r;
}

int parse_json_options(int argc, char *argv[], const char *verb, void (*help)(void), bool *ret_json) {
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 {} };
	int opt;

	*ret_json = false;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "hj", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return 0;
		case 'j':
			*ret_json = true;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("%s: unexpected argument '%s'", verb, argv[optind]);
	return 1;
}

int parse_help_option(int argc, char *argv[], const char *verb, void (*help)(void)) {
	static const struct option options[] = { { "help", no_argument, NULL, 'h' }, {} };
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return 0;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("%s: unexpected argument '%s'", verb, argv[optind]);
	return 1;
}

int bus_call_json(const char *method, json_object **ret) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	int r;

	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = bus_call(bus, method, &reply, NULL);
	if (r < 0)
		return r;
	r = bus_value_to_json(reply, ret);
	if (r < 0)
		return error_errno(r, "Failed to parse the %s() reply", method);
	return 0;
}
