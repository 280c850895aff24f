/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for config.c: defaults, every key's good and bad values, error text, drop-ins. */

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "features/capture/capture-config.h"
#include "kernel/counter-names.h"
#include "features/counters/counters-config.h"
#include "features/feature-config-parts.h"
#include "macro.h"
#include "features/probes/probes-config.h"
#include "features/recorder/recorder-config.h"

#ifndef SRCDIR
#define SRCDIR "tests/unit"
#endif


#include "unit-test.h"

/* The features' sections, as the daemon registers them (features/feature-config-parts.h: every
 * feature's, found by the build). */
#define parts   feature_config_parts
#define n_parts feature_config_parts_size

#define PROBES(c)   ((const ProbesConfig *) config_part(c, &probes_config))
#define RECORDER(c) ((const RecorderConfig *) config_part(c, &recorder_config))
#define COUNTERS(c) ((const CountersConfig *) config_part(c, &counters_config))
#define CAPTURE(c)  ((const CaptureConfig *) config_part(c, &capture_config))

static Config *new_default(void) {
	Config *c = NULL;

	if (config_new(parts, n_parts, &c) < 0) {
		fprintf(stderr, "config_new() failed\n");
		exit(1);
	}
	return c;
}

static bool str_eq_null(const char *a, const char *b) {
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool config_equal(const Config *a, const Config *b) {
	return str_eq_null(a->pin_path, b->pin_path) &&
		a->replace_incompatible_pins == b->replace_incompatible_pins &&
		a->pages_per_cpu == b->pages_per_cpu && a->watermark == b->watermark &&
		a->wakeup_events == b->wakeup_events && a->flush_interval_ms == b->flush_interval_ms &&
		a->n_cpu_groups == b->n_cpu_groups &&
		(a->n_cpu_groups == 0 ||
		 memcmp(a->cpu_groups, b->cpu_groups, a->n_cpu_groups * sizeof(CpuSet)) == 0) &&
		a->cpus_per_reader == b->cpus_per_reader && PROBES(a)->probes == PROBES(b)->probes &&
		str_eq_null(a->socket_path, b->socket_path) &&
		a->client_queue_bytes == b->client_queue_bytes && a->max_clients == b->max_clients &&
		a->max_clients_per_uid == b->max_clients_per_uid &&
		a->max_request_bytes == b->max_request_bytes &&
		a->request_timeout_ms == b->request_timeout_ms && a->max_json_depth == b->max_json_depth &&
		a->allow_groups.n == b->allow_groups.n &&
		(a->allow_groups.n == 0 ||
		 memcmp(a->allow_groups.gids, b->allow_groups.gids, a->allow_groups.n * sizeof(gid_t)) == 0) &&
		a->control_groups.n == b->control_groups.n &&
		(a->control_groups.n == 0 ||
		 memcmp(a->control_groups.gids, b->control_groups.gids, a->control_groups.n * sizeof(gid_t)) ==
			 0) &&
		a->bus_events_per_second == b->bus_events_per_second &&
		RECORDER(a)->recorder == RECORDER(b)->recorder &&
		RECORDER(a)->pages_per_cpu == RECORDER(b)->pages_per_cpu &&
		COUNTERS(a)->counters == COUNTERS(b)->counters &&
		COUNTERS(a)->interval_ms == COUNTERS(b)->interval_ms &&
		a->counters_max_processes == b->counters_max_processes &&
		a->counters_max_cgroups == b->counters_max_cgroups && CAPTURE(a)->bytes == CAPTURE(b)->bytes &&
		CAPTURE(a)->max_captures == CAPTURE(b)->max_captures &&
		CAPTURE(a)->packets_per_second == CAPTURE(b)->packets_per_second &&
		CAPTURE(a)->allow_host_captures == CAPTURE(b)->allow_host_captures;
}

static int parse(Config *c, const char *text, char **error) {
	return config_parse_text(c, text, strlen(text), "test.conf", error);
}

/* Parses text into a fresh default config; returns it, or NULL (after reporting) on error. */
static Config *parse_ok_at(const char *file, int line, const char *text) {
	_cleanup_free_ char *error = NULL;
	Config *c = new_default();
	int r;

	r = parse(c, text, &error);
	if (r < 0) {
		fprintf(stderr,
			"%s:%d: parsing \"%s\" failed: %d %s\n",
			file,
			line,
			text,
			r,
			error ?: "(no message)");
		failures++;
		return config_free(c);
	}
	return c;
}
#define parse_ok(text) parse_ok_at(__FILE__, __LINE__, text)

/* Expects parsing to fail with an error message that contains every given fragment, and the
 * config to stay at its defaults. */
static void expect_error_at(const char *file, int line, const char *text, ...) {
	_cleanup_(config_freep) Config *c = new_default(), *d = new_default();
	_cleanup_free_ char *error = NULL;
	const char *want;
	va_list ap;
	int r;

	r = parse(c, text, &error);
	if (r >= 0 || !error) {
		fprintf(stderr,
			"%s:%d: parsing \"%s\" gave %d and %s, want an error\n",
			file,
			line,
			text,
			r,
			error ? "a message" : "no message");
		failures++;
		return;
	}
	if (r != -EINVAL) {
		fprintf(stderr, "%s:%d: parsing \"%s\" gave %d, want -EINVAL\n", file, line, text, r);
		failures++;
	}
	va_start(ap, text);
	while ((want = va_arg(ap, const char *)))
		if (!strstr(error, want)) {
			fprintf(stderr, "%s:%d: error \"%s\" does not contain \"%s\"\n", file, line, error, want);
			failures++;
		}
	va_end(ap);
	if (strchr(error, '\n')) {
		fprintf(stderr, "%s:%d: error \"%s\" spans lines\n", file, line, error);
		failures++;
	}
	if (!config_equal(c, d)) {
		fprintf(stderr, "%s:%d: a failed parse changed the config\n", file, line);
		failures++;
	}
}
#define expect_error(text, ...) expect_error_at(__FILE__, __LINE__, text, __VA_ARGS__, NULL)

static void test_defaults(void) {
	_cleanup_(config_freep) Config *c = new_default();
	_cleanup_free_ char *error = NULL;

	ASSERT(strcmp(c->pin_path, "/sys/fs/bpf/perfrelay") == 0);
	ASSERT(!c->replace_incompatible_pins);
	ASSERT(c->pages_per_cpu == 512);
	ASSERT(c->watermark == 0);
	ASSERT(c->wakeup_events == 0);
	ASSERT(c->flush_interval_ms == 50);
	ASSERT(c->cpu_groups == NULL && c->n_cpu_groups == 0);
	ASSERT(c->cpus_per_reader == 0);
	ASSERT(PROBES(c)->probes == PROBES_ALL);
	ASSERT(strcmp(c->socket_path, "/run/perfrelay/events.sock") == 0);
	ASSERT(c->client_queue_bytes == 4u * 1024 * 1024);
	ASSERT(c->shared_ring_bytes == 32u * 1024 * 1024 && c->max_shared_rings == 64 &&
	       c->max_shared_rings_per_uid == 4);
	ASSERT(c->reader_nice == -10);
	ASSERT(c->max_clients == 256);
	ASSERT(c->max_clients_per_uid == 32);
	ASSERT(c->max_request_bytes == 65536);
	ASSERT(c->request_timeout_ms == 5000);
	ASSERT(c->max_json_depth == 8);
	ASSERT(c->allow_groups.gids == NULL && c->allow_groups.n == 0);
	ASSERT(c->bus_events_per_second == 100);
	ASSERT(RECORDER(c)->recorder && RECORDER(c)->pages_per_cpu == 256);
	ASSERT(COUNTERS(c)->counters == COUNTERS_DEFAULT && COUNTERS(c)->interval_ms == 1000);
	ASSERT(CAPTURE(c)->bytes == 128 && CAPTURE(c)->max_captures == 8 &&
	       CAPTURE(c)->packets_per_second == 10000 && !CAPTURE(c)->allow_host_captures);

	ASSERT(config_validate(c, &error) == 0);
	ASSERT(error == NULL);
	ASSERT(config_free(NULL) == NULL);
	ASSERT(config_new(NULL, 0, NULL) == -EINVAL);
	ASSERT(config_new(NULL, 1, &c) == -EINVAL);
}

static void test_probe_names(void) {
	static const char *const names[] = { "exec", "exit", "fork", "open", "connect" };

	ASSERT(_PROBE_MAX == 5);
	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		ASSERT(probe_to_string(i) && strcmp(probe_to_string(i), names[i]) == 0);
		ASSERT(probe_from_string(names[i]) == (int) i);
	}
	ASSERT(probe_to_string(_PROBE_MAX) == NULL);
	ASSERT(probe_to_string(~0u) == NULL);
	ASSERT(probe_from_string("Exec") == -EINVAL);
	ASSERT(probe_from_string("") == -EINVAL);
	ASSERT(probe_from_string("all") == -EINVAL);
	ASSERT(probe_from_string(NULL) == -EINVAL);
}

