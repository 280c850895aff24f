/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl: the command-line client of perfrelayd; `monitor` streams events from the event
 * socket through libperfrelay, one human-readable line each or the raw JSON lines. */
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

#include "perfrelay-config.h"

#include "macro.h"
#include "perfrelay.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(perfrelay_client *, perfrelay_close);
DEFINE_TRIVIAL_CLEANUP_FUNC(json_tokener *, json_tokener_free);

/* Under a flood next_json() always has a line ready; look for signals this often anyway. */
#define SIGNAL_CHECK_EVERY 256u

static const char *program = "perfrelayctl";

static int _printf_(2, 3) error_errno(int r, const char *fmt, ...) {
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
#define error_msg(...) error_errno(0, __VA_ARGS__)

/* ---- option values ---- */

static int parse_u32(const char *s, uint32_t *ret) {
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
static int parse_uid(const char *s, uint32_t *ret) {
	struct passwd pw, *found = NULL;
	char buf[4096];

	if (parse_u32(s, ret) == 0)
		return 0;
	if (getpwnam_r(s, &pw, buf, sizeof(buf), &found) != 0 || !found)
		return -ESRCH;
	*ret = found->pw_uid;
	return 0;
}

/* ---- human-readable output ---- */

static const char *jstr(json_object *o, const char *key) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static bool jint(json_object *o, const char *key, int64_t *ret) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	*ret = json_object_get_int64(v);
	return true;
}

static bool juint(json_object *o, const char *key, uint64_t *ret) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	*ret = json_object_get_uint64(v);
	return true;
}

/* Event strings are whatever a process put in its paths and arguments: control bytes
 * (including C1 controls, U+0080..U+009F) are escaped so they cannot drive the terminal.
 * With `quote`, a string that is empty or has spaces, quotes or escapes is shown in "".
 * Returns the number of characters written (UTF-8 sequences count once), for padding. */
static size_t print_escaped(FILE *f, const char *s, bool quote) {
	const unsigned char *p = (const unsigned char *) s;
	size_t width = 0;
	bool q = false;

	if (quote) {
		q = !*p;
		for (const unsigned char *t = p; *t && !q; t++)
			q = *t <= ' ' || *t == '"' || *t == '\\' || *t == '\'' || *t == 0x7f ||
			    (t[0] == 0xc2 && t[1] >= 0x80 && t[1] <= 0x9f);
	}
	if (q) {
		fputc('"', f);
		width++;
	}
	for (; *p; p++) {
		if (*p == '\n' || *p == '\t') {
			fputs(*p == '\n' ? "\\n" : "\\t", f);
			width += 2;
		} else if (*p < ' ' || *p == 0x7f) {
			fprintf(f, "\\x%02x", *p);
			width += 4;
		} else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			fprintf(f, "\\u%04x", p[1]);
			width += 6;
			p++;
		} else if (q && (*p == '"' || *p == '\\')) {
			fputc('\\', f);
			fputc(*p, f);
			width += 2;
		} else {
			fputc(*p, f);
			width += (*p & 0xc0) != 0x80;
		}
	}
	if (q) {
		fputc('"', f);
		width++;
	}
	return width;
}

static void print_result(FILE *f, int64_t result) {
	const char *name = result < 0 && result > -4096 ? strerrorname_np((int) -result) : NULL;

	if (name)
		fprintf(f, " = -%s", name);
	else
		fprintf(f, " = %" PRId64, result);
}

static void print_duration(FILE *f, uint64_t ns) {
	if (ns < 1000000u)
		fprintf(f, "%" PRIu64 "us", ns / 1000u);
	else if (ns < 1000000000u)
		fprintf(f, "%.1fms", (double) ns / 1e6);
	else
		fprintf(f, "%.3fs", (double) ns / 1e9);
}

