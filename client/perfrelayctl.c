/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl: the command-line client of perfrelayd; `monitor` streams events from the event
 * socket through libperfrelay, one human-readable line each or the raw JSON lines; `status`,
 * `stats`, `probes`, `clients` and `probe` ask the daemon over D-Bus (docs/dbus.md). */
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
#include "perfrelay.h"
#include "bus-json.h"
#if HAVE_NATS
#include "monitor-nats.h"
#include "time-util.h"
#endif

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
		{ O_SYNC, "O_SYNC" },       { O_TMPFILE, "O_TMPFILE" },     { O_CREAT, "O_CREAT" },
		{ O_EXCL, "O_EXCL" },       { O_NOCTTY, "O_NOCTTY" },       { O_TRUNC, "O_TRUNC" },
		{ O_APPEND, "O_APPEND" },   { O_NONBLOCK, "O_NONBLOCK" },   { O_DSYNC, "O_DSYNC" },
		{ O_DIRECT, "O_DIRECT" },   { O_DIRECTORY, "O_DIRECTORY" }, { O_NOFOLLOW, "O_NOFOLLOW" },
		{ O_NOATIME, "O_NOATIME" }, { O_CLOEXEC, "O_CLOEXEC" },     { O_PATH, "O_PATH" },
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
		if (json_object_object_get_ex(ev, "argv", &argv) && json_object_is_type(argv, json_type_array))
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
	fprintf(f, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (ns % 1000000000 / 1000000));
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
static int print_event(FILE *f, json_tokener *tok, const char *line, size_t len, int64_t boot_to_realtime_ns) {
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
	       "     --nats=URL       Read the fleet's events from NATS JetStream instead\n"
	       "                      (docs/fleet.md); with --stream=NAME, --host=HOST,\n"
	       "                      --since=10m, --no-follow (stop at the stream's end)\n"
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
			return error_msg(
				"perfrelayd shut down (%s)", perfrelay_client_error(c) ?: "no reason given");
		if (r == -ECONNRESET)
			return error_msg(
				"perfrelayd closed the connection on %s", perfrelay_client_socket_path(c));
		if (r == -ENOBUFS)
			return error_msg(
				"perfrelayd disconnected this client: %s",
				perfrelay_client_error(c) ?: "it fell behind");
		if (perfrelay_client_error(c))
			return error_errno(r, "perfrelayd ended the stream: %s", perfrelay_client_error(c));
		return error_errno(r, "Failed to read events from %s", perfrelay_client_socket_path(c));
	}
}

#if HAVE_NATS
struct nats_print {
	json_tokener *tok;
	bool json;
};

/* TIME is when JetStream stored the event: the sender's boot clock means nothing here. */
static int nats_print_event(const char *line, size_t len, int64_t store_minus_ts_ns, void *userdata) {
	struct nats_print *p = userdata;

	if (p->json) {
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
	} else
		print_event(stdout, p->tok, line, len, store_minus_ts_ns);
	return ferror(stdout) ? -EIO : 0;
}
#endif

static int verb_monitor(int argc, char *argv[]) {
	enum { ARG_UNIT = 0x100, ARG_SOCKET, ARG_NATS, ARG_STREAM, ARG_HOST, ARG_SINCE, ARG_NO_FOLLOW };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "type", required_argument, NULL, 't' },
						 { "pid", required_argument, NULL, 'p' },
						 { "uid", required_argument, NULL, 'u' },
						 { "comm", required_argument, NULL, 'c' },
						 { "unit", required_argument, NULL, ARG_UNIT },
						 { "json", no_argument, NULL, 'j' },
						 { "socket", required_argument, NULL, ARG_SOCKET },
						 { "nats", required_argument, NULL, ARG_NATS },
						 { "stream", required_argument, NULL, ARG_STREAM },
						 { "host", required_argument, NULL, ARG_HOST },
						 { "since", required_argument, NULL, ARG_SINCE },
						 { "no-follow", no_argument, NULL, ARG_NO_FOLLOW },
						 {} };
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
	const char *nats_url = NULL, *nats_stream = NULL, *nats_host = NULL;
	int64_t nats_since = 0;
	bool nats_no_follow = false;
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
		case ARG_NATS:
			nats_url = optarg;
			break;
		case ARG_STREAM:
			nats_stream = optarg;
			break;
		case ARG_HOST:
			nats_host = optarg;
			break;
		case ARG_SINCE:
			nats_since = -1;
#if HAVE_NATS
			if (monitor_nats_parse_since(optarg, &nats_since) < 0)
				return error_msg(
					"--since=%s: expected a number followed by s, m, h or d", optarg);
