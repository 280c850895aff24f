/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl monitor: events from the socket (libperfrelay) or, with --nats, from JetStream,
 * as columns (format.c) or the raw JSON lines. */
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
#include "ctl/ctl.h"
#include "ctl/format.h"
#include "json-util.h"
#include "common/perfrelay-util.h"
#if HAVE_NATS
#include "ctl/monitor-nats.h"
#include "time-util.h"
#endif


/* Under a flood next_json() always has a line ready; look for signals this often anyway. */
#define SIGNAL_CHECK_EVERY 256u

static int64_t boot_to_realtime(void) {
	struct timespec rt, bt;

	clock_gettime(CLOCK_BOOTTIME, &bt);
	clock_gettime(CLOCK_REALTIME, &rt);
	return ((int64_t) rt.tv_sec - bt.tv_sec) * 1000000000 + (rt.tv_nsec - bt.tv_nsec);
}

static void monitor_help(void) {
	printf("%s monitor [OPTIONS...]\n\n"
	       "Show perfrelayd's events as they happen, one line each, until interrupted.\n\n"
	       "  -t --type=TYPE      Only events of this type (exec, exit, fork, open, connect,\n"
	       "                      bench, a producer's record type: 'producers --types',\n"
	       "                      or a numeric type id); repeat for several\n"
	       "  -p --pid=PID        Only events of this process; repeatable\n"
	       "  -u --uid=UID        Only events of this user (number or name); repeatable\n"
	       "  -c --comm=COMM      Only events whose task name is COMM; repeatable\n"
	       "     --unit=UNIT      Only events from this systemd unit; repeatable\n"
	       "     --container=C    Only events in this container: its name, image, or id\n"
	       "                      (12 hex digits or more); repeatable\n"
	       "     --ancestor=WHO   Only events of descendants of WHO: an exec id (16 hex\n"
	       "                      digits), a unit (NAME.service, .scope, ...) or a task\n"
	       "                      name; repeatable\n"
	       "  -j --json           Print the daemon's JSON lines unchanged\n"
	       "     --socket=PATH    The event socket (default $PERFRELAY_SOCKET or %s)\n"
	       "     --cursors        Read through the daemon's history (docs/history.md):\n"
	       "                      each JSON line carries its \"cursor\"\n"
	       "     --after-cursor=C Resume from the history after the event of cursor C,\n"
	       "                      then follow it\n"
	       "     --since=WHEN     From the history since WHEN (10m, 2h: that long ago;\n"
	       "                      @SECONDS: since the epoch), then follow it\n"
	       "     --nats=URL       Read the fleet's events from NATS JetStream instead\n"
	       "                      (docs/fleet.md); with --stream=NAME, --host=HOST,\n"
	       "                      --since=10m, --no-follow (stop at the stream's end)\n"
	       "  -h --help           Show this help\n",
	       program,
	       PERFRELAY_SOCKET_DEFAULT);
}

