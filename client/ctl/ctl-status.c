/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl status: the daemon's state, figures and kernel features (D-Bus properties). */
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

typedef struct KernelFeature {
	char *name, *since, *without;
	int available, required;
} KernelFeature;

typedef struct Status {
	KernelFeature *features; /* KernelFeatures; empty from a daemon that predates it */
	size_t n_features;
	char *version, *state, *pin_path;
	uint32_t cpus, readers, clients;
	char **probes;
	size_t n_probes;
	uint64_t received, delivered, lost, failures, drops, started_at;
} Status;

static void status_clear(Status *st) {
	for (size_t i = 0; i < st->n_features; i++) {
		free(st->features[i].name);
		free(st->features[i].since);
		free(st->features[i].without);
	}
	free(st->features);
	free(st->version);
	free(st->state);
	free(st->pin_path);
	for (size_t i = 0; i < st->n_probes; i++)
		free(st->probes[i]);
	free(st->probes);
}

/* One a{sv} entry's value into st; properties this version does not know are skipped. */
static int status_read_property(sd_bus_message *m, const char *name, Status *st) {
	static const struct {
		const char *name;
		char type;
		size_t offset;
	} fields[] = {
		{ "Version", 's', offsetof(Status, version) },
		{ "State", 's', offsetof(Status, state) },
		{ "PinPath", 's', offsetof(Status, pin_path) },
		{ "Cpus", 'u', offsetof(Status, cpus) },
		{ "Readers", 'u', offsetof(Status, readers) },
		{ "Clients", 'u', offsetof(Status, clients) },
		{ "EventsReceived", 't', offsetof(Status, received) },
		{ "EventsDelivered", 't', offsetof(Status, delivered) },
		{ "EventsLost", 't', offsetof(Status, lost) },
		{ "ProducerFailures", 't', offsetof(Status, failures) },
		{ "ClientDrops", 't', offsetof(Status, drops) },
		{ "StartedAt", 't', offsetof(Status, started_at) },
	};
	const char *contents;
	char type;
	int r;

	r = sd_bus_message_peek_type(m, &type, &contents);
	if (r < 0)
		return r;
	if (streq(name, "KernelFeatures") && streq(contents, "a(sbbss)")) {
		const char *n, *since, *without;
		int available, required;

		r = sd_bus_message_enter_container(m, 'v', "a(sbbss)");
		if (r >= 0)
			r = sd_bus_message_enter_container(m, 'a', "(sbbss)");
		while (r >= 0 &&
		       (r = sd_bus_message_read(m, "(sbbss)", &n, &available, &required, &since, &without)) >
			       0) {
			KernelFeature *a = realloc(st->features, sizeof(KernelFeature) * (st->n_features + 1));

			if (!a)
				return -ENOMEM;
			st->features = a;
			a[st->n_features] = (KernelFeature){
				.name = strdup(n),
				.since = strdup(since),
				.without = strdup(without),
				.available = available,
				.required = required,
			};
			st->n_features++;
			if (!a[st->n_features - 1].name || !a[st->n_features - 1].since ||
			    !a[st->n_features - 1].without)
				return -ENOMEM;
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		return r;
	}
	if (streq(name, "Probes") && streq(contents, "as")) {
		const char *p;

		r = sd_bus_message_enter_container(m, 'v', "as");
		if (r >= 0)
			r = sd_bus_message_enter_container(m, 'a', "s");
		while (r >= 0 && (r = sd_bus_message_read(m, "s", &p)) > 0) {
			char **a = realloc(st->probes, sizeof(char *) * (st->n_probes + 1));

			if (!a || !(a[st->n_probes] = strdup(p))) {
				if (a)
					st->probes = a;
				return -ENOMEM;
			}
			st->probes = a;
			st->n_probes++;
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		return r;
	}
	for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
		char want[2] = { fields[i].type, 0 };
		void *field = (uint8_t *) st + fields[i].offset;

		if (!streq(name, fields[i].name) || !streq(contents, want))
			continue;
		if (fields[i].type == 's') {
			const char *v;

			r = sd_bus_message_read(m, "v", "s", &v);
			if (r < 0)
				return r;
			free(*(char **) field);
			*(char **) field = strdup(v);
			return *(char **) field ? 0 : -ENOMEM;
		}
		return sd_bus_message_read(m, "v", want, field);
	}
	return sd_bus_message_skip(m, "v");
}

static int status_get(sd_bus *bus, Status *st) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	int r;

	r = sd_bus_call_method(
		bus, BUS_NAME, BUS_PATH, "org.freedesktop.DBus.Properties", "GetAll", &e, &reply, "s", BUS_INTERFACE);
	if (r < 0) {
		r = bus_call_error("GetAll", &e, r);
		sd_bus_error_free(&e);
		return r;
	}
	r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *name;

		r = sd_bus_message_read(reply, "s", &name);
		if (r >= 0)
			r = status_read_property(reply, name, st);
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	if (r < 0)
		return error_errno(r, "Failed to parse the properties of %s", BUS_PATH);
	if (!st->version || !st->state || !st->pin_path)
		return error_msg("%s did not report Version, State and PinPath", BUS_PATH);
	return 0;
}