#endif
			break;
		case ARG_NO_FOLLOW:
			nats_no_follow = true;
			break;
		default:
			return -EINVAL; /* getopt printed why */
		}
	if (optind < argc)
		return error_msg("monitor: unexpected argument '%s'", argv[optind]);
	if (!nats_url && (nats_stream || nats_host || nats_since || nats_no_follow))
		return error_msg("monitor: --stream, --host, --since and --no-follow need --nats");
	if (nats_url) {
#if HAVE_NATS
		_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new();
		struct nats_print p = { .tok = tok, .json = json };
		MonitorNatsArgs a = { .url = nats_url,
				      .stream = nats_stream,
				      .host = nats_host,
				      .since_ns = nats_since,
				      .no_follow = nats_no_follow };

		if (!tok)
			return error_errno(-ENOMEM, "Failed to allocate a JSON parser");
		if (sub.n_types || sub.n_pids || sub.n_uids || sub.n_comms || sub.n_units)
			return error_msg(
				"monitor --nats: filter with --host (the stream holds what the exporters sent)");
		sigemptyset(&mask);
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGTERM);
		if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
			return error_errno(-errno, "Failed to block signals");
		signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
		if (signal_fd < 0)
			return error_errno(-errno, "Failed to create a signalfd");
		if (!json)
			print_header(stdout);
		r = monitor_nats_run(&a, nats_print_event, &p, signal_fd);
		if (fflush(stdout) != 0 && r >= 0)
			r = error_errno(-errno, "Failed to write to standard output");
		return r;
#else
		return error_msg("monitor --nats: this perfrelayctl was built without libnats");