/* Integer keys: both bounds accepted, one past each rejected, plus junk. */
static void test_integer_bounds(void) {
	static const struct {
		const char *section, *key;
		unsigned long long min, max;
		const char *message; /* the part of the error after "Key=Value: " */
	} keys[] = {
		{ "Ring", "WakeupEvents", 0, 4294967295ull, "must be an integer between 0 and 4294967295" },
		{ "Ring", "FlushIntervalMs", 1, 1000, "must be an integer between 1 and 1000" },
		{ "Readers", "CpusPerReader", 0, 4096, "must be an integer between 0 and 4096" },
		{ "Socket", "MaxClients", 1, 65536, "must be an integer between 1 and 65536" },
		{ "Socket", "MaxClientsPerUid", 1, 65536, "must be an integer between 1 and 65536" },
		{ "Socket", "RequestTimeoutMs", 10, 600000, "must be an integer between 10 and 600000" },
		{ "Socket", "MaxJsonDepth", 2, 64, "must be an integer between 2 and 64" },
		{ "Bus", "BusEventsPerSecond", 1, 100000, "must be an integer between 1 and 100000" },
		{ "Socket", "ClientQueueBytes", 65536, 1073741824, "must be a size between 64K and 1G" },
		{ "Socket", "MaxRequestBytes", 256, 1048576, "must be a size between 256 and 1M" },
		{ "Socket", "SharedRingBytes", 0, 1073741824, "must be a size between 0 and 1G" },
		{ "Socket", "MaxSharedRings", 1, 4096, "must be an integer between 1 and 4096" },
		{ "Socket", "MaxSharedRingsPerUid", 1, 4096, "must be an integer between 1 and 4096" },
		{ "Ring", "Watermark", 0, 4294967295ull, "must be a size between 0 and 4294967295" },
	};

	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		char text[256], prefix[128];
		unsigned long long good[] = { keys[i].min, keys[i].max };
		const char *junk[] = { "abc", "-1", "+5", "1.5", "0x10", "12 34", "99999999999999999999999" };

		for (size_t j = 0; j < ELEMENTSOF(good); j++) {
			snprintf(text, sizeof(text), "[%s]\n%s=%llu\n", keys[i].section, keys[i].key, good[j]);
			_cleanup_(config_freep) Config *c = parse_ok(text);
			CHECK(c, "%s", text);
		}
		if (keys[i].min > 0) {
			snprintf(
				text,
				sizeof(text),
				"[%s]\n%s=%llu\n",
				keys[i].section,
				keys[i].key,
				keys[i].min - 1);
			snprintf(prefix, sizeof(prefix), "test.conf:2: %s=%llu: ", keys[i].key, keys[i].min - 1);
			expect_error(text, prefix, keys[i].message);
		}
		snprintf(text, sizeof(text), "[%s]\n%s=%llu\n", keys[i].section, keys[i].key, keys[i].max + 1);
		snprintf(prefix, sizeof(prefix), "test.conf:2: %s=%llu: ", keys[i].key, keys[i].max + 1);
		expect_error(text, prefix, keys[i].message);

		for (size_t j = 0; j < ELEMENTSOF(junk); j++) {
			snprintf(text, sizeof(text), "[%s]\n%s=%s\n", keys[i].section, keys[i].key, junk[j]);
			snprintf(prefix, sizeof(prefix), "test.conf:2: %s=%s: ", keys[i].key, junk[j]);
			expect_error(text, prefix, keys[i].message);
		}
	}
}

static void test_values(void) {
	Config *c;

	c = parse_ok("[Daemon]\nPinPath=/sys/fs/bpf/other\nReplaceIncompatiblePins=yes\n");
	ASSERT(c && strcmp(c->pin_path, "/sys/fs/bpf/other") == 0 && c->replace_incompatible_pins);
	config_free(c);

	c = parse_ok("[Ring]\nPagesPerCpu=1\nWatermark=4K\nWakeupEvents=16\nFlushIntervalMs=7\n");
	ASSERT(c && c->pages_per_cpu == 1 && c->watermark == 4096 && c->wakeup_events == 16 &&
	       c->flush_interval_ms == 7);
	config_free(c);

	c = parse_ok("[Ring]\nPagesPerCpu=65536\n");
	ASSERT(c && c->pages_per_cpu == 65536);
	config_free(c);

	c = parse_ok("[Readers]\nCpusPerReader=4\n");
	ASSERT(c && c->cpus_per_reader == 4);
	config_free(c);

	c = parse_ok("[Readers]\nReaderNice=-20\n");
	ASSERT(c && c->reader_nice == -20);
	config_free(c);
	c = parse_ok("[Readers]\nReaderNice=19\n");
	ASSERT(c && c->reader_nice == 19);
	config_free(c);
	c = parse_ok("[Readers]\nReaderNice=0\n");
	ASSERT(c && c->reader_nice == 0);
	config_free(c);
	expect_error(
		"[Readers]\nReaderNice=-21\n",
		"test.conf:2: ReaderNice=-21: must be a nice value between -20 and 19");
	expect_error(
		"[Readers]\nReaderNice=20\n",
		"test.conf:2: ReaderNice=20: must be a nice value between -20 and 19");
	expect_error("[Readers]\nReaderNice=--1\n", "test.conf:2: ReaderNice=--1: must be a nice value");

	c = parse_ok("[Socket]\nSharedRingBytes=0\nMaxSharedRings=1\nMaxSharedRingsPerUid=4096\n");
	ASSERT(c && c->shared_ring_bytes == 0 && c->max_shared_rings == 1 &&
	       c->max_shared_rings_per_uid == 4096);
	config_free(c);

	c = parse_ok(
		"[Socket]\nSocketPath=/run/x/y.sock\nClientQueueBytes=1G\nMaxClients=3\nMaxClientsPerUid=2\n"
		"MaxRequestBytes=1M\nRequestTimeoutMs=10\nMaxJsonDepth=64\nAllowGroups=0 7\n");
	ASSERT(c && strcmp(c->socket_path, "/run/x/y.sock") == 0);
	ASSERT(c && c->client_queue_bytes == 1024u * 1024 * 1024 && c->max_clients == 3 &&
	       c->max_clients_per_uid == 2 && c->max_request_bytes == 1024 * 1024 &&
	       c->request_timeout_ms == 10 && c->max_json_depth == 64);
	ASSERT(c && c->allow_groups.n == 2 && c->allow_groups.gids[0] == 0 && c->allow_groups.gids[1] == 7);
	config_free(c);

	c = parse_ok("[Bus]\nBusEventsPerSecond=100000\n");
	ASSERT(c && c->bus_events_per_second == 100000);
	config_free(c);
}

static void test_pages_per_cpu(void) {
	for (unsigned v = 1; v <= 65536; v *= 2) {
		char text[64];
		snprintf(text, sizeof(text), "[Ring]\nPagesPerCpu=%u\n", v);
		_cleanup_(config_freep) Config *c = parse_ok(text);
		CHECK(c && c->pages_per_cpu == v, "%u", v);
	}
	/* The message a user sees, verbatim. */
	expect_error(
		"[Ring]\n\n# ring\nPagesPerCpu=3\n",
		"test.conf:4: PagesPerCpu=3: must be a power of two between 1 and 65536");
	expect_error("[Ring]\nPagesPerCpu=0\n", "test.conf:2: PagesPerCpu=0: must be a power of two");
	expect_error("[Ring]\nPagesPerCpu=131072\n", "test.conf:2: PagesPerCpu=131072: must be a power of two");
	expect_error("[Ring]\nPagesPerCpu=96\n", "test.conf:2: PagesPerCpu=96: must be a power of two");
	expect_error("[Ring]\nPagesPerCpu=64K\n", "test.conf:2: PagesPerCpu=64K: must be a power of two");
}

