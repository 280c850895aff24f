/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-bench: one benchmark row. Loads the getpgid() producer, runs a consumer (a libbpf
 * perf_buffer baseline, or subscribers of a running perfrelayd), drives the load, and prints
 * the row's figures as one JSON object. bench/run runs the rows and the daemons. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "consumer.h"
#include "kernel/cpuset.h"
#include "load.h"
#include "macro.h"
#include "perfbuf.h"
#include "producer.h"
#include "subscriber.h"

#define MAX_SUBSCRIBERS 64

typedef enum Mode {
	MODE_LIBBPF_RAW,
	MODE_LIBBPF_DEFAULT,
	MODE_DAEMON,
} Mode;

typedef struct Options {
	Mode mode;
	const char *pin_root;
	const char *socket_path;
	int daemon_pid;
	unsigned clients;
	enum perfrelay_format format;
	double duration_s;
	double rate; /* records per second, all producer CPUs; 0 = unpaced */
	unsigned records_per_call;
	unsigned record_size;
	CpuSet producer_cpus;
	int consumer_cpu;
	unsigned pages;
	uint32_t watermark;
	double drain_timeout_s;
	unsigned settle_ms;
} Options;

static const char *const mode_names[] = {
	[MODE_LIBBPF_RAW] = "libbpf-raw",
	[MODE_LIBBPF_DEFAULT] = "libbpf-default",
	[MODE_DAEMON] = "daemon",
};

static void help(void) {
	printf("perfrelay-bench [OPTIONS...]\n\n"
	       "Runs one benchmark row and prints its figures as a JSON object.\n\n"
	       "  --mode=MODE            libbpf-raw, libbpf-default, or daemon (default libbpf-raw)\n"
	       "  --pin-root=DIR         bpffs root of the events/counters pins: a running perfrelayd's\n"
	       "                         PinPath= (daemon mode), or a private one (default\n"
	       "                         /sys/fs/bpf/perfrelay-bench-PID-libbpf, removed at exit)\n"
	       "  --socket=PATH          perfrelayd's event socket (daemon mode with clients)\n"
	       "  --daemon-pid=PID       perfrelayd's pid, for its CPU time\n"
	       "  --clients=N            subscribers (daemon mode, default 0)\n"
	       "  --format=FORMAT        json or binary (default json)\n"
	       "  --duration=SECONDS     load duration (default 2)\n"
	       "  --rate=RECORDS/S       target record rate, 0 = as fast as possible (default 0)\n"
	       "  --records-per-call=K   records per getpgid() call (default 32)\n"
	       "  --record-size=BYTES    bytes per record, header included (default 64)\n"
	       "  --producer-cpus=LIST   one load thread per CPU (default 0)\n"
	       "  --consumer-cpu=CPU     CPU of the consumer threads, -1 = any (default 1)\n"
	       "  --pages=N              libbpf rings: data pages per CPU (default 64)\n"
	       "  --watermark=BYTES      libbpf-raw wakeup watermark, 0 = a quarter ring (default 0)\n"
	       "  --drain-timeout=SECONDS  how long subscribers may take to catch up (default 10)\n"
	       "  --settle-ms=MS         daemon mode without clients: wait before reading the\n"
	       "                         daemon's CPU time, so it has read the last records (default 200)\n");
}