#endif
	}

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
			return error_msg(
				"perfrelayd on %s refused the subscription: %s",
				path,
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

/* ---- D-Bus: status, probes, clients, probe ---- */

#define BUS_NAME           "org.perfrelay1"
#define BUS_PATH           "/org/perfrelay1"
#define BUS_INTERFACE      "org.perfrelay1.Manager"
#define DEFAULT_SYSTEM_BUS "unix:path=/run/dbus/system_bus_socket"


static const char *system_bus_address(void) {
	const char *a = getenv("DBUS_SYSTEM_BUS_ADDRESS");

	return a && *a ? a : DEFAULT_SYSTEM_BUS;
}

static int bus_connect(sd_bus **ret) {
	int r = sd_bus_open_system(ret);

	if (r < 0)
		return error_errno(r, "Failed to connect to the system bus (%s)", system_bus_address());
	return 0;
}

/* Names the bus, the method and the D-Bus error, with a hint for the common ones. */
static int bus_call_error(const char *method, const sd_bus_error *e, int r) {
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

static int bus_call(sd_bus *bus, const char *method, sd_bus_message **ret_reply, const char *types, ...) {
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

static int verb_status(int argc, char *argv[]) {
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 {} };
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	Status st = {};
	uint64_t t0, t1, received1 = 0, uptime, now;
	double rate;
	bool json = false;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "hj", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			status_help();
			return 0;
		case 'j':
			json = true;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("status: unexpected argument '%s'", argv[optind]);

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
		print_escaped(stdout, st.state, false);
		printf("\n   Started: %s (uptime %s)\n  Pin path: ", since, up);
		print_escaped(stdout, st.pin_path, false);
		printf("\n      CPUs: %" PRIu32 ", %" PRIu32 " reader thread%s\n    Probes:",
		       st.cpus,
		       st.readers,
		       st.readers == 1 ? "" : "s");
		if (st.n_probes == 0)
			fputs(" none", stdout);
		for (size_t i = 0; i < st.n_probes; i++) {
			fputc(' ', stdout);
			print_escaped(stdout, st.probes[i], false);
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
				print_escaped(stdout, st.features[i].name, false);
				fputs(st.features[i].available ? "=on" : "=off", stdout);
			}
			fputc('\n', stdout);
			/* Each missing feature says what it costs: the reason a user looks here. */
			for (size_t i = 0; i < st.n_features; i++) {
				if (st.features[i].available)
					continue;
				fputs("           off: ", stdout);
				print_escaped(stdout, st.features[i].name, false);
				fputs(" (Linux ", stdout);
				print_escaped(stdout, st.features[i].since, false);
				fputs("): ", stdout);
				print_escaped(stdout, st.features[i].without, false);
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

static int verb_probes(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	const char *name;
	uint64_t events;
	int enabled, r;

	if (argc > 1)
		return error_msg("probes: unexpected argument '%s'", argv[1]);
	r = bus_connect(&bus);
	if (r >= 0)
		r = bus_call(bus, "ListProbes", &reply, NULL);
	if (r < 0)
		return r;
	printf("%-10s %-9s %s\n", "PROBE", "STATE", "EVENTS");
	r = sd_bus_message_enter_container(reply, 'a', "(sbt)");
	while (r >= 0 && (r = sd_bus_message_read(reply, "(sbt)", &name, &enabled, &events)) > 0)
		printf("%-10s %-9s %" PRIu64 "\n", name, enabled ? "enabled" : "disabled", events);
	if (r < 0)
		return error_errno(r, "Failed to parse the reply of ListProbes");
	return 0;
}

typedef struct ClientRow {
	uint64_t id, sent, dropped, queued;
	uint32_t uid, pid;
	char *filter;
} ClientRow;

static int client_row_compare(const void *a, const void *b) {
	const ClientRow *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static int verb_clients(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_free_ ClientRow *rows = NULL;
	size_t n = 0;
	int r;

	if (argc > 1)
		return error_msg("clients: unexpected argument '%s'", argv[1]);
	r = bus_connect(&bus);
	if (r >= 0)
		r = bus_call(bus, "ListClients", &reply, NULL);
	if (r < 0)
		return r;
	r = sd_bus_message_enter_container(reply, 'a', "(tuusttt)");
	for (;;) {
		ClientRow row;
		const char *filter;
		ClientRow *a;

		if (r >= 0)
			r = sd_bus_message_read(
				reply,
				"(tuusttt)",
				&row.id,
				&row.uid,
				&row.pid,
				&filter,
				&row.sent,
				&row.dropped,
				&row.queued);
		if (r <= 0)
			break;
		a = realloc(rows, sizeof(*rows) * (n + 1));
		if (!a)
			return error_errno(-ENOMEM, "Failed to allocate");
		rows = a;
		row.filter = (char *) filter; /* valid while reply lives */
		rows[n++] = row;
	}
	if (r < 0)
		return error_errno(r, "Failed to parse the reply of ListClients");
	qsort(rows, n, sizeof(*rows), client_row_compare);
	printf("%6s %7s %8s %10s %8s %10s %s\n", "ID", "UID", "PID", "SENT", "DROPPED", "QUEUED", "FILTER");
	for (size_t i = 0; i < n; i++) {
		printf("%6" PRIu64 " %7" PRIu32 " %8" PRIu32 " %10" PRIu64 " %8" PRIu64 " %10" PRIu64 " ",
		       rows[i].id,
		       rows[i].uid,
		       rows[i].pid,
		       rows[i].sent,
		       rows[i].dropped,
		       rows[i].queued);
		print_escaped(stdout, rows[i].filter, false);
		fputc('\n', stdout);
	}
	return 0;
}

static int verb_probe(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	bool enable;
	int r;

	if (argc != 3 || (!streq(argv[1], "enable") && !streq(argv[1], "disable")))
		return error_msg("usage: %s probe enable|disable NAME", program);
	enable = streq(argv[1], "enable");
	r = bus_connect(&bus);
	if (r < 0)
		return r;
	return bus_call(bus, "SetProbeEnabled", NULL, "sb", argv[2], (int) enable);
}

/* ---- dispatch ---- */

/* ---- stats ---- */

static uint64_t juint_or0(json_object *o, const char *key) {
	uint64_t v = 0;

	return juint(o, key, &v) ? v : 0;
}

static void stats_print_producer(json_object *p, const char *name) {
	printf("%-8s %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
	       " %10" PRIu64 " %10" PRIu64 "\n",
	       name,
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

	printf("%-8s %12s %12s %10s %10s %10s %10s %10s %10s\n",
	       "PRODUCER",
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
	       "attempts = received + malformed + failures + crash_lost, per CPU ring, per reader and\n"
	       "for the clients. See docs/dbus.md for what each number means.\n\n"
	       "  -j --json   One JSON object, the GetStats() dictionary as is\n"
	       "  -h --help   Show this help\n",
	       program);
}

static int verb_stats(int argc, char *argv[]) {
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 {} };
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	json_object *o = NULL;
	bool json = false;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "hj", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			stats_help();
			return 0;
		case 'j':
			json = true;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("stats: unexpected argument '%s'", argv[optind]);

	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = bus_call(bus, "GetStats", &reply, NULL);
	if (r < 0)
		return r;
	r = bus_value_to_json(reply, &o);
	if (r < 0)
		return error_errno(r, "Failed to parse the GetStats() reply");
	if (json)
		puts(json_object_to_json_string_ext(
			o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	else
		stats_print(o);
	json_object_put(o);
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
