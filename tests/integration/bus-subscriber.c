/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Test helper for test_dbus.py: subscribes to perfrelayd's events over D-Bus and prints every
 * signal it receives as a JSON line, so that the test can see what reached this connection. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

/* Usage: bus-subscriber --address=ADDRESS [--no-subscribe] [KEY=V1,V2...]...
 *   KEY is types, comm or unit (strings) or pid, uid (numbers): the Subscribe() filter.
 * Output, one JSON object per line, flushed at once:
 *   {"subscribed":PATH,"unique_name":NAME}       or {"error":NAME,"message":TEXT} and exit 1
 *   {"signal":MEMBER,"interface":..,"path":..,"destination":..,"t":USEC,  plus for Event
 *    "type":..,"timestamp":..,"json":.., for Dropped "count":.., for EventsLost "cpu":..,"count":..
 *    and for PropertiesChanged "changed":{NAME:VALUE (s, u, t, as; else null)}}
 *   {"reply":METHOD,"error":NAME|null,"message":TEXT|null}
 * ("t" is CLOCK_MONOTONIC at receipt, for checking rate limits.)
 * Commands on standard input, one per line: "unsubscribe [PATH]" (default: our monitor),
 * "call METHOD [SIGNATURE ARG...]" (a Manager method; s, b (true/false), u, t and o arguments, and
 * A for an a{sv} written KEY=VALUE,... ("-": empty); a reply of one object path is printed as "path",
 * a reply of one file descriptor is kept open and printed as "size", its size then), "sizes"
 * (printed as {"reply":"sizes","sizes":[..]}: the size of every descriptor kept, oldest first) and
 * "quit". End of input quits too, which closes the bus connection. */

static sd_bus *bus;
static char *monitor;
static int kept[64]; /* descriptors of replies ("h"), kept open as a client that holds them */
static size_t n_kept;

static void print_json(json_object *o) {
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	fflush(stdout);
	json_object_put(o);
}

static void add_string(json_object *o, const char *key, const char *value) {
	json_object_object_add(o, key, value ? json_object_new_string(value) : NULL);
}

static uint64_t now_usec(void) {
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

/* The changed properties of a PropertiesChanged signal, values of simple types only. */
static json_object *read_changed(sd_bus_message *m) {
	json_object *changed = json_object_new_object();
	const char *interface, *name, *contents;
	char type;

	if (sd_bus_message_read(m, "s", &interface) < 0 || sd_bus_message_enter_container(m, 'a', "{sv}") < 0)
		return changed;
	while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
		json_object *v = NULL;

		if (sd_bus_message_read(m, "s", &name) < 0 || sd_bus_message_peek_type(m, &type, &contents) < 0)
			break;
		if (strcmp(contents, "s") == 0) {
			const char *x;
			if (sd_bus_message_read(m, "v", "s", &x) >= 0)
				v = json_object_new_string(x);
		} else if (strcmp(contents, "u") == 0) {
			uint32_t x;
			if (sd_bus_message_read(m, "v", "u", &x) >= 0)
				v = json_object_new_int64(x);
		} else if (strcmp(contents, "t") == 0) {
			uint64_t x;
			if (sd_bus_message_read(m, "v", "t", &x) >= 0)
				v = json_object_new_uint64(x);
		} else if (strcmp(contents, "as") == 0) {
			const char *x;
			v = json_object_new_array();
			if (sd_bus_message_enter_container(m, 'v', "as") >= 0 &&
			    sd_bus_message_enter_container(m, 'a', "s") >= 0) {
				while (sd_bus_message_read(m, "s", &x) > 0)
					json_object_array_add(v, json_object_new_string(x));
				sd_bus_message_exit_container(m);
				sd_bus_message_exit_container(m);
			}
		} else
			sd_bus_message_skip(m, "v");
		json_object_object_add(changed, name, v);
		sd_bus_message_exit_container(m);
	}
	return changed;
}