static void format_duration(uint64_t usec, char *buf, size_t size) {
	uint64_t s = usec / USEC_PER_SEC;

	if (s >= 86400)
		snprintf(
			buf,
			size,
			"%" PRIu64 "d %" PRIu64 "h %" PRIu64 "min",
			s / 86400,
			s % 86400 / 3600,
			s % 3600 / 60);
	else if (s >= 3600)
		snprintf(buf, size, "%" PRIu64 "h %" PRIu64 "min", s / 3600, s % 3600 / 60);
	else if (s >= 60)
		snprintf(buf, size, "%" PRIu64 "min %" PRIu64 "s", s / 60, s % 60);
	else
		snprintf(buf, size, "%" PRIu64 "s", s);
}

static void status_help(void) {
	printf("%s status [OPTIONS...]\n\n"
	       "Show perfrelayd's state and counters (from D-Bus). Takes one second: the event rate\n"
	       "is measured over it.\n\n"
	       "  -j --json   One JSON object\n"
	       "  -h --help   Show this help\n",
	       program);
}

int verb_status(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	Status st = {};
	uint64_t t0, t1, received1 = 0, uptime, now;
	double rate;
	bool json;
	int r;

	r = parse_json_options(argc, argv, "status", status_help, &json);
	if (r <= 0)
		return r;

	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = status_get(bus, &st);
	t0 = now_usec(CLOCK_MONOTONIC);
	if (r < 0)
		goto finish;

	/* The rate over one second, from two reads of the counter. */
	usleep(USEC_PER_SEC);
	r = sd_bus_get_property_trivial(
		bus, BUS_NAME, BUS_PATH, BUS_INTERFACE, "EventsReceived", NULL, 't', &received1);
	t1 = now_usec(CLOCK_MONOTONIC);
	if (r < 0) {
		r = error_errno(r, "Failed to read EventsReceived from %s", BUS_NAME);
		goto finish;
	}
	rate = received1 >= st.received && t1 > t0 ?
		(double) (received1 - st.received) * USEC_PER_SEC / (double) (t1 - t0) :
		0;
	now = now_usec(CLOCK_REALTIME);
	uptime = now > st.started_at ? now - st.started_at : 0;

	if (json) {
		json_object *o = json_object_new_object(), *probes = json_object_new_array();

		json_object_object_add(o, "version", json_object_new_string(st.version));
		json_object_object_add(o, "state", json_object_new_string(st.state));
		json_object_object_add(o, "pin_path", json_object_new_string(st.pin_path));
		json_object_object_add(o, "started_at_usec", json_object_new_uint64(st.started_at));
		json_object_object_add(o, "uptime_usec", json_object_new_uint64(uptime));
		json_object_object_add(o, "cpus", json_object_new_int64(st.cpus));
		json_object_object_add(o, "readers", json_object_new_int64(st.readers));
		for (size_t i = 0; i < st.n_probes; i++)
			json_object_array_add(probes, json_object_new_string(st.probes[i]));
		json_object_object_add(o, "probes", probes);
		json_object_object_add(o, "clients", json_object_new_int64(st.clients));
		json_object_object_add(o, "events_received", json_object_new_uint64(st.received));
		json_object_object_add(o, "events_per_second", json_object_new_double(rate));
		json_object_object_add(o, "events_delivered", json_object_new_uint64(st.delivered));
		json_object_object_add(o, "events_lost", json_object_new_uint64(st.lost));
		json_object_object_add(o, "producer_failures", json_object_new_uint64(st.failures));
		json_object_object_add(o, "client_drops", json_object_new_uint64(st.drops));
		json_object *features = json_object_new_array();
		for (size_t i = 0; i < st.n_features; i++) {
			json_object *f = json_object_new_object();

			json_object_object_add(f, "name", json_object_new_string(st.features[i].name));
			json_object_object_add(
				f, "available", json_object_new_boolean(st.features[i].available));
			json_object_object_add(f, "required", json_object_new_boolean(st.features[i].required));
			json_object_object_add(f, "since", json_object_new_string(st.features[i].since));
			json_object_object_add(f, "without", json_object_new_string(st.features[i].without));
			json_object_array_add(features, f);
		}
		json_object_object_add(o, "kernel_features", features);
		puts(json_object_to_json_string_ext(
			o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	} else {
		char since[64] = "?", up[64];
		time_t sec = (time_t) (st.started_at / USEC_PER_SEC);
		struct tm tm;

		if (localtime_r(&sec, &tm))
			strftime(since, sizeof(since), "%a %Y-%m-%d %H:%M:%S %Z", &tm);
		format_duration(uptime, up, sizeof(up));
		printf("perfrelayd %s: ", st.version);
		format_escaped(stdout, st.state, false);
		printf("\n   Started: %s (uptime %s)\n  Pin path: ", since, up);
		format_escaped(stdout, st.pin_path, false);
		printf("\n      CPUs: %" PRIu32 ", %" PRIu32 " reader thread%s\n    Probes:",
		       st.cpus,
		       st.readers,
		       st.readers == 1 ? "" : "s");
		if (st.n_probes == 0)
			fputs(" none", stdout);
		for (size_t i = 0; i < st.n_probes; i++) {
			fputc(' ', stdout);
			format_escaped(stdout, st.probes[i], false);
		}
		printf("\n   Clients: %" PRIu32
		       "\n"
		       "    Events: %" PRIu64 " received (%.1f/s), %" PRIu64
		       " delivered\n"
		       "      Loss: %" PRIu64 " lost in rings, %" PRIu64 " producer failures, %" PRIu64
		       " dropped for clients\n",
		       st.clients,
		       st.received,
		       rate,
		       st.delivered,
		       st.lost,
		       st.failures,
		       st.drops);
		if (st.n_features > 0) {
			fputs("    Kernel:", stdout);
			for (size_t i = 0; i < st.n_features; i++) {
				fputc(' ', stdout);
				format_escaped(stdout, st.features[i].name, false);
				fputs(st.features[i].available ? "=on" : "=off", stdout);
			}
			fputc('\n', stdout);
			/* Each missing feature says what it costs: the reason a user looks here. */
			for (size_t i = 0; i < st.n_features; i++) {
				if (st.features[i].available)
					continue;
				fputs("           off: ", stdout);
				format_escaped(stdout, st.features[i].name, false);
				fputs(" (Linux ", stdout);
				format_escaped(stdout, st.features[i].since, false);
				fputs("): ", stdout);
				format_escaped(stdout, st.features[i].without, false);
				fputc('\n', stdout);
			}
		}
	}
	if (fflush(stdout) != 0)
		r = error_errno(-errno, "Failed to write to standard output");
finish:
	status_clear(&st);
	return r;
}
