/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export: an unprivileged client of perfrelayd's event socket (binary format) that
 * publishes every event to NATS JetStream, with its loss counted (docs/export.md). */
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

#include "export-config.h"
#include "exporter.h"
#include "macro.h"
#include "perfrelay-util.h"
#include "time-util.h"

#define CONFIG_DEFAULT    "/etc/perfrelay/export.conf"
#define STATS_INTERVAL_MS 1000


static const char *program = "perfrelay-export";

static void help(void) {
	printf("%s [OPTIONS...]\n\n"
	       "Publish perfrelayd's events to NATS JetStream (docs/export.md).\n\n"
	       "     --config=FILE     Configuration (default %s, plus FILE.d/*.conf)\n"
	       "     --socket=PATH     The event socket (overrides Socket=)\n"
	       "     --stats-file=PATH Where the counters are written (overrides StatsFile=)\n"
	       "     --input=FILE      Export the binary frames in FILE (u32 length + record, the\n"
	       "                       socket's binary format) instead of the socket, then exit\n"
	       "     --stats-json      Print the counters of the running (or last) exporter from\n"
	       "                       its stats file and exit\n"
	       "  -h --help           Show this help\n",
	       program,
	       CONFIG_DEFAULT);
}

/* Writes the counters atomically (temporary file + rename) so a reader never sees half. */
static int stats_save(Exporter *e, const char *path) {
	char tmp[4096];
	ExportStats s;
	FILE *f;
	int r;

	if (!path)
		return 0;
	exporter_get_stats(e, &s);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f)
		return -errno;
	r = export_stats_write_json(&s, f);
	if (fclose(f) != 0 && r >= 0)
		r = -errno;
	if (r >= 0 && rename(tmp, path) < 0)
		r = -errno;
	return r;
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

static bool signal_pending(int signal_fd) {
	struct signalfd_siginfo si;

	return read(signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si);
}

/* Publishes until asked to stop; then drains for DrainTimeoutMSec and counts what is left. */
static void drain(Exporter *e, const ExportConfig *cfg, const char *stats_file, int signal_fd) {
	uint64_t deadline = now_msec(CLOCK_MONOTONIC) + cfg->drain_timeout_ms, last = 0;

	while (!exporter_idle(e) && now_msec(CLOCK_MONOTONIC) < deadline) {
		exporter_run(e, now_msec(CLOCK_MONOTONIC));
		if (now_msec(CLOCK_MONOTONIC) >= last + STATS_INTERVAL_MS) {
			stats_save(e, stats_file);
			last = now_msec(CLOCK_MONOTONIC);
		}
		if (poll(&(struct pollfd){ .fd = signal_fd, .events = POLLIN }, 1, 5) > 0 &&
		    signal_pending(signal_fd))
			break; /* a second signal: stop waiting */
	}
	exporter_abandon(e);
}

static int run_input(Exporter *e, const char *input, const char *stats_file, int signal_fd) {
	_cleanup_close_ int fd = -EBADF;
	struct stat st;
	const uint8_t *map;
	size_t pos = 0;
	uint64_t last = 0;
	int r = 0;

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
	while (pos + 4 <= (size_t) st.st_size) {
		uint32_t len;
		struct perfrelay_hdr hdr;

		memcpy(&len, map + pos, 4);
		if (len < sizeof(hdr) || len > (size_t) st.st_size - pos - 4) {
			fprintf(stderr, "%s: %s: malformed frame at offset %zu\n", program, input, pos);
			r = -EBADMSG;
			break;
		}
		memcpy(&hdr, map + pos + 4, sizeof(hdr));
		if (hdr.magic != PERFRELAY_MAGIC || hdr.size != len) {
			fprintf(stderr, "%s: %s: not a perfrelay record at offset %zu\n", program, input, pos);
			r = -EBADMSG;
			break;
		}
		/* Waits for room instead of dropping: a file can wait, unlike the daemon. */
		while (!exporter_has_room(e)) {
			exporter_run(e, now_msec(CLOCK_MONOTONIC));
			if (poll(&(struct pollfd){ .fd = signal_fd, .events = POLLIN }, 1, 1) > 0) {
				munmap((void *) map, (size_t) st.st_size);
				return 0;
			}
		}
		exporter_offer(e, &hdr, map + pos + 4);
		pos += 4 + len;
		exporter_run(e, now_msec(CLOCK_MONOTONIC));
		if (now_msec(CLOCK_MONOTONIC) >= last + STATS_INTERVAL_MS) {
			stats_save(e, stats_file);
			last = now_msec(CLOCK_MONOTONIC);
		}
	}
	munmap((void *) map, (size_t) st.st_size);
	return r;
}

