/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export: an unprivileged client of perfrelayd's event socket (binary format) that
 * publishes every event to its targets (NATS JetStream, OTLP, a file, the journal), with its loss
 * counted (docs/export.md). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "export/export-config.h"
#include "export/export-resume.h"
#include "common/export-frame.h"
#include "macro.h"
#include "export/target.h"
#include "perfrelay-config.h"
#include "common/perfrelay-util.h"
#include "time-util.h"

#define CONFIG_DEFAULT    "/etc/perfrelay/export.conf"
#define STATS_INTERVAL_MS 1000
/* --input: records offered between two rounds of the targets' work. */
#define INPUT_ROUND       256u
/* How long events gather between two reads of the socket while they flow, in ms: a round per
 * millisecond at most, however the daemon's writes fall. */
#define GATHER_MS         4
/* Descriptors the targets may ask the loop to wait on. */
#define WAIT_FDS_MAX      64u


static const char *program = "perfrelay-export";

static void help(void) {
	printf("%s [OPTIONS...]\n\n"
	       "Publish perfrelayd's events to NATS JetStream, OTLP collectors, a file or the journal\n"
	       "(docs/export.md). SIGHUP reopens the file target's Path=.\n\n"
	       "     --config=FILE     Configuration (default %s, plus FILE.d/*.conf)\n"
	       "     --socket=PATH     The event socket (overrides Socket=)\n"
	       "     --stats-file=PATH Where the counters are written (overrides StatsFile=)\n"
	       "     --input=FILE      Export the binary frames in FILE (u32 length + record, the\n"
	       "                       socket's binary format, unit frames too) instead of the\n"
	       "                       socket, then exit once all is acknowledged or dropped\n"
	       "     --stats-json      Print the counters of the running (or last) exporter from\n"
	       "                       its stats file and exit\n"
	       "  -h --help           Show this help\n",
	       program,
	       CONFIG_DEFAULT);
}

static const ExportTargetType *const target_types[_EXPORT_TARGET_MAX] = {
#define EXPORT_TARGET_TYPE(name) [EXPORT_TARGET_INDEX_##name] = &export_target_##name,
	EXPORT_TARGETS(EXPORT_TARGET_TYPE)
#undef EXPORT_TARGET_TYPE
};

/* The targets Targets= names, each with its own queue and counters; every record read is
 * offered to each. */
typedef struct Targets {
	const ExportTargetType *type[_EXPORT_TARGET_MAX];
	void *t[_EXPORT_TARGET_MAX];
	size_t n;
	uint64_t offered;     /* records read from the socket or --input */
	uint64_t daemon_lost; /* events the daemon dropped for this client (its lost notices) */
	bool signalled;       /* SIGTERM or SIGINT came */
	ExportResume *resume; /* Resume=yes: the cursor, else NULL */
} Targets;

#define FOREACH_TARGET(e, i) for (size_t i = 0; i < (e)->n; i++)

/* now: CLOCK_MONOTONIC ms, read once per round of records by the caller. */
static void targets_offer(Targets *e, ExportEvent *ev, uint64_t now) {
	ev->seq = ++e->offered;
	FOREACH_TARGET(e, i)
		e->type[i]->offer(e->t[i], ev, now);
}

/* The seq of the oldest event a target still holds, UINT64_MAX when none does. */
static uint64_t targets_oldest_held(Targets *e) {
	uint64_t low = UINT64_MAX;

	FOREACH_TARGET(e, i)
		if (e->type[i]->oldest_held)
			low = MIN(low, e->type[i]->oldest_held(e->t[i], e->offered));
	return low;
}

/* Resume=yes: the cursor of what every target is done with goes to CursorFile=. */
static void resume_save(Targets *e) {
	int r;

	if (!e->resume)
		return;
	r = export_resume_save(e->resume, targets_oldest_held(e));
	if (r < 0 && e->resume->save_errors == 1)
		fprintf(stderr, "%s: cannot write CursorFile= %s: %s\n", program, e->resume->path, strerror(-r));
}