static void print_open_flags(FILE *f, int64_t flags) {
	/* O_SYNC and O_TMPFILE include other flags' bits, so they come before them. */
	static const struct {
		int64_t flag;
		const char *name;
	} names[] = {
		{ O_SYNC, "O_SYNC" },         { O_TMPFILE, "O_TMPFILE" },     { O_CREAT, "O_CREAT" },
		{ O_EXCL, "O_EXCL" },         { O_NOCTTY, "O_NOCTTY" },       { O_TRUNC, "O_TRUNC" },
		{ O_APPEND, "O_APPEND" },     { O_NONBLOCK, "O_NONBLOCK" },   { O_DSYNC, "O_DSYNC" },
		{ O_DIRECT, "O_DIRECT" },     { O_DIRECTORY, "O_DIRECTORY" }, { O_NOFOLLOW, "O_NOFOLLOW" },
		{ O_NOATIME, "O_NOATIME" },   { O_CLOEXEC, "O_CLOEXEC" },     { O_PATH, "O_PATH" },
	};
	int64_t rest = flags & ~(int64_t) O_ACCMODE;

	switch (flags & O_ACCMODE) {
	case O_RDONLY:
		fputs("O_RDONLY", f);
		break;
	case O_WRONLY:
		fputs("O_WRONLY", f);
		break;
	case O_RDWR:
		fputs("O_RDWR", f);
		break;
	default:
		fputs("O_ACCMODE", f);
		break;
	}
	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if ((rest & names[i].flag) == names[i].flag) {
			fprintf(f, "|%s", names[i].name);
			rest &= ~names[i].flag;
		}
	if (rest)
		fprintf(f, "|0x%" PRIx64, (uint64_t) rest);
}

/* Decoded bytes of a base64 string. */
static size_t base64_size(const char *s) {
	size_t n = strlen(s), pad = 0;

	if (n >= 1 && s[n - 1] == '=')
		pad++;
	if (n >= 2 && s[n - 2] == '=')
		pad++;
	return n / 4 * 3 - MIN(pad, n / 4 * 3);
}

static void print_details(FILE *f, const char *type, json_object *ev, const char *line) {
	const char *s;
	int64_t v;
	uint64_t u;

	if (streq(type, "exec")) {
		json_object *argv, *truncated;

		print_escaped(f, jstr(ev, "filename") ?: "?", true);
		if (json_object_object_get_ex(ev, "argv", &argv) &&
		    json_object_is_type(argv, json_type_array))
			for (size_t i = 1; i < json_object_array_length(argv); i++) {
				json_object *a = json_object_array_get_idx(argv, i);
				bool is_string = json_object_is_type(a, json_type_string);

				fputc(' ', f);
				print_escaped(f, is_string ? json_object_get_string(a) : "?", true);
			}
		if (json_object_object_get_ex(ev, "argv_truncated", &truncated) &&
		    json_object_get_boolean(truncated))
			fputs(" ...", f);
	} else if (streq(type, "exit")) {
		if (jint(ev, "signal", &v) && v != 0) {
			const char *name = v > 0 && v < 128 ? sigabbrev_np((int) v) : NULL;

			if (name)
				fprintf(f, "signal %s", name);
			else
				fprintf(f, "signal %" PRId64, v);
		} else if (jint(ev, "exit_code", &v))
			fprintf(f, "code %" PRId64, v);
		if (juint(ev, "runtime_ns", &u)) {
			fputs(", runtime ", f);
			print_duration(f, u);
		}
	} else if (streq(type, "fork")) {
		int64_t tgid;

		if (jint(ev, "child_pid", &v)) {
			if (jint(ev, "child_tgid", &tgid) && tgid != v)
				fprintf(f, "thread %" PRId64 " of %" PRId64, v, tgid);
			else
				fprintf(f, "child %" PRId64, v);
		}
	} else if (streq(type, "open")) {
		print_escaped(f, jstr(ev, "path") ?: "?", true);
		if (jint(ev, "flags", &v)) {
			fputc(' ', f);
			print_open_flags(f, v);
		}
		if (jint(ev, "result", &v))
			print_result(f, v);
	} else if (streq(type, "connect")) {
		const char *family = jstr(ev, "family_name");

		s = jstr(ev, "address");
		if (s && family && streq(family, "inet6"))
			fprintf(f, "[%s]", s);
		else if (s)
			print_escaped(f, s, false);
		else if (family)
			print_escaped(f, family, false);
		else if (jint(ev, "family", &v))
			fprintf(f, "family %" PRId64, v);
		if (s && jint(ev, "port", &v))
			fprintf(f, ":%" PRId64, v);
		if (jint(ev, "result", &v))
			print_result(f, v);
	} else if (streq(type, "lost")) {
		if (juint(ev, "count", &u))
			fprintf(f, "count %" PRIu64, u);
	} else if (streq(type, "unknown")) {
		if (jint(ev, "type_id", &v))
			fprintf(f, "type %" PRId64 " (0x%04" PRIx64 ")", v, (uint64_t) v);
		s = jstr(ev, "payload");
		fprintf(f, ", %zu payload bytes", s ? base64_size(s) : 0);
	} else if (streq(type, "bench")) {
		if (juint(ev, "call", &u))
			fprintf(f, "call %" PRIu64, u);
		if (jint(ev, "size", &v))
			fprintf(f, ", size %" PRId64, v);
	} else
		/* A type newer than this program: show what the daemon sent. */
		print_escaped(f, line, false);
}