static int on_message(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
	json_object *o;
	const char *member = sd_bus_message_get_member(m);
	const char *interface = sd_bus_message_get_interface(m);
	int r;

	if (!sd_bus_message_is_signal(m, NULL, NULL))
		return 0;
	/* The bus driver's own signals (NameAcquired, ...) are not what the tests look at. */
	if (interface && strcmp(interface, "org.freedesktop.DBus") == 0)
		return 0;
	o = json_object_new_object();
	add_string(o, "signal", member);
	add_string(o, "interface", interface);
	add_string(o, "path", sd_bus_message_get_path(m));
	add_string(o, "destination", sd_bus_message_get_destination(m));
	json_object_object_add(o, "t", json_object_new_uint64(now_usec()));
	if (member && strcmp(member, "PropertiesChanged") == 0)
		json_object_object_add(o, "changed", read_changed(m));
	else if (member && strcmp(member, "EventsLost") == 0) {
		uint32_t cpu;
		uint64_t count;

		if (sd_bus_message_read(m, "ut", &cpu, &count) >= 0) {
			json_object_object_add(o, "cpu", json_object_new_int64(cpu));
			json_object_object_add(o, "count", json_object_new_uint64(count));
		}
	} else if (interface && strcmp(interface, "org.perfrelay1.Monitor") == 0 && member && strcmp(member, "Event") == 0) {
		const char *type, *json;
		uint64_t ts;

		r = sd_bus_message_read(m, "sts", &type, &ts, &json);
		if (r >= 0) {
			add_string(o, "type", type);
			json_object_object_add(o, "timestamp", json_object_new_uint64(ts));
			add_string(o, "json", json);
		}
	} else if (interface && strcmp(interface, "org.perfrelay1.Monitor") == 0 && member && strcmp(member, "Dropped") == 0) {
		uint64_t count;

		r = sd_bus_message_read(m, "t", &count);
		if (r >= 0)
			json_object_object_add(o, "count", json_object_new_uint64(count));
	}
	print_json(o);
	return 0;
}

static int append_filter(sd_bus_message *m, const char *arg) {
	const char *eq = strchr(arg, '=');
	char *key, *values, *save = NULL;
	bool numbers;
	int r;

	if (!eq) {
		fprintf(stderr, "bus-subscriber: %s: expected KEY=VALUES\n", arg);
		return -EINVAL;
	}
	key = strndup(arg, (size_t) (eq - arg));
	values = strdup(eq + 1);
	numbers = strcmp(key, "pid") == 0 || strcmp(key, "uid") == 0;
	r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', numbers ? "au" : "as");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', numbers ? "u" : "s");
	for (char *v = strtok_r(values, ",", &save); r >= 0 && v; v = strtok_r(NULL, ",", &save))
		r = numbers ? sd_bus_message_append(m, "u", (uint32_t) strtoul(v, NULL, 10)) :
			      sd_bus_message_append(m, "s", v);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	free(key);
	free(values);
	return r;
}


static void print_error(const char *what, const sd_bus_error *e, int r) {
	json_object *o = json_object_new_object();

	add_string(o, "reply", what);
	add_string(o, "error", e && e->name ? e->name : NULL);
	add_string(o, "message", e && e->message ? e->message : (r < 0 ? strerror(-r) : NULL));
	print_json(o);
}