static void query_help(void) {
	printf("%s query [OPTIONS...]\n\n"
	       "Show the events of perfrelayd's history (docs/history.md), oldest first, and\n"
	       "exit: as journalctl shows the journal. The daemon applies the same visibility\n"
	       "as to a live subscriber (a user sees their own uid's events).\n\n"
	       "  -S --since=WHEN     Events since WHEN (10m, 2h: that long ago; @SECONDS:\n"
	       "                      since the epoch)\n"
	       "  -U --until=WHEN     Events until WHEN\n"
	       "     --after-cursor=C Events after the event of cursor C\n"
	       "  -t --type=TYPE      Only events of this type; repeatable\n"
	       "  -p --pid=PID        Only events of this process; repeatable\n"
	       "  -u --uid=UID        Only events of this user; repeatable\n"
	       "  -c --comm=COMM      Only events whose task name is COMM; repeatable\n"
	       "     --unit=UNIT      Only events from this systemd unit; repeatable\n"
	       "     --ancestor=WHO   Only events of descendants of WHO (see monitor)\n"
	       "  -o --output=MODE    short (columns, the default) or json\n"
	       "  -n --lines=N        Only the last N events\n"
	       "  -r --reverse        Newest first\n"
	       "     --cursors        JSON lines carry each event's \"cursor\"\n"
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

/* Blocks SIGINT and SIGTERM and returns a signalfd for them, so that they end the monitor's
 * loop (exit status 0) instead of killing it; a negative errno (said on stderr) on failure. */
static int exit_signals_fd(void) {
	sigset_t mask;
	int fd;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return error_errno(-errno, "Failed to block signals");
	fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fd < 0)
		return error_errno(-errno, "Failed to create a signalfd");
	return fd;
}

/* A query's lines, kept for --lines and --reverse: the last `max` (all with max 0). */
typedef struct QueryLines {
	char **lines;
	size_t n, max, first, alloc;
} QueryLines;

static int query_keep(QueryLines *q, const char *line, size_t len) {
	char *copy = strndup(line, len);

	if (!copy)
		return -ENOMEM;
	if (q->max > 0 && q->n == q->max) {
		free(q->lines[q->first]);
		q->lines[q->first] = copy;
		q->first = (q->first + 1) % q->max;
		return 0;
	}
	if (q->n == q->alloc) {
		size_t a = MAX(q->alloc * 2, (size_t) 1024);
		char **p;

		if (q->max > 0)
			a = MIN(a, q->max);
		p = reallocarray(q->lines, a, sizeof(char *));
		if (!p) {
			free(copy);
			return -ENOMEM;
		}
		q->lines = p;
		q->alloc = a;
	}
	q->lines[q->n++] = copy;
	return 0;
}

static void print_line(bool json, json_tokener *tok, const char *line, size_t len, int64_t offset) {
	if (json) {
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
	} else if (format_event(stdout, tok, line, len, offset) < 0) {
		fprintf(stderr, "%s: ignoring a line that is not a JSON event: ", program);
		format_escaped(stderr, line, false);
		fputc('\n', stderr);
	}
}

static void query_print(QueryLines *q, bool json, json_tokener *tok, bool reverse, int64_t offset) {
	for (size_t i = 0; i < q->n; i++) {
		size_t k = (q->first + (reverse ? q->n - 1 - i : i)) % q->n;

		print_line(json, tok, q->lines[k], strlen(q->lines[k]), offset);
	}
	for (size_t i = 0; i < q->n; i++)
		free(q->lines[i]);
	free(q->lines);
}

static int monitor_run(perfrelay_client *c, bool json, int signal_fd, QueryLines *q, bool reverse) {
	_cleanup_(json_tokener_freep) json_tokener *tok = NULL;
	int64_t offset = boot_to_realtime();
	unsigned n = 0;
	int r;

	if (!json) {
		tok = json_tokener_new();
		if (!tok)
			return error_errno(-ENOMEM, "Failed to allocate a JSON parser");
		format_header(stdout);
	}

	for (;;) {
		const char *line;
		size_t len;

		r = perfrelay_next_json(c, &line, &len, 0);
		if (r > 0) {
			if (!q)
				print_line(json, tok, line, len, offset);
			else if (query_keep(q, line, len) < 0)
				return error_errno(-ENOMEM, "Failed to keep the query's lines");
			if (++n % SIGNAL_CHECK_EVERY == 0 && signal_pending(signal_fd))
				return 0;
			continue;
		}
		if (r == -ECONNRESET && q) {
			/* The query's end: the daemon closes the stream where the history ends. */
			query_print(q, json, tok, reverse, offset);
			return 0;
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
		format_event(stdout, p->tok, line, len, store_minus_ts_ns);
	return ferror(stdout) ? -EIO : 0;
}
#endif

/* What `perfrelayctl monitor` was asked: the subscription's lists (room for one entry per
 * argument: no option can occur more often) and where the events come from. */
typedef struct MonitorArgs {
	struct perfrelay_subscription sub;
	const char **types, **comms, **units, **anc_comms, **anc_ids, **anc_units, **containers;
	size_t n_containers;
	uint32_t *pids, *uids;
	const char *socket_path;
	bool json;
	const char *nats_url, *nats_stream, *nats_host;
	int64_t nats_since;
	bool nats_no_follow;
	/* The history (docs/history.md). */
	bool query, cursors, reverse, history;
	const char *since, *until;
	size_t lines;
	struct perfrelay_history h;
} MonitorArgs;

static void monitor_args_done(MonitorArgs *a) {
	free(a->types);
	free(a->comms);
	free(a->units);
	free(a->containers);
	free(a->anc_comms);
	free(a->anc_ids);
	free(a->anc_units);
	free(a->pids);
	free(a->uids);
}

static int monitor_args_alloc(MonitorArgs *a, int argc) {
	size_t n = (size_t) argc;

	a->types = calloc(n, sizeof(char *));
	a->comms = calloc(n, sizeof(char *));
	a->units = calloc(n, sizeof(char *));
	a->containers = calloc(n, sizeof(char *));
	a->anc_comms = calloc(n, sizeof(char *));
	a->anc_ids = calloc(n, sizeof(char *));
	a->anc_units = calloc(n, sizeof(char *));
	a->pids = calloc(n, sizeof(uint32_t));
	a->uids = calloc(n, sizeof(uint32_t));
	if (!a->types || !a->comms || !a->units || !a->containers || !a->anc_comms || !a->anc_ids ||
	    !a->anc_units || !a->pids || !a->uids)
		return error_errno(-ENOMEM, "Failed to allocate");
	return 0;
}

/* WHEN of --since and --until: a span ago (10m) or @SECONDS since the epoch, into CLOCK_REALTIME ns. */
static int parse_when(const char *s, uint64_t *ret) {
	int64_t span;

	if (s[0] == '@') {
		char *end;
		double d;

		errno = 0;
		d = strtod(s + 1, &end);
		if (errno || end == s + 1 || *end || !(d >= 0) || d > 17179869184.0)
			return -EINVAL;
		*ret = (uint64_t) (d * 1e9);
		return 0;
	}
	if (parse_span(s, &span) < 0 || span < 0)
		return -EINVAL;
	{
		struct timespec ts;
		uint64_t now;

		clock_gettime(CLOCK_REALTIME, &ts);
		now = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
		*ret = now > (uint64_t) span ? now - (uint64_t) span : 1;
	}
	return 0;
}

/* Returns 0 to go on, 1 when --help was shown, or a negative errno (the message written). */
static int monitor_parse_args(int argc, char *argv[], MonitorArgs *a) {
	enum {
		ARG_UNIT = 0x100,
		ARG_ANCESTOR,
		ARG_CONTAINER,
		ARG_SOCKET,
		ARG_NATS,
		ARG_STREAM,
		ARG_HOST,
		ARG_SINCE,
		ARG_NO_FOLLOW,
		ARG_CURSORS,
		ARG_AFTER_CURSOR,
	};
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "type", required_argument, NULL, 't' },
						 { "pid", required_argument, NULL, 'p' },
						 { "uid", required_argument, NULL, 'u' },
						 { "comm", required_argument, NULL, 'c' },
						 { "unit", required_argument, NULL, ARG_UNIT },
						 { "container", required_argument, NULL, ARG_CONTAINER },
						 { "ancestor", required_argument, NULL, ARG_ANCESTOR },
						 { "json", no_argument, NULL, 'j' },
						 { "socket", required_argument, NULL, ARG_SOCKET },
						 { "nats", required_argument, NULL, ARG_NATS },
						 { "stream", required_argument, NULL, ARG_STREAM },
						 { "host", required_argument, NULL, ARG_HOST },
						 { "since", required_argument, NULL, ARG_SINCE },
						 { "no-follow", no_argument, NULL, ARG_NO_FOLLOW },
						 { "cursors", no_argument, NULL, ARG_CURSORS },
						 { "after-cursor", required_argument, NULL, ARG_AFTER_CURSOR },
						 { "until", required_argument, NULL, 'U' },
						 { "output", required_argument, NULL, 'o' },
						 { "lines", required_argument, NULL, 'n' },
						 { "reverse", no_argument, NULL, 'r' },
						 {} };
	struct perfrelay_subscription *sub = &a->sub;
	int opt, r;

	r = monitor_args_alloc(a, argc);
	if (r < 0)
		return r;
	optind = 0;
	while ((opt = getopt_long(
			argc, argv, a->query ? "ht:p:u:c:jS:U:o:n:r" : "ht:p:u:c:j", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			if (a->query)
				query_help();
			else
				monitor_help();
			return 1;
		case 'S':
			a->since = optarg;
			break;
		case 'U':
			if (!a->query)
				return error_msg("monitor: --until is query's (perfrelayctl query)");
			a->until = optarg;
			break;
		case 'o':
			if (!a->query)
				return error_msg("monitor: --output is query's; monitor has --json");
			if (streq(optarg, "json"))
				a->json = true;
			else if (!streq(optarg, "short"))
				return error_msg("--output=%s: expected short or json", optarg);
			break;
		case 'n':
			if (!a->query)
				return error_msg("monitor: --lines is query's (perfrelayctl query)");
			{
				uint32_t n;

				if (parse_u32(optarg, &n) < 0 || n == 0)
					return error_msg(
						"--lines=%s: expected a number of events above 0", optarg);
				a->lines = n;
			}
			break;
		case 'r':
			if (!a->query)
				return error_msg("monitor: --reverse is query's (perfrelayctl query)");
			a->reverse = true;
			break;
		case ARG_CURSORS:
			a->cursors = true;
			break;
		case ARG_AFTER_CURSOR:
			a->h.after_cursor = optarg;
			break;
		case 't':
			a->types[sub->n_types++] = optarg;
			break;
		case 'p':
			if (parse_u32(optarg, &a->pids[sub->n_pids]) < 0)
				return error_msg("--pid=%s: not a process id", optarg);
			sub->n_pids++;
			break;
		case 'u':
			r = parse_uid(optarg, &a->uids[sub->n_uids]);
			if (r < 0)
				return error_msg("--uid=%s: neither a numeric UID nor a known user", optarg);
			sub->n_uids++;
			break;
		case 'c':
			a->comms[sub->n_comms++] = optarg;
			break;
		case ARG_UNIT:
			a->units[sub->n_units++] = optarg;
			break;
		case ARG_CONTAINER:
			a->containers[a->n_containers++] = optarg;
			break;
		case ARG_ANCESTOR:
			perfrelay_add_ancestor(sub, a->anc_comms, a->anc_ids, a->anc_units, optarg);
			break;
		case 'j':
			a->json = true;
			break;
		case ARG_SOCKET:
			a->socket_path = optarg;
			break;
		case ARG_NATS:
			a->nats_url = optarg;
			break;
		case ARG_STREAM:
			a->nats_stream = optarg;
			break;
		case ARG_HOST:
			a->nats_host = optarg;
			break;
		case ARG_SINCE:
			a->since = optarg;
			break;
		case ARG_NO_FOLLOW:
			a->nats_no_follow = true;
			break;
		default:
			return -EINVAL; /* getopt printed why */
		}
	if (optind < argc)
		return error_msg("%s: unexpected argument '%s'", a->query ? "query" : "monitor", argv[optind]);
	if (a->nats_url && a->since) {
		a->nats_since = -1;
#if HAVE_NATS
		if (parse_span(a->since, &a->nats_since) < 0)
			return error_msg("--since=%s: expected a number followed by s, m, h or d", a->since);
#endif
		a->since = NULL;
	}
	if (!a->nats_url && (a->nats_stream || a->nats_host || a->nats_no_follow))
		return error_msg("monitor: --stream, --host and --no-follow need --nats");
	if (a->nats_url && (a->cursors || a->h.after_cursor))
		return error_msg("monitor: --cursors and --after-cursor read the daemon's history, not --nats");
	if (a->since && parse_when(a->since, &a->h.since_ns) < 0)
		return error_msg(
			"--since=%s: expected a span ago (10m, 2h, 1d) or @SECONDS since the epoch", a->since);
	if (a->until && parse_when(a->until, &a->h.until_ns) < 0)
		return error_msg(
			"--until=%s: expected a span ago (10m, 2h, 1d) or @SECONDS since the epoch", a->until);
	if (a->h.since_ns && a->h.after_cursor)
		return error_msg(
			"%s: --since and --after-cursor both say where to begin: give one",
			a->query ? "query" : "monitor");
	if (a->cursors)
		a->h.flags |= PERFRELAY_HISTORY_CURSORS;
	if (a->query)
		a->h.flags |= PERFRELAY_HISTORY_NO_FOLLOW;
	a->history = a->query || a->cursors || a->h.after_cursor || a->h.since_ns;
	return 0;
}

/* monitor --nats: the fleet's events from JetStream (monitor-nats.c). */
static int monitor_from_nats(const MonitorArgs *a) {
#if HAVE_NATS
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new();
	_cleanup_close_ int signal_fd = -EBADF;
	struct nats_print p = { .tok = tok, .json = a->json };
	const struct perfrelay_subscription *sub = &a->sub;
	MonitorNatsArgs n = { .url = a->nats_url,
			      .stream = a->nats_stream,
			      .host = a->nats_host,
			      .since_ns = a->nats_since,
			      .no_follow = a->nats_no_follow };
	int r;

	if (!tok)
		return error_errno(-ENOMEM, "Failed to allocate a JSON parser");
	if (sub->n_types || sub->n_pids || sub->n_uids || sub->n_comms || sub->n_units || a->n_containers ||
	    sub->n_ancestor_comms + sub->n_ancestor_exec_ids + sub->n_ancestor_units > 0)
		return error_msg(
			"monitor --nats: filter with --host (the stream holds what the exporters sent)");
	signal_fd = exit_signals_fd();
	if (signal_fd < 0)
		return signal_fd;
	if (!a->json)
		format_header(stdout);
	r = monitor_nats_run(&n, nats_print_event, &p, signal_fd);
	if (fflush(stdout) != 0 && r >= 0)
		r = error_errno(-errno, "Failed to write to standard output");
	return r;
#else
	return error_msg("monitor --nats: this perfrelayctl was built without libnats");
#endif
}

/* The events of the daemon's socket, as the subscription asks. */
static int monitor_from_socket(MonitorArgs *a) {
	_cleanup_(perfrelay_closep) perfrelay_client *c = NULL;
	_cleanup_close_ int signal_fd = -EBADF;
	struct perfrelay_subscription *sub = &a->sub;
	int r;

	sub->types = a->types;
	sub->pids = a->pids;
	sub->uids = a->uids;
	sub->comms = a->comms;
	sub->units = a->units;
	sub->ancestor_comms = a->anc_comms;
	sub->ancestor_exec_ids = a->anc_ids;
	sub->ancestor_units = a->anc_units;
	sub->format = PERFRELAY_FORMAT_JSON;
	sub->on_overflow = PERFRELAY_OVERFLOW_DROP;
	if (a->history)
		sub->history = &a->h;

	r = perfrelay_client_new(&c);
	if (r < 0)
		return error_errno(r, "Failed to allocate a client");
	r = perfrelay_client_set_containers(c, a->containers, a->n_containers);
	if (r < 0)
		return error_errno(r, "--container: at most %u containers", PERFRELAY_CONTAINERS_MAX);
	r = perfrelay_connect(c, a->socket_path, sub);
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
	signal_fd = exit_signals_fd();
	if (signal_fd < 0)
		return signal_fd;

	{
		QueryLines q = { .max = a->lines };

		r = monitor_run(c, a->json, signal_fd, a->query ? &q : NULL, a->reverse);
	}
	if (fflush(stdout) != 0 && r >= 0)
		r = error_errno(-errno, "Failed to write to standard output");
	return r;
}

int verb_query(int argc, char *argv[]) {
	MonitorArgs a = { .query = true };
	int r;

	r = monitor_parse_args(argc, argv, &a);
	if (r == 0)
		r = monitor_from_socket(&a);
	monitor_args_done(&a);
	return r > 0 ? 0 : r;
}

int verb_monitor(int argc, char *argv[]) {
	MonitorArgs a = {};
	int r;

	r = monitor_parse_args(argc, argv, &a);
	if (r == 0)
		r = a.nats_url ? monitor_from_nats(&a) : monitor_from_socket(&a);
	monitor_args_done(&a);
	return r > 0 ? 0 : r;
}