static void print_time(FILE *f, json_object *ev, int64_t boot_to_realtime_ns) {
	struct timespec now;
	uint64_t ts;
	int64_t ns;
	time_t sec;
	struct tm tm;

	/* Boot-time stamps are far below INT64_MAX / 2 (146 years); anything else is not one. */
	if (juint(ev, "ts", &ts) && ts < (uint64_t) INT64_MAX / 2)
		ns = (int64_t) ts + boot_to_realtime_ns;
	else {
		/* lost lines have no timestamp: they are about now. */
		clock_gettime(CLOCK_REALTIME, &now);
		ns = (int64_t) now.tv_sec * 1000000000 + now.tv_nsec;
	}
	sec = (time_t) (ns / 1000000000);
	if (!localtime_r(&sec, &tm)) {
		fputs("??:??:??.???", f);
		return;
	}
	fprintf(f, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
		(int) (ns % 1000000000 / 1000000));
}

static void print_header(FILE *f) {
	fprintf(f, "%-12s %-7s %7s %6s %-15s %s\n", "TIME", "TYPE", "PID", "UID", "COMM", "DETAILS");
}

static void print_column_int(FILE *f, json_object *ev, const char *key, int width) {
	int64_t v;

	if (jint(ev, key, &v))
		fprintf(f, " %*" PRId64, width, v);
	else
		fprintf(f, " %*s", width, "-");
}

/* One line for one event; returns -EBADMSG for a line that is not a JSON object with a type. */
static int print_event(
		FILE *f,
		json_tokener *tok,
		const char *line,
		size_t len,
		int64_t boot_to_realtime_ns) {
	json_object *ev;
	const char *type, *comm;

	json_tokener_reset(tok);
	ev = json_tokener_parse_ex(tok, line, (int) len);
	if (!ev)
		return -EBADMSG;
	type = jstr(ev, "type");
	if (!type) {
		json_object_put(ev);
		return -EBADMSG;
	}

	print_time(f, ev, boot_to_realtime_ns);
	fputc(' ', f);
	fprintf(f, "%-7.16s", type);
	print_column_int(f, ev, streq(type, "fork") ? "parent_pid" : "pid", 7);
	print_column_int(f, ev, "uid", 6);
	comm = jstr(ev, "comm");
	fputc(' ', f);
	if (comm)
		/* Padded by hand: comm may need escapes, which %-15s would not count. */
		for (size_t w = print_escaped(f, comm, false); w < 15; w++)
			fputc(' ', f);
	else
		fprintf(f, "%-15s", "-");
	fputc(' ', f);
	print_details(f, type, ev, line);
	fputc('\n', f);
	json_object_put(ev);
	return 0;
}