/* "call METHOD [SIG ARG...]": the arguments after the signature, one per character. */
static void call_method(char *args) {
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	char *save = NULL, *method = strtok_r(args, " ", &save), *sig = strtok_r(NULL, " ", &save);
	int r;

	r = sd_bus_message_new_method_call(
		bus, &m, "org.perfrelay1", "/org/perfrelay1", "org.perfrelay1.Manager", method ?: "");
	for (const char *c = sig; r >= 0 && c && *c; c++) {
		char *arg = strtok_r(NULL, " ", &save);

		if (!arg) {
			r = -EINVAL;
			break;
		}
		switch (*c) {
		case 's':
			r = sd_bus_message_append(m, "s", arg);
			break;
		case 'b':
			r = sd_bus_message_append(m, "b", (int) (strcmp(arg, "true") == 0));
			break;
		case 'u':
			r = sd_bus_message_append(m, "u", (uint32_t) strtoul(arg, NULL, 10));
			break;
		case 't':
			r = sd_bus_message_append(m, "t", (uint64_t) strtoull(arg, NULL, 10));
			break;
		case 'o':
			r = sd_bus_message_append(m, "o", arg);
			break;
		case 'A':
			/* a{sv} as KEY=VALUE[,KEY=VALUE...]: "ifindex" a u, the others strings. */
			r = sd_bus_message_open_container(m, 'a', "{sv}");
			for (char *s2 = NULL, *kv = strcmp(arg, "-") == 0 ? NULL : strtok_r(arg, ",", &s2);
			     r >= 0 && kv;
			     kv = strtok_r(NULL, ",", &s2)) {
				char *eq = strchr(kv, '=');

				if (!eq) {
					r = -EINVAL;
					break;
				}
				*eq = 0;
				if (strcmp(kv, "ifindex") == 0)
					r = sd_bus_message_append(
						m, "{sv}", kv, "u", (uint32_t) strtoul(eq + 1, NULL, 10));
				else
					r = sd_bus_message_append(m, "{sv}", kv, "s", eq + 1);
			}
			if (r >= 0)
				r = sd_bus_message_close_container(m);
			break;
		default:
			r = -EINVAL;
		}
	}
	if (r >= 0)
		r = sd_bus_call(bus, m, 0, &e, &reply);
	if (r >= 0 && sd_bus_message_has_signature(reply, "o")) {
		const char *path = NULL;
		json_object *o = json_object_new_object();

		(void) sd_bus_message_read(reply, "o", &path);
		add_string(o, "reply", method);
		add_string(o, "error", NULL);
		add_string(o, "path", path);
		print_json(o);
	} else if (r >= 0 && sd_bus_message_has_signature(reply, "h") && n_kept < 64) {
		json_object *o = json_object_new_object();
		struct stat st = {};
		int fd = -1;

		(void) sd_bus_message_read(reply, "h", &fd);
		kept[n_kept] = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		(void) fstat(kept[n_kept++], &st);
		add_string(o, "reply", method);
		add_string(o, "error", NULL);
		json_object_object_add(o, "size", json_object_new_int64(st.st_size));
		print_json(o);
	} else
		print_error(method ?: "", r < 0 ? &e : NULL, r);
	sd_bus_error_free(&e);
	sd_bus_message_unref(m);
	sd_bus_message_unref(reply);
}

static int on_stdin(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	char line[4096];
	ssize_t n = read(fd, line, sizeof(line) - 1);

	if (n <= 0)
		return sd_event_exit(sd_event_source_get_event(s), 0);
	line[n] = 0;
	for (char *save = NULL, *cmd = strtok_r(line, "\n", &save); cmd; cmd = strtok_r(NULL, "\n", &save)) {
		if (strcmp(cmd, "quit") == 0)
			return sd_event_exit(sd_event_source_get_event(s), 0);
		if (strcmp(cmd, "sizes") == 0) {
			json_object *o = json_object_new_object(), *a = json_object_new_array();

			for (size_t i = 0; i < n_kept; i++) {
				struct stat st = {};

				(void) fstat(kept[i], &st);
				json_object_array_add(a, json_object_new_int64(st.st_size));
			}
			add_string(o, "reply", "sizes");
			json_object_object_add(o, "sizes", a);
			print_json(o);
			continue;
		}
		if (strncmp(cmd, "call ", 5) == 0) {
			call_method(cmd + 5);
			continue;
		}
		if (strncmp(cmd, "unsubscribe", 11) == 0) {
			sd_bus_error e = SD_BUS_ERROR_NULL;
			sd_bus_message *reply = NULL;
			const char *path = cmd[11] == ' ' ? cmd + 12 : monitor;
			int r;

			r = sd_bus_call_method(
				bus,
				"org.perfrelay1",
				"/org/perfrelay1",
				"org.perfrelay1.Manager",
				"Unsubscribe",
				&e,
				&reply,
				"o",
				path ?: "/");
			print_error("Unsubscribe", r < 0 ? &e : NULL, r);
			sd_bus_error_free(&e);
			sd_bus_message_unref(reply);
		}
	}
	return 0;
}