static void targets_poll(Targets *e) {
	uint64_t now = now_msec(CLOCK_MONOTONIC);

	FOREACH_TARGET(e, i)
		e->type[i]->poll(e->t[i], now);
}

static bool targets_idle(Targets *e) {
	FOREACH_TARGET(e, i)
		if (!e->type[i]->idle(e->t[i]))
			return false;
	return true;
}

static bool targets_have_room(Targets *e) {
	FOREACH_TARGET(e, i)
		if (!e->type[i]->has_room(e->t[i]))
			return false;
	return true;
}

/* The targets' descriptors after fds[0..n), and the poll's timeout lowered to when one of them is
 * due; returns the new count. */
static size_t targets_wait_fds(Targets *e, struct pollfd *fds, size_t n, size_t max, int *timeout_ms) {
	FOREACH_TARGET(e, i)
		if (e->type[i]->wait_fds)
			n += e->type[i]->wait_fds(e->t[i], fds + n, max - n, timeout_ms);
	return n;
}

static void targets_unstick(Targets *e) {
	FOREACH_TARGET(e, i)
		if (e->type[i]->unstick)
			e->type[i]->unstick(e->t[i]);
}

static void targets_reopen(Targets *e) {
	FOREACH_TARGET(e, i)
		if (e->type[i]->reopen)
			e->type[i]->reopen(e->t[i]);
}

static void targets_flush(Targets *e) {
	FOREACH_TARGET(e, i)
		e->type[i]->flush(e->t[i]);
}

static void targets_abandon(Targets *e) {
	FOREACH_TARGET(e, i)
		e->type[i]->abandon(e->t[i]);
}

static void targets_figures(Targets *e, ExportStats *stats, const char **names) {
	FOREACH_TARGET(e, i) {
		e->type[i]->figures(e->t[i], &stats[i]);
		names[i] = e->type[i]->name;
	}
}

/* Opens the targets cfg names, in EXPORT_TARGETS' order. */
static int targets_open(Targets *e, const ExportContext *ctx) {
	for (size_t i = 0; i < _EXPORT_TARGET_MAX; i++) {
		int r;

		if (!(ctx->cfg->targets & (1u << i)))
			continue;
		r = target_types[i]->open(ctx, &e->t[e->n]);
		if (r < 0)
			return r;
		e->type[e->n++] = target_types[i];
	}
	return 0;
}

static void targets_close(Targets *e) {
	FOREACH_TARGET(e, i)
		e->type[i]->close(e->t[i]);
	e->n = 0;
}

/* Writes the counters atomically (temporary file + rename) so a reader never sees half. */
static int stats_save(Targets *e, const char *path) {
	char tmp[4096];
	ExportStats stats[_EXPORT_TARGET_MAX];
	const char *names[_EXPORT_TARGET_MAX];
	FILE *f;
	int r;

	resume_save(e);
	if (!path)
		return 0;
	targets_figures(e, stats, names);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f)
		return -errno;
	r = export_stats_write_json(e->offered, e->daemon_lost, e->resume, names, stats, e->n, f);
	if (fclose(f) != 0 && r >= 0)
		r = -errno;
	if (r >= 0 && rename(tmp, path) < 0)
		r = -errno;
	return r;
}

/* One line per target on stderr (the journal's, under systemd) at exit. */
static void report(Targets *e) {
	ExportStats s[_EXPORT_TARGET_MAX];
	const char *names[_EXPORT_TARGET_MAX];

	targets_figures(e, s, names);
	FOREACH_TARGET(e, i)
		fprintf(stderr,
			"%s: %s: offered %" PRIu64 ", exported %" PRIu64 " (%" PRIu64
			" duplicates), dropped %" PRIu64 ", retried %" PRIu64 "\n",
			program,
			names[i],
			s[i].offered,
			s[i].exported,
			s[i].duplicates,
			s[i].dropped,
			s[i].retried);
}