static void test_booleans(void) {
	static const char *const yes[] = { "yes", "true", "1", "on", "YES", "True", "On" };
	static const char *const no[] = { "no", "false", "0", "off", "NO", "False", "OFF" };
	char text[128];

	for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
		snprintf(text, sizeof(text), "[Daemon]\nReplaceIncompatiblePins=%s\n", yes[i]);
		_cleanup_(config_freep) Config *c = parse_ok(text);
		CHECK(c && c->replace_incompatible_pins, "%s", yes[i]);
	}
	for (size_t i = 0; i < ELEMENTSOF(no); i++) {
		snprintf(
			text,
			sizeof(text),
			"[Daemon]\nReplaceIncompatiblePins=yes\nReplaceIncompatiblePins=%s\n",
			no[i]);
		_cleanup_(config_freep) Config *c = parse_ok(text);
		CHECK(c && !c->replace_incompatible_pins, "%s", no[i]);
	}
	expect_error(
		"[Daemon]\nReplaceIncompatiblePins=maybe\n",
		"test.conf:2: ReplaceIncompatiblePins=maybe: must be a boolean");
	expect_error("[Daemon]\nReplaceIncompatiblePins=2\n", "test.conf:2: ReplaceIncompatiblePins=2: ");
	expect_error("[Daemon]\nReplaceIncompatiblePins=y es\n", "test.conf:2: ReplaceIncompatiblePins=y es: ");
}

static void test_sizes(void) {
	static const struct {
		const char *text;
		uint64_t bytes;
	} good[] = {
		{ "65536", 65536 },    { "64K", 65536 },     { "64k", 65536 },   { "4M", 4u << 20 },
		{ "4m", 4u << 20 },    { "1G", 1u << 30 },   { "1g", 1u << 30 }, { "1048576K", 1u << 30 },
		{ "1024M", 1u << 30 }, { "100000", 100000 },
	};
	static const char *const bad[] = { "4MB", "4 M", "4MiB",         "M",  "K4", "4T", "1.5M",
					   "2G",  "63K", "17179869184G", "-4M" };
	char text[128], prefix[128];

	for (size_t i = 0; i < ELEMENTSOF(good); i++) {
		snprintf(text, sizeof(text), "[Socket]\nClientQueueBytes=%s\n", good[i].text);
		_cleanup_(config_freep) Config *c = parse_ok(text);
		CHECK(c && c->client_queue_bytes == good[i].bytes, "%s", good[i].text);
	}
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		snprintf(text, sizeof(text), "[Socket]\nClientQueueBytes=%s\n", bad[i]);
		snprintf(prefix, sizeof(prefix), "test.conf:2: ClientQueueBytes=%s: must be a size", bad[i]);
		expect_error(text, prefix);
	}

	Config *c = parse_ok("[Ring]\nWatermark=3G\n[Socket]\nMaxRequestBytes=2K\n");
	ASSERT(c && c->watermark == 3u << 30 && c->max_request_bytes == 2048);
	config_free(c);
	expect_error(
		"[Ring]\nWatermark=4G\n",
		"test.conf:2: Watermark=4G: must be a size between 0 and 4294967295");
	expect_error(
		"[Socket]\nMaxRequestBytes=2M\n",
		"test.conf:2: MaxRequestBytes=2M: must be a size between 256 and 1M");
}

static void test_paths(void) {
	static const char *const bad[] = {
		"relative/path", "./x",   "/",    "//",    "/a//b", "/a/./b",
		"/a/../b",       "/a/..", "/a/.", "/a/b/", "~/x",   "/a/\tb",
	};
	char text[512], prefix[512];
	Config *c;

	c = parse_ok("[Daemon]\nPinPath=/sys/fs/bpf/a.b/..c/...\n");
	ASSERT(c && strcmp(c->pin_path, "/sys/fs/bpf/a.b/..c/...") == 0);
	config_free(c);

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		snprintf(text, sizeof(text), "[Daemon]\nPinPath=%s\n", bad[i]);
		if (strchr(bad[i], '\t'))
			snprintf(prefix, sizeof(prefix), "test.conf:2: PinPath=/a/\\x09b: ");
		else
			snprintf(prefix, sizeof(prefix), "test.conf:2: PinPath=%s: ", bad[i]);
		expect_error(text, prefix, "must be an absolute, normalized path");

		snprintf(text, sizeof(text), "[Socket]\nSocketPath=%s\n", bad[i]);
		expect_error(text, "test.conf:2: SocketPath=", "must be an absolute, normalized path");
	}

	/* sun_path holds 108 bytes including the NUL: 107 characters is the longest path. */
	char path[200] = "/run/";
	memset(path + 5, 'x', 107 - 5);
	path[107] = 0;
	snprintf(text, sizeof(text), "[Socket]\nSocketPath=%s\n", path);
	c = parse_ok(text);
	ASSERT(c && strlen(c->socket_path) == 107);
	config_free(c);
	strcat(path, "y");
	snprintf(text, sizeof(text), "[Socket]\nSocketPath=%s\n", path);
	snprintf(prefix, sizeof(prefix), "test.conf:2: SocketPath=%s: path is too long (at most 107 bytes)", path);
	expect_error(text, prefix);

	/* The same length is fine for PinPath=, which has no sun_path limit. */
	snprintf(text, sizeof(text), "[Daemon]\nPinPath=%s\n", path);
	c = parse_ok(text);
	ASSERT(c && strcmp(c->pin_path, path) == 0);
	config_free(c);

	/* A PATH_MAX-sized PinPath= leaves no room for the pins below it. */
	_cleanup_free_ char *long_text = malloc(5000);
	ASSERT(long_text);
	if (long_text) {
		strcpy(long_text, "[Daemon]\nPinPath=/");
		size_t n = strlen(long_text);
		memset(long_text + n, 'p', 4090);
		strcpy(long_text + n + 4090, "\n");
		expect_error(long_text, "test.conf:2: PinPath=/ppp", "...: path is too long");
	}
}

static void test_probes(void) {
	static const struct {
		const char *value;
		uint32_t mask;
	} good[] = {
		{ "all", PROBES_ALL },
		{ "none", 0 },
		{ "exec", 1u << PROBE_EXEC },
		{ "exec exit", (1u << PROBE_EXEC) | (1u << PROBE_EXIT) },
		{ "exec,open", (1u << PROBE_EXEC) | (1u << PROBE_OPEN) },
		{ "fork, connect", (1u << PROBE_FORK) | (1u << PROBE_CONNECT) },
		{ "connect,,exit  fork", (1u << PROBE_CONNECT) | (1u << PROBE_EXIT) | (1u << PROBE_FORK) },
		{ "exec exec", 1u << PROBE_EXEC },
		{ "exec exit fork open connect", PROBES_ALL },
	};
	char text[128];

	for (size_t i = 0; i < ELEMENTSOF(good); i++) {
		snprintf(text, sizeof(text), "[Probes]\nProbes=%s\n", good[i].value);
		_cleanup_(config_freep) Config *c = parse_ok(text);
		CHECK(c && PROBES(c)->probes == good[i].mask, "%s", good[i].value);
	}
	expect_error(
		"[Probes]\nProbes=exec kprobe\n", "test.conf:2: Probes=exec kprobe: unknown probe \"kprobe\"");
	expect_error("[Probes]\nProbes=EXEC\n", "test.conf:2: Probes=EXEC: unknown probe \"EXEC\"");
	expect_error("[Probes]\nProbes=all exec\n", "test.conf:2: Probes=all exec: ", "cannot be combined");
	expect_error("[Probes]\nProbes=exec none\n", "test.conf:2: Probes=exec none: ", "cannot be combined");
	expect_error("[Probes]\nProbes=all,none\n", "test.conf:2: Probes=all,none: ", "cannot be combined");
	expect_error("[Probes]\nProbes=,\n", "test.conf:2: Probes=,: no probe names");
}