int main(int argc, char *argv[]) {
	static const struct option options[] = { { "address", required_argument, NULL, 'a' },
						 { "no-subscribe", no_argument, NULL, 'n' },
						 {} };
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *call = NULL, *reply = NULL;
	const char *address = NULL, *path, *unique;
	bool subscribe = true;
	sd_event *event = NULL;
	int c, r;

	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
		switch (c) {
		case 'a':
			address = optarg;
			break;
		case 'n':
			subscribe = false;
			break;
		default:
			return 2;
		}
	if (!address) {
		fprintf(stderr, "bus-subscriber: --address= is required\n");
		return 2;
	}

	r = sd_event_default(&event);
	if (r >= 0)
		r = sd_bus_new(&bus);
	if (r >= 0)
		r = sd_bus_set_address(bus, address);
	if (r >= 0)
		r = sd_bus_set_bus_client(bus, 1);
	if (r >= 0)
		r = sd_bus_start(bus);
	if (r < 0) {
		fprintf(stderr, "bus-subscriber: cannot connect to %s: %s\n", address, strerror(-r));
		return 1;
	}
	/* Every message that reaches this connection is printed. The match asks the bus for
	 * perfrelayd's broadcast signals too, so that a signal meant for another subscriber but
	 * sent to everyone would show up here. */
	r = sd_bus_add_filter(bus, NULL, on_message, NULL);
	if (r >= 0)
		r = sd_bus_add_match(bus, NULL, "type='signal',sender='org.perfrelay1'", NULL, NULL);
	if (r < 0) {
		fprintf(stderr, "bus-subscriber: cannot watch signals: %s\n", strerror(-r));
		return 1;
	}

	r = sd_bus_get_unique_name(bus, &unique);
	if (r < 0)
		return 1;
	if (subscribe) {
		r = sd_bus_message_new_method_call(
			bus, &call, "org.perfrelay1", "/org/perfrelay1", "org.perfrelay1.Manager", "Subscribe");
		if (r >= 0)
			r = sd_bus_message_open_container(call, 'a', "{sv}");
		for (int i = optind; r >= 0 && i < argc; i++)
			r = append_filter(call, argv[i]);
		if (r >= 0)
			r = sd_bus_message_close_container(call);
		if (r >= 0)
			r = sd_bus_call(bus, call, 0, &e, &reply);
		if (r >= 0)
			r = sd_bus_message_read(reply, "o", &path);
		if (r < 0) {
			json_object *o = json_object_new_object();

			add_string(o, "error", e.name ? e.name : "(local)");
			add_string(o, "message", e.message ? e.message : strerror(-r));
			print_json(o);
			return 1;
		}
		monitor = strdup(path);
	}
	{
		json_object *o = json_object_new_object();

		add_string(o, "subscribed", monitor);
		add_string(o, "unique_name", unique);
		print_json(o);
	}

	r = sd_event_add_io(event, NULL, STDIN_FILENO, EPOLLIN, on_stdin, NULL);
	if (r >= 0)
		r = sd_bus_attach_event(bus, event, 0);
	if (r >= 0)
		r = sd_event_loop(event);
	sd_bus_message_unref(reply);
	sd_bus_message_unref(call);
	sd_bus_flush_close_unref(bus);
	sd_event_unref(event);
	free(monitor);
	return r < 0 ? 1 : 0;
}