static int64_t boot_to_realtime(void) {
	struct timespec rt, bt;

	clock_gettime(CLOCK_BOOTTIME, &bt);
	clock_gettime(CLOCK_REALTIME, &rt);
	return ((int64_t) rt.tv_sec - bt.tv_sec) * 1000000000 + (rt.tv_nsec - bt.tv_nsec);
}

/* ---- monitor ---- */

static void monitor_help(void) {
	printf("%s monitor [OPTIONS...]\n\n"
	       "Show perfrelayd's events as they happen, one line each, until interrupted.\n\n"
	       "  -t --type=TYPE      Only events of this type (exec, exit, fork, open, connect,\n"
	       "                      bench, or a numeric type id); repeat for several\n"
	       "  -p --pid=PID        Only events of this process; repeatable\n"
	       "  -u --uid=UID        Only events of this user (number or name); repeatable\n"
	       "  -c --comm=COMM      Only events whose task name is COMM; repeatable\n"
	       "     --unit=UNIT      Only events from this systemd unit; repeatable\n"
	       "  -j --json           Print the daemon's JSON lines unchanged\n"
	       "     --socket=PATH    The event socket (default $PERFRELAY_SOCKET or %s)\n"
	       "  -h --help           Show this help\n",
	       program,
	       PERFRELAY_SOCKET_DEFAULT);
}