/* ExcludeComms=, ExcludePaths=, ExcludeUnits= and RecorderTypes= (docs/pipeline.md, "Demand"). */
static void test_exclusions(void) {
	_cleanup_(config_freep) Config *c = parse_ok(
		"[Probes]\nExcludeComms=cron, updatedb updatedb\nExcludePaths=/proc/* /etc/ld.so.cache\n"
		"[Recorder]\nRecorderTypes=exec open\n");
	const PathPatternList *pp;
	char text[512], name[32];
	size_t o;

	CHECK(c, "exclusions parse");
	if (!c)
		return;
	CHECK(PROBES(c)->exclude_comms.n == 2 && streq(PROBES(c)->exclude_comms.comms[0], "cron") &&
		      streq(PROBES(c)->exclude_comms.comms[1], "updatedb"),
	      "ExcludeComms=: two names, the duplicate once");
	/* Zero-padded: the probe compares the 16 bytes as two words. */
	CHECK(memcmp(PROBES(c)->exclude_comms.comms[0], "cron\0\0\0\0\0\0\0\0\0\0\0\0", 16) == 0,
	      "comm padding");
	pp = &PROBES(c)->exclude_paths;
	CHECK(pp->n == 2 && pp->paths[0].prefix && pp->paths[0].len == 6 &&
		      streq(pp->paths[0].path, "/proc/") && !pp->paths[1].prefix && pp->paths[1].len == 16 &&
		      streq(pp->paths[1].path, "/etc/ld.so.cache"),
	      "ExcludePaths=: a prefix and a path");
	CHECK(RECORDER(c)->types == ((1u << PROBE_EXEC) | (1u << PROBE_OPEN)), "RecorderTypes=exec open");
	CHECK(probes_type_mask(RECORDER(c)->types) ==
		      ((UINT64_C(1) << PERFRELAY_TYPE_EXEC) | (UINT64_C(1) << PERFRELAY_TYPE_OPEN)),
	      "RecorderTypes= as record types");

	expect_error(
		"[Probes]\nExcludePaths=proc/*\n", "test.conf:2: ExcludePaths=proc/*: ", "not an absolute path");
	expect_error(
		"[Probes]\nExcludePaths=/a*b\n", "test.conf:2: ExcludePaths=/a*b: ", "only a \"*\" at the end");
	expect_error(
		"[Probes]\nExcludePaths=/a?\n", "test.conf:2: ExcludePaths=/a?: ", "only a \"*\" at the end");
	expect_error(
		"[Probes]\nExcludeComms=a-name-of-16-byte\n", "ExcludeComms=", "longer than a process name");
	snprintf(text, sizeof(text), "[Probes]\nExcludePaths=/%0*d\n", 63, 0);
	expect_error(text, "longer than 63 bytes");
	o = snprintf(text, sizeof(text), "[Probes]\nExcludeComms=");
	for (unsigned i = 0; i <= PERFRELAY_DEMAND_COMMS; i++) {
		snprintf(name, sizeof(name), "c%u ", i);
		o += snprintf(text + o, sizeof(text) - o, "%s", name);
	}
	snprintf(text + o, sizeof(text) - o, "\n");
	expect_error(text, "too many names (at most 8)");
	/* An empty value resets to none. */
	config_free(c);
	c = parse_ok("[Probes]\nExcludePaths=/proc/*\nExcludePaths=\n");
	CHECK(c && PROBES(c)->exclude_paths.n == 0, "ExcludePaths= empty resets");

	/* ExcludeUnits=: units that run processes, not slices; the duplicate once. */
	config_free(c);
	c = parse_ok("[Probes]\nExcludeUnits=cron.service session-3.scope cron.service\n");
	CHECK(c && PROBES(c)->exclude_units.n == 2 &&
		      streq(PROBES(c)->exclude_units.units[0], "cron.service") &&
		      streq(PROBES(c)->exclude_units.units[1], "session-3.scope"),
	      "ExcludeUnits=: two units");
	expect_error("[Probes]\nExcludeUnits=user.slice\n", "ExcludeUnits=user.slice: ", "not a .slice");
	expect_error("[Probes]\nExcludeUnits=sshd\n", "ExcludeUnits=sshd: ", "not the name of a unit");
	o = snprintf(text, sizeof(text), "[Probes]\nExcludeUnits=");
	for (unsigned i = 0; i <= PERFRELAY_DEMAND_UNITS; i++)
		o += snprintf(text + o, sizeof(text) - o, "u%u.service ", i);
	snprintf(text + o, sizeof(text) - o, "\n");
	expect_error(text, "too many units (at most 8)");
}

static void test_counters(void) {
	static const struct {
		const char *value;
		uint32_t mask;
	} good[] = {
		{ "none", 0 },
		{ "default", COUNTERS_DEFAULT },
		{ "task-clock", 1u << PERFRELAY_COUNTER_TASK_CLOCK },
		{ "cycles,instructions",
		  (1u << PERFRELAY_COUNTER_CYCLES) | (1u << PERFRELAY_COUNTER_INSTRUCTIONS) },
		{ "task-clock context-switches page-faults cpu-migrations", COUNTERS_SOFTWARE },
		{ "task-clock context-switches page-faults cpu-migrations cycles instructions cache-misses "
		  "branch-misses",
		  COUNTERS_ALL },
	};
	char text[256];
	Config *c;

	for (size_t i = 0; i < ELEMENTSOF(good); i++) {
		snprintf(text, sizeof(text), "[Counters]\nCounters=%s\n", good[i].value);
		_cleanup_(config_freep) Config *k = parse_ok(text);
		CHECK(k && COUNTERS(k)->counters == good[i].mask, "%s", good[i].value);
	}
	c = parse_ok("[Counters]\nCountersIntervalMs=250\nCountersMaxProcesses=100\nCountersMaxCgroups=64\n");
	ASSERT(c && COUNTERS(c)->interval_ms == 250 && c->counters_max_processes == 100 &&
	       c->counters_max_cgroups == 64 && COUNTERS(c)->counters == COUNTERS_DEFAULT);
	config_free(c);
	expect_error(
		"[Counters]\nCounters=task-clock bogus\n",
		"test.conf:2: Counters=task-clock bogus: unknown counter \"bogus\"");
	expect_error("[Counters]\nCounters=task_clock\n", "test.conf:2: Counters=task_clock: unknown counter");
	expect_error(
		"[Counters]\nCounters=none cycles\n",
		"test.conf:2: Counters=none cycles: ",
		"cannot be combined");
	expect_error("[Counters]\nCounters=,\n", "test.conf:2: Counters=,: no counter names");
	expect_error("[Counters]\nCountersIntervalMs=99\n", "test.conf:2: CountersIntervalMs=99: ");
	expect_error("[Counters]\nCountersMaxCgroups=0\n", "test.conf:2: CountersMaxCgroups=0: ");
}