static int run_socket(
	Exporter *e, const ExportConfig *cfg, const char *socket_path, const char *stats_file, int signal_fd) {
	_cleanup_(perfrelay_closep) perfrelay_client *c = NULL;
	struct perfrelay_subscription sub = {
		.types = (const char *const *) cfg->types,
		.n_types = cfg->n_types,
		.units = (const char *const *) cfg->units,
		.n_units = cfg->n_units,
		.format = PERFRELAY_FORMAT_BINARY,
		.on_overflow = PERFRELAY_OVERFLOW_DROP,
	};
	uint64_t last = 0;
	int r;

	r = perfrelay_client_new(&c);
	if (r < 0)
		return r;
	r = perfrelay_connect(c, socket_path, &sub);
	if (r < 0) {
		fprintf(stderr,
			"%s: cannot subscribe on %s: %s\n",
			program,
			perfrelay_client_socket_path(c) ?: "the event socket",
			perfrelay_client_error(c) ?: strerror(-r));
		return r;
	}
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = perfrelay_fd(c), .events = POLLIN },
			{ .fd = signal_fd, .events = POLLIN },
		};
		const struct perfrelay_hdr *hdr;
		const void *payload;
		size_t psize;
		unsigned n = 0;

		/* Whatever is readable now, then the publishing work; the daemon's queue for us
		 * absorbs bursts, and our own queue bounds what waits for JetStream. */
		while (n++ < 4096 && (r = perfrelay_next_record(c, &hdr, &payload, &psize, 0)) > 0) {
			if (hdr->type == PERFRELAY_TYPE_LOST) {
				uint64_t count;

				memcpy(&count, payload, sizeof(count));
				exporter_daemon_lost(e, count);
				continue;
			}
			if ((const uint8_t *) payload != (const uint8_t *) (hdr + 1)) {
				uint8_t rec[PERFRELAY_RECORD_MAX];

				memcpy(rec, hdr, sizeof(*hdr));
				memcpy(rec + sizeof(*hdr), payload, psize);
				exporter_offer(e, hdr, rec);
			} else
				exporter_offer(e, hdr, hdr);
		}
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "%s: the event stream ended: %s\n", program, strerror(-r));
			return r;
		}
		exporter_run(e, now_msec(CLOCK_MONOTONIC));
		if (now_msec(CLOCK_MONOTONIC) >= last + STATS_INTERVAL_MS) {
			stats_save(e, stats_file);
			last = now_msec(CLOCK_MONOTONIC);
		}
		if (r > 0)
			continue; /* more was buffered than one round takes */
		/* Acks arrive on nats.c's thread, not on an fd: with work waiting, look again soon;
		 * idle, only the timers (stats, ack timeout) need a wakeup. */
		if (poll(p, 2, exporter_idle(e) ? 100 : 5) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents && signal_pending(signal_fd))
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
	Exporter *e = NULL;
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
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", program, error ?: strerror(-r));
		export_config_free(cfg);
		return 1;
	}
	/* A relative CredentialsFile= names a credential: LoadCredential= puts it in
	 * $CREDENTIALS_DIRECTORY, readable by this service only. */
	if (cfg->credentials_file && cfg->credentials_file[0] != '/' && getenv("CREDENTIALS_DIRECTORY")) {
		char *p;

		if (asprintf(&p, "%s/%s", getenv("CREDENTIALS_DIRECTORY"), cfg->credentials_file) < 0) {
			export_config_free(cfg);
			return 1;
		}
		free(cfg->credentials_file);
		cfg->credentials_file = p;
	}
	stats_file = stats_file ?: cfg->stats_file;
	socket_path = socket_path ?: cfg->socket_path;

	if (stats_json) {
		char buf[4096];
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
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	/* A peer that goes away must end a write with EPIPE, not the process. */
	signal(SIGPIPE, SIG_IGN);

	r = exporter_new(cfg, host, boot_id, 1, &e);
	if (r < 0) {
		fprintf(stderr, "%s: cannot set up the NATS connection: %s\n", program, strerror(-r));
		export_config_free(cfg);
		return 1;
	}
	r = input ? run_input(e, input, stats_file, signal_fd) :
		    run_socket(e, cfg, socket_path, stats_file, signal_fd);
	drain(e, cfg, stats_file, signal_fd);
	stats_save(e, stats_file);
	{
		ExportStats s;

		exporter_get_stats(e, &s);
		fprintf(stderr,
			"%s: offered %" PRIu64 ", exported %" PRIu64 " (%" PRIu64
			" duplicates), dropped %" PRIu64 ", retried %" PRIu64 "\n",
			program,
			s.offered,
			s.exported,
			s.duplicates,
			s.dropped,
			s.retried);
	}
	exporter_free(e);
	export_config_free(cfg);
	return r < 0 ? 1 : 0;
}