/* Waits for the next batch. Returns 1 when events may be readable, 0 on SIGINT/SIGTERM. */
static int wait_for_events(int client_fd, int signal_fd) {
	struct pollfd p[2] = {
		{ .fd = client_fd, .events = POLLIN },
		{ .fd = signal_fd, .events = POLLIN },
	};

	for (;;) {
		if (poll(p, ELEMENTSOF(p), -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[1].revents)
			return 0;
		return 1;
	}
}

static bool signal_pending(int signal_fd) {
	struct signalfd_siginfo si;

	return read(signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si);
}

static int monitor_run(perfrelay_client *c, bool json, int signal_fd) {
	_cleanup_(json_tokener_freep) json_tokener *tok = NULL;
	int64_t offset = boot_to_realtime();
	unsigned n = 0;
	int r;

	if (!json) {
		tok = json_tokener_new();
		if (!tok)
			return error_errno(-ENOMEM, "Failed to allocate a JSON parser");
		print_header(stdout);
	}

	for (;;) {
		const char *line;
		size_t len;

		r = perfrelay_next_json(c, &line, &len, 0);
		if (r > 0) {
			if (json) {
				fwrite(line, 1, len, stdout);
				fputc('\n', stdout);
			} else if (print_event(stdout, tok, line, len, offset) < 0) {
				fprintf(stderr, "%s: ignoring a line that is not a JSON event: ", program);
				print_escaped(stderr, line, false);
				fputc('\n', stderr);
			}
			if (++n % SIGNAL_CHECK_EVERY == 0 && signal_pending(signal_fd))
				return 0;
			continue;
		}
		if (r == 0) {
			if (fflush(stdout) != 0)
				return error_errno(-errno, "Failed to write to standard output");
			r = wait_for_events(perfrelay_fd(c), signal_fd);
			if (r == 0)
				return 0;
			if (r < 0)
				return error_errno(r, "Failed to wait for events");
			/* The clocks may have been adjusted while we slept. */
			offset = boot_to_realtime();
			continue;
		}
		fflush(stdout);
		if (r == -ESHUTDOWN)
			return error_msg("perfrelayd shut down (%s)",
					 perfrelay_client_error(c) ?: "no reason given");
		if (r == -ECONNRESET)
			return error_msg("perfrelayd closed the connection on %s",
					 perfrelay_client_socket_path(c));
		if (r == -ENOBUFS)
			return error_msg("perfrelayd disconnected this client: %s",
				     perfrelay_client_error(c) ?: "it fell behind");
		if (perfrelay_client_error(c))
			return error_errno(r, "perfrelayd ended the stream: %s", perfrelay_client_error(c));
		return error_errno(r, "Failed to read events from %s", perfrelay_client_socket_path(c));
	}
}

static int verb_monitor(int argc, char *argv[]) {
	enum { ARG_UNIT = 0x100, ARG_SOCKET };
	static const struct option options[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "type", required_argument, NULL, 't' },
		{ "pid", required_argument, NULL, 'p' },
		{ "uid", required_argument, NULL, 'u' },
		{ "comm", required_argument, NULL, 'c' },
		{ "unit", required_argument, NULL, ARG_UNIT },
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, ARG_SOCKET },
		{}
	};
	/* No option can occur more often than there are arguments. */
	_cleanup_free_ const char **types = calloc((size_t) argc, sizeof(char *));
	_cleanup_free_ const char **comms = calloc((size_t) argc, sizeof(char *));
	_cleanup_free_ const char **units = calloc((size_t) argc, sizeof(char *));
	_cleanup_free_ uint32_t *pids = calloc((size_t) argc, sizeof(uint32_t));
	_cleanup_free_ uint32_t *uids = calloc((size_t) argc, sizeof(uint32_t));
	_cleanup_(perfrelay_closep) perfrelay_client *c = NULL;
	_cleanup_close_ int signal_fd = -EBADF;
	struct perfrelay_subscription sub = {};
	const char *socket_path = NULL;
	bool json = false;
	sigset_t mask;
	int opt, r;

	if (!types || !comms || !units || !pids || !uids)
		return error_errno(-ENOMEM, "Failed to allocate");

	optind = 0;
	while ((opt = getopt_long(argc, argv, "ht:p:u:c:j", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			monitor_help();
			return 0;
		case 't':
			types[sub.n_types++] = optarg;
			break;
		case 'p':
			if (parse_u32(optarg, &pids[sub.n_pids]) < 0)
				return error_msg("--pid=%s: not a process id", optarg);
			sub.n_pids++;
			break;
		case 'u':
			r = parse_uid(optarg, &uids[sub.n_uids]);
			if (r < 0)
				return error_msg("--uid=%s: neither a numeric UID nor a known user", optarg);
			sub.n_uids++;
			break;
		case 'c':
			comms[sub.n_comms++] = optarg;
			break;
		case ARG_UNIT:
			units[sub.n_units++] = optarg;
			break;
		case 'j':
			json = true;
			break;
		case ARG_SOCKET:
			socket_path = optarg;
			break;
		default:
			return -EINVAL; /* getopt printed why */
		}
	if (optind < argc)
		return error_msg("monitor: unexpected argument '%s'", argv[optind]);

	sub.types = types;
	sub.pids = pids;
	sub.uids = uids;
	sub.comms = comms;
	sub.units = units;
	sub.format = PERFRELAY_FORMAT_JSON;
	sub.on_overflow = PERFRELAY_OVERFLOW_DROP;

	r = perfrelay_client_new(&c);
	if (r < 0)
		return error_errno(r, "Failed to allocate a client");
	r = perfrelay_connect(c, socket_path, &sub);
	if (r < 0) {
		const char *path = perfrelay_client_socket_path(c) ?: "the event socket";

		if (perfrelay_client_error(c))
			return error_msg("perfrelayd on %s refused the subscription: %s", path,
					 perfrelay_client_error(c));
		return error_errno(r, "Failed to connect to %s", path);
	}

	/* Blocked only now: until the daemon answered, ^C may simply end us. From here on the
	 * signals arrive through the signalfd and end the loop with exit status 0. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return error_errno(-errno, "Failed to block signals");
	signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (signal_fd < 0)
		return error_errno(-errno, "Failed to create a signalfd");

	r = monitor_run(c, json, signal_fd);
	if (fflush(stdout) != 0 && r >= 0)
		r = error_errno(-errno, "Failed to write to standard output");
	return r;
}

/* ---- dispatch ---- */

static int verb_help(int argc, char *argv[]);

typedef struct Verb {
	const char *name;
	int (*run)(int argc, char *argv[]);
	const char *summary;
} Verb;

static const Verb verbs[] = {
	{ "monitor", verb_monitor, "Show events as they happen" },
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
	static const struct option options[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, ARG_VERSION },
		{}
	};
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