static int parse_uint(const char *s, unsigned long max, unsigned long *ret) {
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_double(const char *s, double *ret) {
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_options(int argc, char *argv[], Options *o) {
	enum {
		ARG_MODE = 0x100,
		ARG_PIN_ROOT,
		ARG_SOCKET,
		ARG_DAEMON_PID,
		ARG_CLIENTS,
		ARG_FORMAT,
		ARG_DURATION,
		ARG_RATE,
		ARG_K,
		ARG_SIZE,
		ARG_PRODUCER_CPUS,
		ARG_CONSUMER_CPU,
		ARG_PAGES,
		ARG_WATERMARK,
		ARG_DRAIN,
		ARG_SETTLE,
	};
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "mode", required_argument, NULL, ARG_MODE },
						 { "pin-root", required_argument, NULL, ARG_PIN_ROOT },
						 { "socket", required_argument, NULL, ARG_SOCKET },
						 { "daemon-pid", required_argument, NULL, ARG_DAEMON_PID },
						 { "clients", required_argument, NULL, ARG_CLIENTS },
						 { "format", required_argument, NULL, ARG_FORMAT },
						 { "duration", required_argument, NULL, ARG_DURATION },
						 { "rate", required_argument, NULL, ARG_RATE },
						 { "records-per-call", required_argument, NULL, ARG_K },
						 { "record-size", required_argument, NULL, ARG_SIZE },
						 { "producer-cpus", required_argument, NULL, ARG_PRODUCER_CPUS },
						 { "consumer-cpu", required_argument, NULL, ARG_CONSUMER_CPU },
						 { "pages", required_argument, NULL, ARG_PAGES },
						 { "watermark", required_argument, NULL, ARG_WATERMARK },
						 { "drain-timeout", required_argument, NULL, ARG_DRAIN },
						 { "settle-ms", required_argument, NULL, ARG_SETTLE },
						 {} };
	unsigned long v;
	int c;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
		int r = 0;

		switch (c) {
		case 'h':
			help();
			exit(EXIT_SUCCESS);
		case ARG_MODE:
			r = -EINVAL;
			for (unsigned i = 0; i < ELEMENTSOF(mode_names); i++)
				if (streq(optarg, mode_names[i])) {
					o->mode = i;
					r = 0;
				}
			break;
		case ARG_PIN_ROOT:
			o->pin_root = optarg;
			r = optarg[0] == '/' ? 0 : -EINVAL;
			break;
		case ARG_SOCKET:
			o->socket_path = optarg;
			break;
		case ARG_DAEMON_PID:
			r = parse_uint(optarg, INT32_MAX, &v);
			o->daemon_pid = (int) v;
			break;
		case ARG_CLIENTS:
			r = parse_uint(optarg, MAX_SUBSCRIBERS, &v);
			o->clients = (unsigned) v;
			break;
		case ARG_FORMAT:
			if (streq(optarg, "json"))
				o->format = PERFRELAY_FORMAT_JSON;
			else if (streq(optarg, "binary"))
				o->format = PERFRELAY_FORMAT_BINARY;
			else
				r = -EINVAL;
			break;
		case ARG_DURATION:
			r = parse_double(optarg, &o->duration_s);
			if (r >= 0 && (o->duration_s <= 0 || o->duration_s > 3600))
				r = -EINVAL;
			break;
		case ARG_RATE:
			r = parse_double(optarg, &o->rate);
			break;
		case ARG_K:
			r = parse_uint(optarg, 256, &v);
			o->records_per_call = (unsigned) v;
			if (r >= 0 && v == 0)
				r = -EINVAL;
			break;
		case ARG_SIZE:
			r = parse_uint(optarg, 1024, &v);
			o->record_size = (unsigned) v;
			if (r >= 0 && (v < 40 || v % 8))
				r = -EINVAL;
			break;
		case ARG_PRODUCER_CPUS:
			r = cpuset_parse(optarg, &o->producer_cpus);
			if (r >= 0 && cpuset_is_empty(&o->producer_cpus))
				r = -EINVAL;
			break;
		case ARG_CONSUMER_CPU:
			if (streq(optarg, "-1"))
				o->consumer_cpu = -1;
			else {
				r = parse_uint(optarg, PERFRELAY_MAX_CPUS - 1, &v);
				o->consumer_cpu = (int) v;
			}
			break;
		case ARG_PAGES:
			r = parse_uint(optarg, 65536, &v);
			o->pages = (unsigned) v;
			if (r >= 0 && (v == 0 || (v & (v - 1))))
				r = -EINVAL;
			break;
		case ARG_WATERMARK:
			r = parse_uint(optarg, UINT32_MAX, &v);
			o->watermark = (uint32_t) v;
			break;
		case ARG_DRAIN:
			r = parse_double(optarg, &o->drain_timeout_s);
			break;
		case ARG_SETTLE:
			r = parse_uint(optarg, 60000, &v);
			o->settle_ms = (unsigned) v;
			break;
		default:
			return -EINVAL;
		}
		if (r < 0) {
			fprintf(stderr,
				"perfrelay-bench: invalid value for --%s: %s\n",
				options[c - ARG_MODE + 1].name,
				optarg);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "perfrelay-bench: unexpected argument: %s\n", argv[optind]);
		return -EINVAL;
	}
	if (o->mode == MODE_DAEMON && !o->pin_root) {
		fprintf(stderr, "perfrelay-bench: --mode=daemon needs --pin-root (the daemon's PinPath=)\n");
		return -EINVAL;
	}
	if (o->mode == MODE_DAEMON && o->clients > 0 && !o->socket_path) {
		fprintf(stderr, "perfrelay-bench: subscribers need --socket (the daemon's SocketPath=)\n");
		return -EINVAL;
	}
	return 0;
}