static void test_cpu_groups(void) {
	Config *c;

	c = parse_ok("[Readers]\nCpuGroups=0-3 4-7\t8,10\n");
	ASSERT(c && c->n_cpu_groups == 3);
	if (c && c->n_cpu_groups == 3) {
		ASSERT(cpuset_count(&c->cpu_groups[0]) == 4 && cpuset_contains(&c->cpu_groups[0], 3));
		ASSERT(cpuset_count(&c->cpu_groups[1]) == 4 && cpuset_contains(&c->cpu_groups[1], 7));
		ASSERT(cpuset_count(&c->cpu_groups[2]) == 2 && cpuset_contains(&c->cpu_groups[2], 10));
	}
	config_free(c);

	/* Last value wins, and replaces rather than appends. */
	c = parse_ok("[Readers]\nCpuGroups=0-3 4-7\nCpuGroups=9\n");
	ASSERT(c && c->n_cpu_groups == 1 && cpuset_contains(&c->cpu_groups[0], 9));
	config_free(c);

	expect_error(
		"[Readers]\nCpuGroups=0-3 2-5\n", "test.conf:2: CpuGroups=0-3 2-5: ", "\"2-5\" overlaps 0-3");
	expect_error("[Readers]\nCpuGroups=0 1 0\n", "test.conf:2: CpuGroups=0 1 0: ", "overlaps");
	expect_error("[Readers]\nCpuGroups=0-3 x\n", "test.conf:2: CpuGroups=0-3 x: ", "\"x\": not a CPU list");
	expect_error("[Readers]\nCpuGroups=3-1\n", "test.conf:2: CpuGroups=3-1: ", "not a CPU list");
	expect_error("[Readers]\nCpuGroups=0,\n", "test.conf:2: CpuGroups=0,: ", "not a CPU list");
	expect_error("[Readers]\nCpuGroups=4096\n", "test.conf:2: CpuGroups=4096: ", "must be below 4096");

	/* CONFIG_MAX_CPU_GROUPS groups are fine, one more is not. */
	char text[4096] = "[Readers]\nCpuGroups=";
	for (unsigned i = 0; i < CONFIG_MAX_CPU_GROUPS; i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%u ", i);
	c = parse_ok(text);
	ASSERT(c && c->n_cpu_groups == CONFIG_MAX_CPU_GROUPS);
	config_free(c);
	snprintf(text + strlen(text), sizeof(text) - strlen(text), "%u", CONFIG_MAX_CPU_GROUPS);
	expect_error(text, "test.conf:2: CpuGroups=0 1 2 ", "too many CPU groups (at most 256)");

	/* A group may be a long list; nothing truncates it. */
	char list[8192] = "[Readers]\nCpuGroups=";
	for (unsigned i = 0; i < 2000; i += 2)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%u", i ? "," : "", i);
	strcat(list, " 1\n");
	c = parse_ok(list);
	ASSERT(c && c->n_cpu_groups == 2 && cpuset_count(&c->cpu_groups[0]) == 1000);
	config_free(c);
}

static void test_allow_groups(void) {
	struct group *root = getgrgid(0);
	Config *c;

	c = parse_ok("[Socket]\nAllowGroups=5,6 7\n");
	ASSERT(c && c->allow_groups.n == 3 && c->allow_groups.gids[0] == 5 && c->allow_groups.gids[2] == 7);
	config_free(c);

	/* Duplicates collapse; a later line replaces the list. */
	c = parse_ok("[Socket]\nAllowGroups=1 2\nAllowGroups=9 9 9\n");
	ASSERT(c && c->allow_groups.n == 1 && c->allow_groups.gids[0] == 9);
	config_free(c);

	if (root && root->gr_name) {
		char text[256];
		snprintf(text, sizeof(text), "[Socket]\nAllowGroups=%s 0 12\n", root->gr_name);
		c = parse_ok(text);
		ASSERT(c && c->allow_groups.n == 2 && c->allow_groups.gids[0] == 0 &&
		       c->allow_groups.gids[1] == 12);
		config_free(c);
	} else
		fprintf(stderr, "no group with gid 0 here; skipping name resolution check\n");

	expect_error(
		"[Socket]\nAllowGroups=0 perfrelay-no-such-group-xyz\n",
		"test.conf:2: AllowGroups=0 perfrelay-no-such-group-xyz: ",
		"unknown group \"perfrelay-no-such-group-xyz\"");
	expect_error(
		"[Socket]\nAllowGroups=4294967295\n",
		"test.conf:2: AllowGroups=4294967295: ",
		"not a valid numeric group id");
	expect_error("[Socket]\nAllowGroups=99999999999\n", "not a valid numeric group id");
	expect_error("[Socket]\nAllowGroups=12abc\n", "test.conf:2: AllowGroups=12abc: ", "\"12abc\"");
	expect_error("[Socket]\nAllowGroups=,\n", "test.conf:2: AllowGroups=,: no group names");

	char text[1024] = "[Socket]\nAllowGroups=";
	for (unsigned i = 0; i < CONFIG_MAX_GROUPS; i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%u ", 1000 + i);
	c = parse_ok(text);
	ASSERT(c && c->allow_groups.n == CONFIG_MAX_GROUPS);
	config_free(c);
	strcat(text, "5000");
	expect_error(text, "too many groups (at most 64)");

	/* ControlGroups= is a list of its own: seeing is not acting (docs/security.md). */
	c = parse_ok("[Socket]\nAllowGroups=5\nControlGroups=8 9\n");
	ASSERT(c && c->allow_groups.n == 1 && c->allow_groups.gids[0] == 5);
	ASSERT(c->control_groups.n == 2 && c->control_groups.gids[0] == 8 && c->control_groups.gids[1] == 9);
	config_free(c);
	c = parse_ok("[Socket]\nControlGroups=8\nControlGroups=\n");
	ASSERT(c && c->control_groups.n == 0 && c->control_groups.gids == NULL);
	config_free(c);
	expect_error(
		"[Socket]\nControlGroups=perfrelay-no-such-group-xyz\n",
		"test.conf:2: ControlGroups=perfrelay-no-such-group-xyz: ",
		"unknown group \"perfrelay-no-such-group-xyz\"");
}

static void test_syntax(void) {
	Config *c;

	/* Comments, blank lines, whitespace, CRLF, a byte order mark, repeated sections. */
	c = parse_ok(
		"\xef\xbb\xbf# comment\r\n; other comment\r\n\r\n  [Ring]  \r\n\tPagesPerCpu = 8 \r\n"
		"   # indented comment\n[ Socket ]\nMaxClients=\t9\t\n[Ring]\nFlushIntervalMs=1");
	ASSERT(c && c->pages_per_cpu == 8 && c->max_clients == 9 && c->flush_interval_ms == 1);
	config_free(c);

	/* Empty text and text of only comments are the defaults. */
	_cleanup_(config_freep) Config *d = new_default();
	c = parse_ok("");
	ASSERT(c && config_equal(c, d));
	config_free(c);
	c = parse_ok("# nothing\n\n");
	ASSERT(c && config_equal(c, d));
	config_free(c);
	ASSERT(config_parse_text(d, NULL, 0, "x", NULL) == 0);

	/* A value may contain '=': only the first one splits. */
	expect_error("[Ring]\nPagesPerCpu=8=8\n", "test.conf:2: PagesPerCpu=8=8: must be a power of two");

	expect_error("[Foo]\nBar=1\n", "test.conf:1: unknown section [Foo]");
	expect_error("[Ring]\n[ring]\n", "test.conf:2: unknown section [ring]");
	expect_error("[]\n", "test.conf:1: unknown section []");
	expect_error("[Ring\n", "test.conf:1: invalid section header \"[Ring\"");
	expect_error("[Ring] # comment\n", "test.conf:1: invalid section header");
	expect_error("PagesPerCpu=8\n[Ring]\n", "test.conf:1: PagesPerCpu=8: key outside a section");
	expect_error("[Ring]\nPagesPerCpu\n", "test.conf:2: \"PagesPerCpu\": expected Key=Value");
	expect_error("[Ring]\n=8\n", "test.conf:2: =8: empty key name");
	expect_error("[Ring]\nFoo=1\n", "test.conf:2: Foo=1: unknown key in section [Ring]");
	expect_error("[Ring]\npagespercpu=8\n", "test.conf:2: pagespercpu=8: unknown key");
	expect_error(
		"[Ring]\nMaxClients=8\n",
		"test.conf:2: MaxClients=8: unknown key in section [Ring]",
		"MaxClients= belongs in [Socket]");
	expect_error("[Ring]\nPagesPerCpu=8 # eight\n", "test.conf:2: PagesPerCpu=8 # eight: ");

	/* The first error stops parsing, and its line number counts every line. */
	expect_error("# 1\n\n[Ring]\n\n\n\nPagesPerCpu=3\nFlushIntervalMs=0\n", "test.conf:7: PagesPerCpu=3");

	/* Control bytes in a value are escaped: the message stays one printable line. */
	expect_error("[Ring]\nPagesPerCpu=3\x1b[2J\r\r\n", "test.conf:2: PagesPerCpu=3\\x1b[2J: ");
	static const char nul_text[] = "[Ring]\nPagesPerCpu=8\0\n";
	_cleanup_(config_freep) Config *e = new_default();
	_cleanup_free_ char *error = NULL;
	ASSERT(config_parse_text(e, nul_text, sizeof(nul_text) - 1, "nul.conf", &error) == -EINVAL);
	ASSERT(error && strstr(error, "nul.conf:2: line contains a NUL byte"));

	/* A very long value is cut in the message. */
	_cleanup_free_ char *long_text = malloc(20000);
	ASSERT(long_text);
	if (long_text) {
		strcpy(long_text, "[Ring]\nPagesPerCpu=");
		size_t n = strlen(long_text);
		memset(long_text + n, '9', 10000);
		long_text[n + 10000] = 0;
		_cleanup_(config_freep) Config *f = new_default();
		_cleanup_free_ char *err = NULL;
		ASSERT(parse(f, long_text, &err) == -EINVAL);
		ASSERT(err && strlen(err) < 400 && strstr(err, "...: must be a power of two"));
	}

	/* Without a file name the text still gets a name, and no message is fine too. */
	_cleanup_(config_freep) Config *g = new_default();
	_cleanup_free_ char *err2 = NULL;
	ASSERT(config_parse_text(g, "[X]", 3, NULL, &err2) == -EINVAL);
	ASSERT(err2 && strstr(err2, ":1: unknown section [X]"));
	ASSERT(config_parse_text(g, "[X]", 3, "a", NULL) == -EINVAL);
}

/* "Key=" restores the default of every key, whatever was set before. */
static void test_empty_resets(void) {
	static const char *const lines[] = {
		"[Daemon]\nPinPath=/x\nPinPath=\n",
		"[Daemon]\nReplaceIncompatiblePins=yes\nReplaceIncompatiblePins=\n",
		"[Ring]\nPagesPerCpu=8\nPagesPerCpu=\n",
		"[Ring]\nWatermark=4K\nWatermark=\n",
		"[Ring]\nWakeupEvents=3\nWakeupEvents=\n",
		"[Ring]\nFlushIntervalMs=3\nFlushIntervalMs=\n",
		"[Readers]\nCpuGroups=0-1 2\nCpuGroups=\n",
		"[Readers]\nCpusPerReader=3\nCpusPerReader=\n",
		"[Probes]\nProbes=none\nProbes=\n",
		"[Socket]\nSocketPath=/x\nSocketPath=  \n",
		"[Socket]\nClientQueueBytes=64K\nClientQueueBytes=\n",
		"[Socket]\nMaxClients=3\nMaxClients=\n",
		"[Socket]\nMaxClientsPerUid=3\nMaxClientsPerUid=\n",
		"[Socket]\nMaxRequestBytes=300\nMaxRequestBytes=\n",
		"[Socket]\nRequestTimeoutMs=30\nRequestTimeoutMs=\n",
		"[Socket]\nMaxJsonDepth=3\nMaxJsonDepth=\n",
		"[Socket]\nAllowGroups=3\nAllowGroups=\n",
		"[Bus]\nBusEventsPerSecond=3\nBusEventsPerSecond=\n",
		/* Keys of the features' sections (ConfigPart) reset to their part's defaults. */
		"[Recorder]\nRecorder=no\nRecorder=\n",
		"[Recorder]\nRecorderPagesPerCpu=8\nRecorderPagesPerCpu=\n",
		"[Counters]\nCounters=none\nCounters=\n",
		"[Counters]\nCountersIntervalMs=300\nCountersIntervalMs=\n",
		"[Capture]\nCaptureBytes=3\nCaptureBytes=\n",
		"[Capture]\nMaxCaptures=3\nMaxCaptures=\n",
		"[Capture]\nAllowHostCaptures=yes\nAllowHostCaptures=\n",
	};
	_cleanup_(config_freep) Config *d = new_default();

	for (size_t i = 0; i < ELEMENTSOF(lines); i++) {
		_cleanup_(config_freep) Config *c = parse_ok(lines[i]);
		CHECK(c && config_equal(c, d), "%s", lines[i]);

		/* And the first line alone really changed something. */
		_cleanup_free_ char *first = strndup(lines[i], (size_t) (strrchr(lines[i], '\n') - lines[i]));
		*strrchr(first, '\n') = 0;
		_cleanup_(config_freep) Config *e = parse_ok(first);
		CHECK(e && !config_equal(e, d), "%s", first);
	}
}

/* Parsing applies onto the current config; a failed parse changes nothing at all. */
static void test_incremental_and_atomic(void) {
	_cleanup_(config_freep) Config *c = new_default();
	_cleanup_free_ char *error = NULL;

	ASSERT(parse(c, "[Ring]\nPagesPerCpu=8\n[Readers]\nCpuGroups=0 1\n", &error) == 0);
	ASSERT(parse(c, "[Socket]\nMaxClients=5\nAllowGroups=3\n", &error) == 0);
	ASSERT(error == NULL);
	ASSERT(c->pages_per_cpu == 8 && c->max_clients == 5 && c->n_cpu_groups == 2 && c->allow_groups.n == 1);

	ASSERT(parse(c,
		     "[Ring]\nPagesPerCpu=16\n[Readers]\nCpuGroups=4\n[Socket]\nSocketPath=/a\nMaxClients=0\n",
		     &error) == -EINVAL);
	ASSERT(error && strstr(error, "test.conf:7: MaxClients=0: "));
	ASSERT(c->pages_per_cpu == 8 && c->max_clients == 5 && c->n_cpu_groups == 2);
	ASSERT(strcmp(c->socket_path, "/run/perfrelay/events.sock") == 0);

	/* *ret_error is written only on failure. */
	free(error);
	error = NULL;
	ASSERT(parse(c, "[Socket]\nMaxClients=6\n", &error) == 0);
	ASSERT(error == NULL && c->max_clients == 6);
	ASSERT(parse(c, "[Nope]\n", &error) == -EINVAL);
	ASSERT(error && strstr(error, "test.conf:1: unknown section [Nope]"));
}

static void test_validate(void) {
	long page = sysconf(_SC_PAGESIZE);
	_cleanup_(config_freep) Config *c = new_default();
	char text[256];

	{
		_cleanup_free_ char *error = NULL;
		c->cpus_per_reader = 2;
		ASSERT(config_validate(c, &error) == 0);
		c->cpu_groups = calloc(1, sizeof(CpuSet));
		c->n_cpu_groups = 1;
		ASSERT(config_validate(c, &error) == -EINVAL);
		ASSERT(error && strstr(error, "CpuGroups=") && strstr(error, "CpusPerReader="));
		ASSERT(config_validate(c, NULL) == -EINVAL);
	}

	/* Watermark= must be below PagesPerCpu × page size. */
	snprintf(text, sizeof(text), "[Ring]\nPagesPerCpu=4\nWatermark=%ld\n", 4 * page - 1);
	{
		_cleanup_(config_freep) Config *d = parse_ok(text);
		ASSERT(d && config_validate(d, NULL) == 0);
	}
	snprintf(text, sizeof(text), "[Ring]\nPagesPerCpu=4\nWatermark=%ld\n", 4 * page);
	{
		_cleanup_(config_freep) Config *d = parse_ok(text);
		_cleanup_free_ char *error = NULL;
		char want[64];
		ASSERT(d && config_validate(d, &error) == -EINVAL);
		snprintf(want, sizeof(want), "Watermark=%ld: must be smaller", 4 * page);
		ASSERT(error && strstr(error, want) && strstr(error, "PagesPerCpu=4"));
	}
	/* The default ring is large enough for a large watermark. */
	snprintf(text, sizeof(text), "[Ring]\nWatermark=%ld\n", 63 * page);
	{
		_cleanup_(config_freep) Config *d = parse_ok(text);
		ASSERT(d && config_validate(d, NULL) == 0);
	}
	ASSERT(config_validate(NULL, NULL) == -EINVAL);
}

/* ---- config_load() on real files ---- */

static char tmpdir[] = "/tmp/test-config-XXXXXX";

static int remove_entry(
	const char *path, _unused_ const struct stat *st, _unused_ int flag, _unused_ struct FTW *ftw) {
	return remove(path);
}

static void write_file(const char *dir, const char *name, const char *content) {
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %m\n", path);
		exit(1);
	}
}

static char *path_in(const char *name) {
	char *p;

	if (asprintf(&p, "%s/%s", tmpdir, name) < 0)
		exit(1);
	return p;
}

static void test_load(void) {
	_cleanup_free_ char *main_path = path_in("perfrelay.conf"), *dropins = path_in("perfrelay.conf.d");
	_cleanup_free_ char *missing = path_in("missing.conf"), *missing_dir = path_in("missing.d");

	ASSERT(mkdir(dropins, 0755) == 0);
	write_file(
		tmpdir,
		"perfrelay.conf",
		"[Ring]\nPagesPerCpu=8\nFlushIntervalMs=20\n[Socket]\nMaxClients=10\nAllowGroups=4\n");
	/* Written out of order on purpose: the loader sorts. */
	write_file(dropins, "20-b.conf", "[Ring]\nPagesPerCpu=32\n[Socket]\nAllowGroups=\n");
	write_file(dropins, "10-a.conf", "[Ring]\nPagesPerCpu=16\nWakeupEvents=5\n");
	write_file(dropins, "30-c.conf", "# nothing here\n");
	write_file(dropins, ".hidden.conf", "[Ring]\nPagesPerCpu=1024\n");
	write_file(dropins, "99-ignored.conf.bak", "[Ring]\nPagesPerCpu=2048\n");
	write_file(dropins, "README", "not a config file\n");

	{
		_cleanup_(config_freep) Config *c = new_default();
		_cleanup_free_ char *error = NULL;
		int r = config_load(c, main_path, dropins, &error);
		CHECK(r == 0, "%d %s", r, error ?: "");
		ASSERT(c->pages_per_cpu == 32);     /* 20-b.conf is read last */
		ASSERT(c->wakeup_events == 5);      /* from 10-a.conf, untouched later */
		ASSERT(c->flush_interval_ms == 20); /* main file */
		ASSERT(c->max_clients == 10);       /* main file */
		ASSERT(c->allow_groups.n == 0);     /* reset by the empty value in 20-b.conf */
	}

	/* Missing main file and missing directory are the defaults. */
	{
		_cleanup_(config_freep) Config *c = new_default(), *d = new_default();
		_cleanup_free_ char *error = NULL;
		ASSERT(config_load(c, missing, missing_dir, &error) == 0);
		ASSERT(error == NULL && config_equal(c, d));
		ASSERT(config_load(c, NULL, NULL, &error) == 0);
		ASSERT(config_equal(c, d));
	}
	/* Only drop-ins. */
	{
		_cleanup_(config_freep) Config *c = new_default();
		ASSERT(config_load(c, missing, dropins, NULL) == 0);
		ASSERT(c->pages_per_cpu == 32 && c->max_clients == 256);
	}

	/* An error in a drop-in names that file and line, and leaves the config as it was. */
	write_file(dropins, "15-bad.conf", "[Ring]\n\nFlushIntervalMs=5000\n");
	{
		_cleanup_(config_freep) Config *c = new_default(), *d = new_default();
		_cleanup_free_ char *error = NULL, *want = NULL;
		ASSERT(asprintf(&want, "%s/15-bad.conf:3: FlushIntervalMs=5000: ", dropins) > 0);
		ASSERT(config_load(c, main_path, dropins, &error) == -EINVAL);
		CHECK(error && strstr(error, want), "%s", error ?: "(null)");
		ASSERT(config_equal(c, d));
	}
	{
		_cleanup_free_ char *p = path_in("perfrelay.conf.d/15-bad.conf");
		ASSERT(unlink(p) == 0);
	}

	/* Errors in the main file name it. */
	write_file(tmpdir, "broken.conf", "[Ring]\nWatermark=lots\n");
	{
		_cleanup_free_ char *p = path_in("broken.conf"), *error = NULL, *want = NULL;
		_cleanup_(config_freep) Config *c = new_default();
		ASSERT(asprintf(&want, "%s:2: Watermark=lots: ", p) > 0);
		ASSERT(config_load(c, p, NULL, &error) == -EINVAL);
		CHECK(error && strstr(error, want), "%s", error ?: "(null)");
	}

	/* Combination checks run over all files together. */
	write_file(dropins, "40-groups.conf", "[Readers]\nCpusPerReader=2\n");
	write_file(tmpdir, "groups.conf", "[Readers]\nCpuGroups=0-1 2-3\n");
	{
		_cleanup_free_ char *p = path_in("groups.conf"), *error = NULL;
		_cleanup_(config_freep) Config *c = new_default(), *d = new_default();
		ASSERT(config_load(c, p, dropins, &error) == -EINVAL);
		ASSERT(error && strstr(error, "CpuGroups=") && strstr(error, "CpusPerReader="));
		ASSERT(config_equal(c, d));
		/* ...and a later drop-in resetting one of them resolves it. */
		write_file(dropins, "50-reset.conf", "[Readers]\nCpusPerReader=\n");
		ASSERT(config_load(c, p, dropins, NULL) == 0);
		ASSERT(c->n_cpu_groups == 2 && c->cpus_per_reader == 0);
	}

	/* A directory where a file should be, and a file where the directory should be. */
	{
		_cleanup_free_ char *error = NULL;
		_cleanup_(config_freep) Config *c = new_default();
		ASSERT(config_load(c, dropins, NULL, &error) < 0);
		ASSERT(error && strstr(error, dropins) && strstr(error, "not a regular file"));
	}
	{
		_cleanup_free_ char *error = NULL;
		_cleanup_(config_freep) Config *c = new_default();
		ASSERT(config_load(c, NULL, main_path, &error) == -ENOTDIR);
		ASSERT(error && strstr(error, main_path) && strstr(error, "drop-in directory"));
	}
	{
		_cleanup_free_ char *sub = path_in("perfrelay.conf.d/60-dir.conf"), *error = NULL;
		_cleanup_(config_freep) Config *c = new_default();
		ASSERT(mkdir(sub, 0755) == 0);
		ASSERT(config_load(c, NULL, dropins, &error) < 0);
		ASSERT(error && strstr(error, sub) && strstr(error, "not a regular file"));
		ASSERT(rmdir(sub) == 0);
	}
}

static void test_load_size_limit(void) {
	_cleanup_free_ char *p = path_in("big.conf"), *buf = malloc(CONFIG_MAX_FILE_BYTES + 1);
	int fd;

	ASSERT(buf);
	if (!buf)
		return;
	/* Exactly CONFIG_MAX_FILE_BYTES of comment lines is accepted. */
	memset(buf, '#', CONFIG_MAX_FILE_BYTES + 1);
	for (size_t i = 99; i < CONFIG_MAX_FILE_BYTES + 1; i += 100)
		buf[i] = '\n';
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT(fd >= 0);
	ASSERT(write(fd, buf, CONFIG_MAX_FILE_BYTES) == (ssize_t) CONFIG_MAX_FILE_BYTES);
	close(fd);
	{
		_cleanup_(config_freep) Config *c = new_default();
		_cleanup_free_ char *error = NULL;
		ASSERT(config_load(c, p, NULL, &error) == 0);
	}
	/* One byte more is not. */
	fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
	ASSERT(fd >= 0);
	ASSERT(write(fd, "\n", 1) == 1);
	close(fd);
	{
		_cleanup_(config_freep) Config *c = new_default();
		_cleanup_free_ char *error = NULL;
		ASSERT(config_load(c, p, NULL, &error) == -EFBIG);
		ASSERT(error && strstr(error, p) && strstr(error, "larger than 1048576 bytes"));
	}
	ASSERT(unlink(p) == 0);
}

/* The shipped perfrelay.conf documents the defaults: commented out or not, it must give them. */
static void test_shipped_config(void) {
	const char *path = SRCDIR "/../../config/perfrelay.conf";
	_cleanup_(config_freep) Config *c = new_default(), *d = new_default(), *u = new_default();
	_cleanup_free_ char *error = NULL, *text = NULL, *uncommented = NULL;
	unsigned keys = 0;
	size_t size = 0;
	FILE *f;

	ASSERT(config_load(c, path, NULL, &error) == 0);
	ASSERT(config_equal(c, d));

	f = fopen(path, "re");
	CHECK(f, "cannot open %s", path);
	if (!f)
		return;
	text = malloc(CONFIG_MAX_FILE_BYTES);
	ASSERT(text);
	if (text)
		size = fread(text, 1, CONFIG_MAX_FILE_BYTES - 1, f);
	fclose(f);
	if (!text)
		return;
	text[size] = 0;

	/* Uncomment "#Key=value" lines (not the prose comments, which have a space after '#'). */
	uncommented = calloc(1, size + 1);
	ASSERT(uncommented);
	if (!uncommented)
		return;
	char *o = uncommented;
	for (const char *line = text; *line;) {
		const char *nl = strchrnul(line, '\n');
		if (line[0] == '#' && line[1] >= 'A' && line[1] <= 'Z' &&
		    memchr(line, '=', (size_t) (nl - line))) {
			line++;
			keys++;
		}
		memcpy(o, line, (size_t) (nl - line));
		o += nl - line;
		*o++ = '\n';
		line = *nl ? nl + 1 : nl;
	}
	*o = 0;

	/* Every key of the schema is listed (test_manpages.py checks them by name). */
	CHECK(keys == config_n_keys(u), "%u keys shipped, %zu in the schema", keys, config_n_keys(u));
	CHECK(config_parse_text(u, uncommented, strlen(uncommented), "uncommented", &error) == 0,
	      "%s",
	      error ?: "");
	ASSERT(config_equal(u, d));
}

/* Reload: keys marked restart keep their running values and are listed; live keys change. */
static void test_keep_restart_keys(void) {
	Config *running = parse_ok("[Ring]\nPagesPerCpu=64\n[Readers]\nCpuGroups=0\n[Socket]\nMaxClients=10\n");
	Config *files = parse_ok(
		"[Daemon]\nPinPath=/sys/fs/bpf/other\n[Ring]\nPagesPerCpu=128\n[Readers]\nCpuGroups=0-1\n"
		"[Socket]\nMaxClients=20\n");
	Config *same = parse_ok("[Ring]\nPagesPerCpu=64\n[Readers]\nCpuGroups=0\n[Socket]\nMaxClients=30\n");
	char *list = NULL;

	if (!running || !files || !same)
		return;
	ASSERT(config_keep_restart_keys(files, running, &list) == 0);
	ASSERT(list && streq(list, "PinPath=, PagesPerCpu=, CpuGroups="));
	/* What is in effect: the running values of restart keys, the files' live keys. */
	ASSERT(files->pages_per_cpu == 64 && files->max_clients == 20);
	ASSERT(streq(files->pin_path, "/sys/fs/bpf/perfrelay"));
	ASSERT(files->n_cpu_groups == 1 && cpuset_count(&files->cpu_groups[0]) == 1);
	free(list);
	list = (char *) 1;
	ASSERT(config_keep_restart_keys(same, files, &list) == 0 && list == NULL);
	ASSERT(same->max_clients == 30);
	config_free(running);
	config_free(files);
	config_free(same);

	/* The same for the keys of the features' sections: RecorderPagesPerCpu= and MaxCaptures=
	 * take a restart, CaptureBytes= and Probes= are live. */
	running = parse_ok("[Recorder]\nRecorderPagesPerCpu=8\n[Capture]\nMaxCaptures=2\nCaptureBytes=100\n");
	files = parse_ok(
		"[Recorder]\nRecorderPagesPerCpu=16\n[Capture]\nMaxCaptures=4\nCaptureBytes=200\n"
		"[Probes]\nProbes=exec\n");
	if (!running || !files)
		return;
	list = NULL;
	ASSERT(config_keep_restart_keys(files, running, &list) == 0);
	ASSERT(list && streq(list, "RecorderPagesPerCpu=, MaxCaptures="));
	ASSERT(RECORDER(files)->pages_per_cpu == 8 && CAPTURE(files)->max_captures == 2);
	ASSERT(CAPTURE(files)->bytes == 200 && PROBES(files)->probes == (1u << PROBE_EXEC));
	ASSERT(RECORDER(running)->pages_per_cpu == 8);
	free(list);
	config_free(running);
	config_free(files);
}

/* A feature's section shares the parser's rules with the core's: shared sections ([Probes],
 * [Counters]), the hint for a key in the wrong section, and unknown sections without the part. */
static void test_parts(void) {
	_cleanup_(config_freep) Config *c = parse_ok(
		"[Probes]\nProbes=exec\nPendingSyscalls=64\n[Counters]\nCountersIntervalMs=500\nCountersMaxCgroups=32\n");
	_cleanup_(config_freep) Config *bare = NULL;
	_cleanup_free_ char *error = NULL;

	ASSERT(c && PROBES(c)->probes == (1u << PROBE_EXEC) && c->pending_syscalls == 64);
	ASSERT(c && COUNTERS(c)->interval_ms == 500 && c->counters_max_cgroups == 32);
	expect_error("[Recorder]\nMaxCaptures=2\n", "MaxCaptures= belongs in [Capture]");
	expect_error("[Capture]\nRecorder=no\n", "Recorder= belongs in [Recorder]");

	/* Without the parts: the core's keys only, and no feature's section. */
	ASSERT(config_new(NULL, 0, &bare) == 0);
	ASSERT(config_part(bare, &recorder_config) == NULL);
	size_t n_part_keys = 0;
	for (size_t i = 0; i < n_parts; i++)
		n_part_keys += parts[i]->n_keys;
	ASSERT(config_n_keys(bare) + n_part_keys == config_n_keys(c));
	ASSERT(config_parse_text(bare, "[Recorder]\nRecorder=no\n", 23, "bare.conf", &error) < 0);
	ASSERT(error && strstr(error, "bare.conf:1: unknown section [Recorder]"));
	free(error);
	error = NULL;
	ASSERT(config_parse_text(bare, "[Probes]\nProbes=exec\n", 21, "bare.conf", &error) < 0);
	ASSERT(error && strstr(error, "unknown key in section [Probes]"));
}

/* Every feature's section, whichever features the build has: it parses empty, each of its keys
 * is known in it and refused elsewhere with a hint that names it, and its values are there. */
static void test_every_part(void) {
	_cleanup_(config_freep) Config *c = new_default();

	ASSERT(n_parts > 0);
	printf("test-config: the features' sections:");
	for (size_t i = 0; i < n_parts; i++)
		printf(" [%s]", parts[i]->section);
	printf("\n");
	for (size_t i = 0; i < n_parts; i++) {
		const ConfigPart *p = parts[i];
		char text[512], hint[256];

		ASSERT(p->section && p->n_keys > 0 && p->size > 0 && p->defaults);
		CHECK(config_part(c, p) != NULL, "[%s] has no values", p->section);
		snprintf(text, sizeof(text), "[%s]\n", p->section);
		config_free(parse_ok(text));
		for (size_t k = 0; k < p->n_keys; k++) {
			const char *other = streq(p->keys[k].section, "Daemon") ? "Socket" : "Daemon";

			CHECK(p->keys[k].section && p->keys[k].name, "[%s]: key %zu has no name", p->section, k);
			snprintf(text, sizeof(text), "[%s]\n%s=\n", other, p->keys[k].name);
			snprintf(hint, sizeof(hint), "%s= belongs in [%s]", p->keys[k].name, p->keys[k].section);
			expect_error(text, hint);
		}
	}
}

int main(void) {
	test_defaults();
	test_every_part();
	test_keep_restart_keys();
	test_parts();
	test_probe_names();
	test_integer_bounds();
	test_values();
	test_pages_per_cpu();
	test_booleans();
	test_sizes();
	test_paths();
	test_probes();
	test_exclusions();
	test_counters();
	test_cpu_groups();
	test_allow_groups();
	test_syntax();
	test_empty_resets();
	test_incremental_and_atomic();
	test_validate();

	if (!mkdtemp(tmpdir)) {
		fprintf(stderr, "mkdtemp: %m\n");
		return 1;
	}
	test_load();
	test_load_size_limit();
	nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);

	test_shipped_config();

	if (failures) {
		fprintf(stderr, "%d assertion(s) failed\n", failures);
		return 1;
	}
	return 0;
}