static int read_boot_id(char *buf, size_t size) {
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	if (!f)
		return -errno;
	if (!fgets(buf, (int) size, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* Reads the signals that came: SIGHUP reopens what the targets write to (a file logrotate
 * moved); true when SIGTERM or SIGINT is among them. */
static bool signal_pending(int signal_fd, Targets *e) {
	struct signalfd_siginfo si;
	bool stop = false;

	while (read(signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			targets_reopen(e);
		else
			stop = true;
	}
	e->signalled |= stop;
	return stop;
}

/* Publishes what is left until everything is acknowledged or dropped, at most `timeout_ms`
 * (UINT64_MAX: as long as MaxRetries= lets it take), then counts what is left as
 * dropped_shutdown. A second signal ends it at once. */
static void drain(Targets *e, uint64_t timeout_ms, const char *stats_file, int signal_fd) {
	uint64_t start = now_msec(CLOCK_MONOTONIC), last = 0;

	/* Nothing more comes: the open batches go now. */
	targets_flush(e);
	while (!targets_idle(e) && now_msec(CLOCK_MONOTONIC) - start < timeout_ms) {
		targets_poll(e);
		if (now_msec(CLOCK_MONOTONIC) >= last + STATS_INTERVAL_MS) {
			stats_save(e, stats_file);
			last = now_msec(CLOCK_MONOTONIC);
		}
		if (poll(&(struct pollfd){ .fd = signal_fd, .events = POLLIN }, 1, 1) > 0 &&
		    signal_pending(signal_fd, e))
			break; /* a (second) signal: stop waiting */
	}
	targets_abandon(e);
}

static int run_input(Targets *e, const char *input, const char *stats_file, int signal_fd) {
	_cleanup_close_ int fd = -EBADF;
	struct stat st;
	const uint8_t *map;
	size_t pos = 0, at = 0, n = 0;
	uint64_t last = 0, now = 0;
	ExportRecord rec;
	int k, r = 0;

	fd = open(input, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "%s: cannot read %s: %m\n", program, input);
		return -errno;
	}
	if (st.st_size == 0)
		return 0;
	map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	/* The socket's binary frames, unit frames included: the batch format is the same. */
	while ((k = export_batch_next(map, (size_t) st.st_size, &pos, &rec)) > 0) {
		/* Waits for room instead of dropping: a file can wait, unlike the daemon. */
		while (!targets_have_room(e)) {
			struct pollfd p[1 + WAIT_FDS_MAX] = { { .fd = signal_fd, .events = POLLIN } };
			int timeout = 1;
			size_t n_fds;

			targets_unstick(e);
			targets_poll(e);
			n_fds = targets_wait_fds(e, p, 1, ELEMENTSOF(p), &timeout);
			if (poll(p, n_fds, timeout) > 0 && p[0].revents && signal_pending(signal_fd, e)) {
				munmap((void *) map, (size_t) st.st_size);
				return 0;
			}
		}
		if (n % INPUT_ROUND == 0)
			now = now_msec(CLOCK_MONOTONIC);
		targets_offer(
			e,
			&(ExportEvent){
				.hdr = &rec.hdr,
				.rec = rec.rec,
				.size = rec.size,
				.unit = rec.unit[0] ? rec.unit : NULL,
			},
			now);
		at = pos;
		/* The targets' work once per round of records, as for the socket: polling their
		 * connections per record would cost a system call each. */
		if (++n % INPUT_ROUND == 0)
			targets_poll(e);
		if (now >= last + STATS_INTERVAL_MS) {
			stats_save(e, stats_file);
			last = now;
			/* A replay that never waits for room still stops at a signal (the drain
			 * then gives up at once, as after a signal while waiting). */
			if (poll(&(struct pollfd){ .fd = signal_fd, .events = POLLIN }, 1, 0) > 0 &&
			    signal_pending(signal_fd, e))
				break;
		}
	}
	if (k < 0) {
		fprintf(stderr, "%s: %s: not a perfrelay frame at offset %zu\n", program, input, at);
		r = -EBADMSG;
	}
	munmap((void *) map, (size_t) st.st_size);
	return r;
}

static int run_socket(
	Targets *e, const ExportConfig *cfg, const char *socket_path, const char *stats_file, int signal_fd) {
	_cleanup_(perfrelay_closep) perfrelay_client *c = NULL;
	struct perfrelay_subscription sub = {
		.types = (const char *const *) cfg->types,
		.n_types = cfg->n_types,
		.units = (const char *const *) cfg->units,
		.n_units = cfg->n_units,
		.format = PERFRELAY_FORMAT_BINARY,
		.on_overflow = PERFRELAY_OVERFLOW_DROP,
		/* Exported events carry their unit; an Ancestors= filter fails closed: an event
		 * whose lineage the daemon cannot walk (an ancestor pushed out of its table) is
		 * exported rather than silently not. */
		.flags = PERFRELAY_SUBSCRIBE_UNITS | PERFRELAY_SUBSCRIBE_ANCESTOR_INCOMPLETE,
	};
	const char *anc_comms[EXPORT_LIST_MAX], *anc_ids[EXPORT_LIST_MAX], *anc_units[EXPORT_LIST_MAX];
	struct perfrelay_history history = { .flags = PERFRELAY_HISTORY_CURSORS };
	char cursor[PERFRELAY_CURSOR_MAX] = "";
	uint64_t last = 0, cursor_seq = 0;
	int r;

	for (size_t i = 0; i < cfg->n_ancestors; i++)
		perfrelay_add_ancestor(&sub, anc_comms, anc_ids, anc_units, cfg->ancestors[i]);
	sub.ancestor_comms = anc_comms;
	sub.ancestor_exec_ids = anc_ids;
	sub.ancestor_units = anc_units;
	if (e->resume) {
		/* From the history: after the saved cursor, or from the first start's time. */
		if (export_resume_since_ns(e->resume, &history.since_ns) <= 0)
			history.after_cursor = e->resume->saved[0] ? e->resume->saved : NULL;
		sub.history = &history;
	}
	r = perfrelay_client_new(&c);
	if (r < 0)
		return r;
	r = perfrelay_client_set_containers(c, (const char *const *) cfg->containers, cfg->n_containers);
	if (r < 0)
		return r;
	r = perfrelay_connect(c, socket_path, &sub);
	if (r < 0 && history.after_cursor && perfrelay_client_error(c) &&
	    strstr(perfrelay_client_error(c), "after_cursor")) {
		/* A cursor of a history that is no more (HistoryPath= replaced) or that never
		 * held it: nothing after it can be found, so on from the history's end, said. */
		snprintf(e->resume->refused, sizeof(e->resume->refused), "%s", perfrelay_client_error(c));
		fprintf(stderr,
			"%s: the daemon refused CursorFile= %s (%s): going on from the history's end\n",
			program,
			e->resume->path,
			e->resume->refused);
		e->resume->saved[0] = 0;
		history.after_cursor = NULL;
		c = perfrelay_close(c);
		r = perfrelay_client_new(&c);
		if (r < 0)
			return r;
		r = perfrelay_client_set_containers(
			c, (const char *const *) cfg->containers, cfg->n_containers);
		if (r < 0)
			return r;
		r = perfrelay_connect(c, socket_path, &sub);
	}
	if (r < 0) {
		fprintf(stderr,
			"%s: cannot subscribe on %s: %s\n",
			program,
			perfrelay_client_socket_path(c) ?: "the event socket",
			perfrelay_client_error(c) ?: strerror(-r));
		return r;
	}
	for (;;) {
		struct pollfd p[2 + WAIT_FDS_MAX] = {
			{ .fd = perfrelay_fd(c), .events = POLLIN },
			{ .fd = signal_fd, .events = POLLIN },
		};
		const struct perfrelay_hdr *hdr;
		const void *payload;
		uint64_t now = now_msec(CLOCK_MONOTONIC);
		size_t psize, n_fds;
		unsigned n = 0;
		int timeout;

		/* Whatever is readable now, then the publishing work; the daemon's queue for us
		 * absorbs bursts, and our own queue bounds what waits for JetStream. */
		while (n++ < 4096 && (r = perfrelay_next_record(c, &hdr, &payload, &psize, 0)) > 0) {
			if (hdr->type == PERFRELAY_TYPE_LOST) {
				uint64_t count;

				memcpy(&count, payload, sizeof(count));
				if (e->resume && psize > sizeof(count))
					/* The history's gap, its reason behind the count. */
					export_resume_lost(
						e->resume,
						count,
						(const char *) payload + sizeof(count),
						psize - sizeof(count));
				else
					e->daemon_lost += count;
				continue;
			}
			/* libperfrelay hands out the record whole (header, payload, a packet's
			 * bytes) in one piece: payload follows hdr. */
			targets_offer(
				e,
				&(ExportEvent){
					.hdr = hdr,
					.rec = hdr,
					.size = sizeof(*hdr) + psize,
					.unit = perfrelay_record_unit(c),
					.client = c,
				},
				now);
			if (e->resume && perfrelay_record_cursor(c)) {
				snprintf(cursor, sizeof(cursor), "%s", perfrelay_record_cursor(c));
				cursor_seq = e->offered;
			}
		}
		/* The round's last event marks where a restart may begin once it is done. */
		if (cursor_seq > 0) {
			export_resume_mark(e->resume, cursor_seq, cursor);
			cursor_seq = 0;
		}
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "%s: the event stream ended: %s\n", program, strerror(-r));
			return r;
		}
		targets_poll(e);
		if (now_msec(CLOCK_MONOTONIC) >= last + STATS_INTERVAL_MS) {
			stats_save(e, stats_file);
			last = now_msec(CLOCK_MONOTONIC);
		}
		if (r > 0)
			continue; /* more was buffered than one round takes */
		/* The targets' connections wake us (a request to write on, an answer); acks arrive
		 * on nats.c's thread, and batches wait a few ms: with work waiting, look again
		 * soon; idle, only the timers (stats) need a wakeup. */
		timeout = targets_idle(e) ? 100 : 2;
		if (n > 1) {
			/* The round found records: more gather for GATHER_MS before the next read
			 * (each round costs system calls, a few µs; the daemon's queue for us holds
			 * them meanwhile). A round that found none waits for the socket. */
			p[0].fd = -1;
			timeout = MIN(timeout, GATHER_MS);
		}
		n_fds = targets_wait_fds(e, p, 2, ELEMENTSOF(p), &timeout);
		if (poll(p, n_fds, timeout) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents && signal_pending(signal_fd, e))
			return 0;
	}
}

int main(int argc, char *argv[]) {
	enum { ARG_CONFIG = 0x100, ARG_SOCKET, ARG_STATS_FILE, ARG_INPUT, ARG_STATS_JSON };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "config", required_argument, NULL, ARG_CONFIG },
						 { "socket", required_argument, NULL, ARG_SOCKET },
						 { "stats-file", required_argument, NULL, ARG_STATS_FILE },
						 { "input", required_argument, NULL, ARG_INPUT },
						 { "stats-json", no_argument, NULL, ARG_STATS_JSON },
						 {} };
	const char *config_path = CONFIG_DEFAULT, *socket_path = NULL, *stats_file = NULL, *input = NULL;
	_cleanup_free_ char *error = NULL, *dropin = NULL;
	_cleanup_close_ int signal_fd = -EBADF;
	ExportConfig *cfg = NULL;
	Targets t = {};
	ExportResume *resume = NULL;
	ExportContext ctx;
	char host[256], boot_id[64];
	bool stats_json = false;
	sigset_t mask;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return 0;
		case ARG_CONFIG:
			config_path = optarg;
			break;
		case ARG_SOCKET:
			socket_path = optarg;
			break;
		case ARG_STATS_FILE:
			stats_file = optarg;
			break;
		case ARG_INPUT:
			input = optarg;
			break;
		case ARG_STATS_JSON:
			stats_json = true;
			break;
		default:
			return 2;
		}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", program, argv[optind]);
		return 2;
	}

	r = export_config_new(&cfg);
	if (r < 0 || asprintf(&dropin, "%s.d", config_path) < 0) {
		fprintf(stderr, "%s: out of memory\n", program);
		return 1;
	}
	r = export_config_load(cfg, config_path, dropin, &error);
	/* The unit's StateDirectory= is where the cursor lives unless CursorFile= says. */
	if (r >= 0 && cfg->resume && !cfg->cursor_file && getenv("STATE_DIRECTORY") &&
	    asprintf(
		    &cfg->cursor_file,
		    "%.*s/cursor",
		    (int) strcspn(getenv("STATE_DIRECTORY"), ":"),
		    getenv("STATE_DIRECTORY")) < 0)
		r = -ENOMEM;
	if (r >= 0)
		r = export_config_check(cfg, &error);
	/* Relative names of secrets are credentials: LoadCredential= puts them in
	 * $CREDENTIALS_DIRECTORY, readable by this service only. */
	if (r >= 0)
		r = export_config_resolve_credentials(cfg, getenv("CREDENTIALS_DIRECTORY"));
	if (r >= 0 && !stats_json)
		r = export_config_load_headers(cfg, &error);
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", program, error ?: strerror(-r));
		export_config_free(cfg);
		return 1;
	}
	stats_file = stats_file ?: cfg->stats_file;
	/* A file is batched by size alone, so that replaying it makes the same messages with the
	 * same ids, which JetStream's duplicate window recognises (docs/export.md). */
	if (input)
		cfg->batch_delay_ms = UINT64_MAX;
	socket_path = socket_path ?: cfg->socket_path;

	if (stats_json) {
		char buf[16384];
		size_t n;
		FILE *f;

		f = stats_file ? fopen(stats_file, "re") : NULL;
		if (!stats_file)
			fprintf(stderr, "%s: no stats file configured (StatsFile= or --stats-file)\n", program);
		else if (!f)
			fprintf(stderr, "%s: cannot read %s: %m\n", program, stats_file);
		export_config_free(cfg);
		if (!f)
			return 1;
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		fwrite(buf, 1, n, stdout);
		return 0;
	}

	if (cfg->hostname)
		snprintf(host, sizeof(host), "%s", cfg->hostname);
	else if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = 0;
	r = read_boot_id(boot_id, sizeof(boot_id));
	if (r < 0) {
		fprintf(stderr, "%s: cannot read the boot id: %s\n", program, strerror(-r));
		export_config_free(cfg);
		return 1;
	}

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	/* A peer that goes away must end a write with EPIPE, not the process. */
	signal(SIGPIPE, SIG_IGN);

	/* libcurl's global state, once, before any thread (nats.c's) starts. */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	ctx = (ExportContext){
		.cfg = cfg, .host = host, .boot_id = boot_id, .version = PERFRELAY_VERSION_STRING
	};
	if (cfg->resume && !input) {
		resume = calloc(1, sizeof(*resume));
		r = resume ? export_resume_load(resume, cfg->cursor_file, &error) : -ENOMEM;
		if (r < 0) {
			fprintf(stderr, "%s: %s\n", program, error ?: strerror(-r));
			free(resume);
			curl_global_cleanup();
			export_config_free(cfg);
			return 1;
		}
		t.resume = resume;
	}
	r = targets_open(&t, &ctx);
	if (r >= 0) {
		r = input ? run_input(&t, input, stats_file, signal_fd) :
			    run_socket(&t, cfg, socket_path, stats_file, signal_fd);
		/* A file's end is no reason to stop early: its events are drained until
		 * acknowledged or dropped by MaxRetries= (a signal ends it). A signal gives the
		 * targets DrainTimeoutMSec=. */
		drain(&t, input ? (t.signalled ? 0 : UINT64_MAX) : cfg->drain_timeout_ms, stats_file, signal_fd);
		stats_save(&t, stats_file);
		report(&t);
	}
	targets_close(&t);
	free(resume);
	curl_global_cleanup();
	export_config_free(cfg);
	return r < 0 ? 1 : 0;
}