/* CPU time of every thread of pid in nanoseconds: the sum of /proc/PID/task/TID/schedstat's
 * run time (exact; the daemon's threads live as long as it does), or utime + stime from
 * /proc/PID/stat (the process's rusage, in clock ticks) where schedstat is missing. */
static int process_cpu_ns(int pid, uint64_t *ret) {
	char path[64], buf[2048], *p;
	unsigned long long utime, stime, total = 0;
	long hz = sysconf(_SC_CLK_TCK);
	struct dirent *de;
	DIR *dir;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return negative_errno();
	while ((de = readdir(dir))) {
		unsigned long long run;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", pid, de->d_name);
		f = fopen(path, "re");
		if (!f) {
			if (errno == ENOENT && access("/proc/self/schedstat", F_OK) == 0)
				continue; /* the thread is gone */
			total = ULLONG_MAX;
			break;
		}
		if (fscanf(f, "%llu", &run) == 1)
			total += run;
		fclose(f);
	}
	closedir(dir);
	if (total != ULLONG_MAX) {
		*ret = total;
		return 0;
	}

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	n = read(fd, buf, sizeof(buf) - 1);
	safe_close(fd);
	if (n <= 0)
		return n < 0 ? negative_errno() : -EIO;
	buf[n] = '\0';
	/* comm (field 2) may hold spaces and parentheses: fields are counted after the last ')'. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
		return -EBADMSG;
	*ret = (uint64_t) ((utime + stime) * (1000000000ull / (unsigned long long) hz));
	return 0;
}

static double per_s(uint64_t n, uint64_t ns) {
	return ns ? (double) n * 1e9 / (double) ns : 0;
}

static void print_latency(const Histogram *h) {
	printf(",\"latency_p50_us\":%.1f,\"latency_p90_us\":%.1f,\"latency_p99_us\":%.1f,\"latency_p999_us\":%.1f"
	       ",\"latency_samples\":%" PRIu64,
	       (double) histogram_quantile(h, 0.50) / 1e3,
	       (double) histogram_quantile(h, 0.90) / 1e3,
	       (double) histogram_quantile(h, 0.99) / 1e3,
	       (double) histogram_quantile(h, 0.999) / 1e3,
	       h->count);
}

typedef struct Run {
	LoadResult load;
	uint64_t attempts, failures; /* deltas over the load */
	uint64_t daemon_cpu_ns;      /* 0 without --daemon-pid */
	bool have_daemon_cpu;
} Run;

/* Counters before, the load, counters after. */
static int run_load(const Options *o, BenchProducer *p, Run *run) {
	LoadOptions lo = {
		.cpus = &o->producer_cpus,
		.calls_per_s = o->rate / o->records_per_call,
		.duration_ns = (uint64_t) (o->duration_s * 1e9),
	};
	uint64_t a0, f0, a1, f1;
	int r;

	r = bench_producer_counters(p, &a0, &f0);
	if (r < 0)
		return r;
	r = load_run(&lo, &run->load);
	if (r < 0)
		return r;
	r = bench_producer_counters(p, &a1, &f1);
	if (r < 0)
		return r;
	run->attempts = a1 - a0;
	run->failures = f1 - f0;
	return 0;
}

static void print_common(const Options *o, const Run *run) {
	printf("{\"mode\":\"%s\",\"rate_target\":%.0f,\"records_per_call\":%u,\"record_size\":%u,"
	       "\"duration_s\":%.6f,\"calls\":%" PRIu64 ",\"attempts\":%" PRIu64 ",\"failures\":%" PRIu64
	       ",\"offered_per_s\":%.0f",
	       mode_names[o->mode],
	       o->rate,
	       o->records_per_call,
	       o->record_size,
	       (double) run->load.elapsed_ns / 1e9,
	       run->load.calls,
	       run->attempts,
	       run->failures,
	       per_s(run->attempts, run->load.elapsed_ns));
}

static int run_libbpf(const Options *o) {
	BenchProducerOptions po = {
		.pin_root = o->pin_root,
		.target_tgid = (uint32_t) getpid(),
		.records_per_call = o->records_per_call,
		.record_size = o->record_size,
	};
	char private_root[64];
	BenchProducer *p = NULL;
	Perfbuf *pb = NULL;
	ConsumerResult *res = calloc(1, sizeof(ConsumerResult));
	Run run = {};
	bool created = false;
	int r;

	if (!res)
		return -ENOMEM;
	if (!po.pin_root) {
		snprintf(
			private_root,
			sizeof(private_root),
			"/sys/fs/bpf/perfrelay-bench-%d-libbpf",
			(int) getpid());
		po.pin_root = private_root;
	}
	r = bench_producer_new(&po, &p, &created);
	if (r < 0) {
		fprintf(stderr,
			"perfrelay-bench: failed to load the producer with pins under %s: %s\n",
			po.pin_root,
			strerror(-r));
		goto finish;
	}
	r = perfbuf_start(
		bench_producer_events_fd(p),
		o->mode == MODE_LIBBPF_RAW ? PERFBUF_RAW : PERFBUF_DEFAULT,
		o->pages,
		o->watermark,
		o->consumer_cpu,
		&pb);
	if (r < 0) {
		fprintf(stderr, "perfrelay-bench: failed to set up libbpf's perf_buffer: %s\n", strerror(-r));
		goto finish;
	}
	r = run_load(o, p, &run);
	if (r < 0) {
		fprintf(stderr, "perfrelay-bench: the load failed: %s\n", strerror(-r));
		goto finish;
	}
	perfbuf_stop(pb, res);
	if (res->error < 0) {
		r = res->error;
		fprintf(stderr, "perfrelay-bench: the perf_buffer consumer failed: %s\n", strerror(-r));
		goto finish;
	}

	print_common(o, &run);
	printf(",\"pages\":%u,\"received\":%" PRIu64 ",\"ring_lost\":%" PRIu64 ",\"delivered\":%" PRIu64
	       ",\"events_per_s\":%.0f,\"lost\":%" PRIu64 ",\"accounted\":%s,\"consumer_cpu_ns\":%" PRIu64
	       ",\"cpu_ns_per_event\":%.1f",
	       o->pages,
	       res->events,
	       res->lost,
	       res->events,
	       per_s(res->events, run.load.elapsed_ns),
	       run.failures,
	       run.attempts == res->events + run.failures ? "true" : "false",
	       res->cpu_ns,
	       res->events ? (double) res->cpu_ns / (double) res->events : 0.0);
	print_latency(&res->latency);
	printf("}\n");
finish:
	perfbuf_free(pb);
	/* A private array goes with us; the pins of a daemon are the daemon's. */
	if (p && created) {
		int k = bench_producer_unpin(p);

		if (k < 0)
			fprintf(stderr,
				"perfrelay-bench: failed to remove the pins under %s: %s\n",
				po.pin_root,
				strerror(-k));
	}
	bench_producer_free(p);
	free(res);
	return r;
}

static int run_daemon(const Options *o) {
	BenchProducerOptions po = {
		.pin_root = o->pin_root,
		.target_tgid = (uint32_t) getpid(),
		.records_per_call = o->records_per_call,
		.record_size = o->record_size,
	};
	Subscriber *subs[MAX_SUBSCRIBERS] = {};
	ConsumerResult *res = calloc(o->clients ?: 1, sizeof(ConsumerResult));
	Histogram *latency = calloc(1, sizeof(Histogram));
	uint64_t cpu0 = 0, cpu1 = 0, events = 0, client_lost = 0, client_cpu = 0, expected, deadline;
	BenchProducer *p = NULL;
	Run run = {};
	bool created = false, complete = true;
	double delivered;
	int r;

	if (!res || !latency) {
		r = -ENOMEM;
		goto finish;
	}
	r = bench_producer_new(&po, &p, &created);
	if (r < 0) {
		fprintf(stderr,
			"perfrelay-bench: failed to load the producer with the pins under %s: %s\n",
			o->pin_root,
			strerror(-r));
		goto finish;
	}
	if (created) {
		/* Writing into an array no daemon reads would measure nothing. */
		fprintf(stderr,
			"perfrelay-bench: no perfrelayd pins under %s (is the daemon running with "
			"PinPath=%s?)\n",
			o->pin_root,
			o->pin_root);
		(void) bench_producer_unpin(p);
		r = -ENOENT;
		goto finish;
	}
	for (unsigned i = 0; i < o->clients; i++) {
		r = subscriber_start(o->socket_path, o->format, o->consumer_cpu, &subs[i]);
		if (r < 0) {
			fprintf(stderr,
				"perfrelay-bench: subscriber %u failed to connect to %s: %s\n",
				i,
				o->socket_path,
				strerror(-r));
			goto finish;
		}
	}
	if (o->clients > 0) {
		/* Every subscriber is attached before the first record is emitted, so each of them
		 * must account for every record the daemon receives. */
		r = subscriber_fence(o->socket_path);
		if (r < 0) {
			fprintf(stderr,
				"perfrelay-bench: fence connection to %s failed: %s\n",
				o->socket_path,
				strerror(-r));
			goto finish;
		}
	}
	if (o->daemon_pid > 0) {
		r = process_cpu_ns(o->daemon_pid, &cpu0);
		if (r < 0) {
			fprintf(stderr,
				"perfrelay-bench: cannot read the CPU time of pid %d: %s\n",
				o->daemon_pid,
				strerror(-r));
			goto finish;
		}
	}
	r = run_load(o, p, &run);
	if (r < 0) {
		fprintf(stderr, "perfrelay-bench: the load failed: %s\n", strerror(-r));
		goto finish;
	}
	/* The daemon receives exactly what the kernel did not refuse (attempts = received +
	 * failures); each subscriber must see all of it, as events or as counted drops. */
	expected = run.attempts - run.failures;
	deadline = now_ns() + (uint64_t) (o->drain_timeout_s * 1e9);
	for (unsigned i = 0; i < o->clients; i++) {
		subscriber_finish(subs[i], expected, deadline, &res[i]);
		events += res[i].events;
		client_lost += res[i].lost;
		client_cpu += res[i].cpu_ns;
		complete &= res[i].complete;
		histogram_merge(latency, &res[i].latency);
		if (res[i].error < 0)
			fprintf(stderr,
				"perfrelay-bench: subscriber %u failed: %s\n",
				i,
				strerror(-res[i].error));
	}
	if (o->clients == 0 && o->settle_ms > 0) {
		/* Records below the watermark wait for the daemon's flush timer. */
		struct timespec ts = { .tv_sec = o->settle_ms / 1000,
				       .tv_nsec = (long) (o->settle_ms % 1000) * 1000000 };

		nanosleep(&ts, NULL);
	}
	if (o->daemon_pid > 0) {
		r = process_cpu_ns(o->daemon_pid, &cpu1);
		if (r < 0) {
			fprintf(stderr,
				"perfrelay-bench: cannot read the CPU time of pid %d: %s\n",
				o->daemon_pid,
				strerror(-r));
			goto finish;
		}
	}

	/* Per client: every subscriber gets every event, so a row's rate is what one client gets. */
	delivered = o->clients ? (double) events / o->clients : (double) expected;
	print_common(o, &run);
	printf(",\"format\":\"%s\",\"received\":%" PRIu64
	       ",\"delivered\":%.0f,\"events_per_s\":%.0f"
	       ",\"lost\":%" PRIu64 ",\"client_lost\":%" PRIu64
	       ",\"accounted\":%s,\"consumer_cpu_ns\":%" PRIu64,
	       o->format == PERFRELAY_FORMAT_BINARY ? "binary" : "json",
	       expected,
	       delivered,
	       run.load.elapsed_ns ? delivered * 1e9 / (double) run.load.elapsed_ns : 0.0,
	       run.failures + client_lost,
	       client_lost,
	       complete ? "true" : "false",
	       client_cpu);
	if (o->daemon_pid > 0)
		printf(",\"daemon_cpu_ns\":%" PRIu64 ",\"cpu_ns_per_event\":%.1f",
		       cpu1 - cpu0,
		       delivered > 0 ? (double) (cpu1 - cpu0) / delivered : 0.0);
	printf(",\"subscribers\":[");
	for (unsigned i = 0; i < o->clients; i++)
		printf("%s{\"client_id\":%" PRIu64 ",\"events\":%" PRIu64 ",\"lost\":%" PRIu64
		       ",\"complete\":%s,\"cpu_ns\":%" PRIu64 "}",
		       i ? "," : "",
		       subscriber_client_id(subs[i]),
		       res[i].events,
		       res[i].lost,
		       res[i].complete ? "true" : "false",
		       res[i].cpu_ns);
	printf("]");
	print_latency(latency);
	printf("}\n");
	if (!complete) {
		fprintf(stderr,
			"perfrelay-bench: a subscriber did not account for all %" PRIu64
			" events within %.1fs\n",
			expected,
			o->drain_timeout_s);
		r = -ETIMEDOUT;
	}
finish:
	for (unsigned i = 0; i < o->clients; i++)
		subscriber_free(subs[i]);
	/* The producer detaches here: the caller may stop the daemon now, its counts are final. */
	bench_producer_free(p);
	free(res);
	free(latency);
	return r;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
	if (level == LIBBPF_DEBUG)
		return 0;
	fputs("perfrelay-bench: libbpf: ", stderr);
	return vfprintf(stderr, fmt, ap);
}

int main(int argc, char *argv[]) {
	Options o = {
		.mode = MODE_LIBBPF_RAW,
		.format = PERFRELAY_FORMAT_JSON,
		.duration_s = 2,
		.records_per_call = 32,
		.record_size = 64,
		.consumer_cpu = 1,
		.pages = 64,
		.drain_timeout_s = 10,
		.settle_ms = 200,
	};
	int r;

	cpuset_add(&o.producer_cpus, 0);
	if (parse_options(argc, argv, &o) < 0)
		return EXIT_FAILURE;
	libbpf_set_print(libbpf_print);
	/* Output goes to a pipe: one write at the end, not line by line. */
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);

	r = o.mode == MODE_DAEMON ? run_daemon(&o) : run_libbpf(&o);
	fflush(stdout);
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
