/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-metrics: serves perfrelayd's counters (read over D-Bus) and perfrelay-export's as
 * OpenMetrics / Prometheus text on /metrics, on a socket systemd passes in (the daemon itself
 * stays off the network) or, for local runs, on --listen ADDR:PORT. See docs/metrics.md. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "common/bus-json.h"
#include "metrics/http-request.h"
#include "json-util.h"
#include "macro.h"

#define BUS_NAME           "org.perfrelay1"
#define BUS_PATH           "/org/perfrelay1"
#define BUS_IFACE          "org.perfrelay1.Manager"
/* A scraper that does not send its request within this is cut off: one slow peer must not
 * hold the single-threaded server. */
#define REQUEST_TIMEOUT_MS 5000

static const char *program = "perfrelay-metrics";
static const char *export_stats_file = "/run/perfrelay-export/stats.json";


typedef struct Out {
	FILE *f;
	bool om; /* OpenMetrics: counters are TYPEd without _total, and the text ends with # EOF */
} Out;

static void family(Out *o, const char *name, const char *type, const char *help) {
	bool counter = streq(type, "counter");

	fprintf(o->f,
		"# TYPE %s%s %s\n# HELP %s%s %s\n",
		name,
		counter && !o->om ? "_total" : "",
		type,
		name,
		counter && !o->om ? "_total" : "",
		help);
}

static void sample(Out *o, const char *name, bool counter, const char *labels, uint64_t v) {
	fprintf(o->f, "%s%s%s %" PRIu64 "\n", name, counter ? "_total" : "", labels ?: "", v);
}

static int get_u64(sd_bus *bus, const char *prop, uint64_t *ret) {
	return sd_bus_get_property_trivial(bus, BUS_NAME, BUS_PATH, BUS_IFACE, prop, NULL, 't', ret);
}

static int get_u32(sd_bus *bus, const char *prop, uint32_t *ret) {
	return sd_bus_get_property_trivial(bus, BUS_NAME, BUS_PATH, BUS_IFACE, prop, NULL, 'u', ret);
}

static uint64_t jget_u64(json_object *o, const char *key) {
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int) ?
		json_object_get_uint64(v) :
		0;
}

/* A label value as the exposition formats want it: backslash, quote and newline escaped
 * (unit names carry systemd's \x2d escapes). */
static void label_value(FILE *f, const char *v) {
	for (; *v; v++)
		if (*v == '\\' || *v == '"')
			fprintf(f, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
}

/* GetUnitCounters(): one counter family, perfrelay_unit_perf_events_total, a sample per cgroup and
 * perf counter labelled by unit, cgroup id and counter (its JSON name, e.g. task_clock_ns). The
 * reply is read whole first, so that a failure leaves no half family. */
static int collect_units(sd_bus *bus, Out *o) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(json_object_putp) json_object *units = NULL;
	size_t n;
	int r;

	r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, BUS_IFACE, "GetUnitCounters", NULL, &reply, "");
	if (r >= 0)
		r = bus_value_to_json(reply, &units);
	if (r < 0)
		return r;
	if (!json_object_is_type(units, json_type_array))
		return -EBADMSG;
	n = json_object_array_length(units);
	family(o,
	       "perfrelay_unit_perf_events",
	       "counter",
	       "A perf counter's total over a cgroup's tasks (GetUnitCounters()).");
	for (size_t i = 0; i < n; i++) {
		json_object *u = json_object_array_get_idx(units, i);
		json_object *values = json_object_array_get_idx(u, 2);

		if (!json_object_is_type(values, json_type_object))
			continue;
		json_object_object_foreach(values, key, v) {
			fputs("perfrelay_unit_perf_events_total{unit=\"", o->f);
			label_value(o->f, json_object_get_string(json_object_array_get_idx(u, 0)));
			fprintf(o->f,
				"\",cgroup_id=\"%" PRIu64 "\",counter=\"%s\"} %" PRIu64 "\n",
				json_object_get_uint64(json_object_array_get_idx(u, 1)),
				key,
				json_object_get_uint64(v));
		}
	}
	return 0;
}

/* One family per field, one sample per element of the GetStats() array `list`, labelled by the
 * element's `label_key` (a number): e.g. per producer id, per CPU. */
static void collect_list(
	Out *o,
	json_object *list,
	const char *label_key,
	const char *label,
	const char *const (*fields)[3],
	size_t n_fields) {
	size_t n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;

	for (size_t k = 0; k < n_fields; k++) {
		family(o, fields[k][1], "counter", fields[k][2]);
		for (size_t i = 0; i < n; i++) {
			json_object *e = json_object_array_get_idx(list, i);
			char labels[64];

			snprintf(labels, sizeof(labels), "{%s=\"%" PRIu64 "\"}", label, jget_u64(e, label_key));
			sample(o, fields[k][1], true, labels, jget_u64(e, fields[k][0]));
		}
	}
}

static const struct {
	const char *prop, *name, *help;
} daemon_counters[] = {
	{ "EventsReceived", "perfrelay_events_received", "Valid records the readers took from the rings." },
	{ "EventsDelivered", "perfrelay_events_delivered", "Events given to a client." },
	{ "EventsLost", "perfrelay_events_lost", "Records the kernel reported lost (ring full)." },
	{ "ProducerFailures",
	  "perfrelay_producer_failures",
	  "bpf_perf_event_output() failures of all producers." },
	{ "ClientDrops", "perfrelay_client_drops", "Events dropped for clients whose queue was full." },
};
/* GetStats() key, metric name, help (docs/dbus.md "GetStats" says what each counts). */
static const char *const producer_fields[][3] = {
	{ "hits",
	  "perfrelay_producer_hits",
	  "Events the producer saw: filtered + attempts, since the pins were made." },
	{ "filtered",
	  "perfrelay_producer_filtered",
	  "Records a built-in probe did not make because nobody wanted them (docs/pipeline.md, Demand)." },
	{ "attempts",
	  "perfrelay_producer_attempts",
	  "Emits attempted by the producer (pinned counters), since the pins were made." },
	{ "received",
	  "perfrelay_producer_received",
	  "Valid records of the producer read by every daemon, since the pins were made." },
	{ "failures",
	  "perfrelay_producer_emit_failures",
	  "Attempts the kernel did not take, since the pins were made." },
	{ "failures_downtime",
	  "perfrelay_producer_emit_failures_downtime",
	  "The part of the failures counted while no daemon served." },
	{ "malformed", "perfrelay_producer_malformed", "Records of the producer the decoder rejected." },
	{ "crash_lost",
	  "perfrelay_producer_crash_lost",
	  "Records accepted into the rings of a daemon that died before reading them." },
	{ "seq_gaps",
	  "perfrelay_producer_seq_gaps",
	  "Attempt numbers no record carried (the independent gap detector)." },
};
static const char *const cpu_fields[][3] = {
	{ "received", "perfrelay_cpu_events_received", "Valid records this daemon read from the CPU's ring." },
	{ "lost", "perfrelay_cpu_events_lost", "PERF_RECORD_LOST counts of the CPU's ring." },
	{ "malformed", "perfrelay_cpu_malformed", "Records of the CPU's ring the decoder rejected." },
	{ "failures",
	  "perfrelay_cpu_producer_failures",
	  "Emit failures on the CPU, every producer, since the pins were made." },
	{ "corrupt", "perfrelay_cpu_corrupt", "Times the ring's framing was broken and skipped." },
};
static const char *const client_fields[][3] = {
	{ "offered", "perfrelay_client_events_offered", "Events offered to every client of this daemon." },
	{ "delivered", "perfrelay_client_events_sent", "Events written to every client of this daemon." },
	{ "dropped",
	  "perfrelay_client_events_dropped",
	  "Events dropped for every client of this daemon (queue full, gone)." },
};
/* Sections of GetStats() with plain figures: key, metric, type, help. */
static const struct {
	const char *section;
	const char *fields[8][4];
} plain_sections[] = {
	{ "recorder",
	  { { "written", "perfrelay_recorder_written", "counter", "Records the flight recorder's rings took." },
	    { "paused",
	      "perfrelay_recorder_paused",
	      "counter",
	      "Recorder outputs refused while a snapshot paused a ring." },
	    { "failed",
	      "perfrelay_recorder_failed",
	      "counter",
	      "Recorder outputs refused otherwise (no ring on the CPU)." },
	    { "snapshots", "perfrelay_recorder_snapshots", "counter", "Flight recorder snapshots taken." } } },
	{ "capture",
	  { { "started", "perfrelay_captures_started", "counter", "Packet captures started." },
	    { "stopped", "perfrelay_captures_stopped", "counter", "Packet captures ended." },
	    { "refused", "perfrelay_captures_refused", "counter", "Packet captures refused over MaxCaptures=." },
	    { "seen", "perfrelay_capture_packets_seen", "counter", "Packets the captures' programs saw." },
	    { "captured", "perfrelay_capture_packets_captured", "counter", "Packets the captures wrote to the rings." },
	    { "rate_dropped",
	      "perfrelay_capture_packets_rate_dropped",
	      "counter",
	      "Packets over a capture's packets per second." },
	    { "failed",
	      "perfrelay_capture_packets_failed",
	      "counter",
	      "Packets not written to a ring (full, or no daemon serving)." } } },
	{ "shared",
	  { { "rings", "perfrelay_shared_rings", "gauge", "Shared ring sets now (docs/shared-ring.md)." },
	    { "bytes", "perfrelay_shared_bytes", "gauge", "Memory of the shared ring sets." },
	    { "clients", "perfrelay_shared_clients", "gauge", "Socket subscribers reading a shared ring." },
	    { "fallbacks",
	      "perfrelay_shared_fallbacks",
	      "counter",
	      "Clients that asked for a shared ring and were served on the socket (limits)." },
	    { "hostile",
	      "perfrelay_shared_hostile",
	      "counter",
	      "Shared ring members closed for fighting the writer over their position." },
	    { "moved",
	      "perfrelay_shared_moved",
	      "counter",
	      "Shared ring members moved to a fresh ring set (another member's access revoked)." } } },
	{ "producer_scan",
	  { { "scans", "perfrelay_producer_scans", "counter", "Scans for third-party producers." },
	    { "refused",
	      "perfrelay_producer_types_refused",
	      "gauge",
	      "Declared third-party record types refused a decoder (current scan)." },
	    { "bad_declarations",
	      "perfrelay_producer_bad_declarations",
	      "gauge",
	      "Malformed or duplicate declarations (current scan)." } } },
	{ "history",
	  { { "offered", "perfrelay_history_offered", "counter", "Events offered to the history (docs/history.md)." },
	    { "written", "perfrelay_history_written", "counter", "Events written into the history's blocks." },
	    { "dropped_behind",
	      "perfrelay_history_dropped_behind",
	      "counter",
	      "Events the history's queue had no room for (its writer behind)." },
	    { "dropped_disk",
	      "perfrelay_history_dropped_disk",
	      "counter",
	      "Events of blocks the disk refused (ENOSPC, EIO)." },
	    { "bytes", "perfrelay_history_bytes", "gauge", "Bytes of the history's segments." },
	    { "events", "perfrelay_history_events", "gauge", "Events the history holds." },
	    { "removed_segments",
	      "perfrelay_history_removed_segments",
	      "counter",
	      "Segments retention removed (HistoryMaxUse=, HistoryMaxAgeSec=)." },
	    { "torn_cuts", "perfrelay_history_torn_cuts", "counter", "Torn tails cut off at start." } } },
	{ "units",
	  { { "entries", "perfrelay_unit_count_entries", "gauge", "(cgroup, producer) entries of unit_counts now." },
	    { "capacity", "perfrelay_unit_count_capacity", "gauge", "Entries unit_counts has room for." },
	    { "unattributed_attempts",
	      "perfrelay_unit_unattributed_attempts",
	      "counter",
	      "Emits whose cgroup found no room in unit_counts." },
	    { "unattributed_failures",
	      "perfrelay_unit_unattributed_failures",
	      "counter",
	      "Failed emits whose cgroup found no room in unit_counts." },
	    { "pruned_attempts",
	      "perfrelay_unit_pruned_attempts",
	      "counter",
	      "Emits of removed cgroups, whose entries were pruned." },
	    { "pruned_failures",
	      "perfrelay_unit_pruned_failures",
	      "counter",
	      "Failed emits of removed cgroups, whose entries were pruned." } } },
};

/* True if `key` of GetStats() is read above (the headline figures, producers[], cpus[],
 * clients) or by plain_sections[]. */
static bool section_known(const char *key) {
	static const char *const read_above[] = { "total", "producers", "cpus", "clients", "probes" };

	for (size_t i = 0; i < ELEMENTSOF(read_above); i++)
		if (streq(key, read_above[i]))
			return true;
	for (size_t i = 0; i < ELEMENTSOF(plain_sections); i++)
		if (streq(key, plain_sections[i].section))
			return true;
	return false;
}

/* A name of the exposition formats' alphabet, as GetStats() keys are: [a-z0-9_]. */
static bool metric_name_ok(const char *s) {
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

/* GetStats() "probes": per built-in probe (label probe="open"), what it cost and filtered. */
static const char *const probe_fields[][3] = {
	{ "hits", "perfrelay_probe_hits", "Events the probe saw: filtered + attempts." },
	{ "filtered", "perfrelay_probe_filtered", "Records the probe did not make because nobody wanted them." },
	{ "runs",
	  "perfrelay_probe_runs",
	  "Runs of the probe's programs while this daemon held them (RunStats=)." },
};

/* GetStats()' "units" list (docs/pipeline.md, "Attribution"): per listed cgroup the records its
 * tasks emitted and the part the kernel did not take, labelled like the unit counters. */
static void collect_unit_records(Out *o, json_object *stats) {
	static const char *const fields[][3] = {
		{ "attempts", "perfrelay_unit_records", "Records a cgroup's tasks emitted (GetStats() units)." },
		{ "failures",
		  "perfrelay_unit_records_failed",
		  "Of those, the records the kernel did not take (ring full, no daemon)." },
	};
	json_object *units, *list;
	size_t n;

	if (!json_object_object_get_ex(stats, "units", &units) ||
	    !json_object_object_get_ex(units, "list", &list) || !json_object_is_type(list, json_type_array))
		return;
	n = json_object_array_length(list);
	for (size_t k = 0; k < ELEMENTSOF(fields); k++) {
		family(o, fields[k][1], "counter", fields[k][2]);
		for (size_t i = 0; i < n; i++) {
			json_object *e = json_object_array_get_idx(list, i), *unit;

			fprintf(o->f, "%s_total{unit=\"", fields[k][1]);
			if (json_object_object_get_ex(e, "unit", &unit))
				label_value(o->f, json_object_get_string(unit) ?: "");
			fprintf(o->f,
				"\",cgroup_id=\"%" PRIu64 "\"} %" PRIu64 "\n",
				jget_u64(e, "cgroup_id"),
				jget_u64(e, fields[k][0]));
		}
	}
}

static void collect_probes(Out *o, json_object *stats) {
	json_object *probes;

	if (!json_object_object_get_ex(stats, "probes", &probes) ||
	    !json_object_is_type(probes, json_type_object))
		return;
	for (size_t k = 0; k < ELEMENTSOF(probe_fields); k++) {
		family(o, probe_fields[k][1], "counter", probe_fields[k][2]);
		json_object_object_foreach(probes, name, p) {
			char labels[96];

			if (!json_object_is_type(p, json_type_object) || !metric_name_ok(name))
				continue;
			snprintf(labels, sizeof(labels), "{probe=\"%s\"}", name);
			sample(o, probe_fields[k][1], true, labels, jget_u64(p, probe_fields[k][0]));
		}
	}
	/* Seconds, the exposition formats' base unit, from GetStats()' nanoseconds. */
	family(o,
	       "perfrelay_probe_run_seconds",
	       "counter",
	       "Time the probe's programs ran while this daemon held them (RunStats=).");
	json_object_object_foreach(probes, pname, pv) {
		if (!json_object_is_type(pv, json_type_object) || !metric_name_ok(pname))
			continue;
		fprintf(o->f,
			"perfrelay_probe_run_seconds_total{probe=\"%s\"} %.9f\n",
			pname,
			(double) jget_u64(pv, "run_ns") / 1e9);
	}
	family(o,
	       "perfrelay_probe_attached",
	       "gauge",
	       "1 while the probe is attached (docs/pipeline.md, Demand).");
	json_object_object_foreach(probes, name, p) {
		json_object *v;
		char labels[96];

		if (!json_object_is_type(p, json_type_object) || !metric_name_ok(name) ||
		    !json_object_object_get_ex(p, "attached", &v))
			continue;
		snprintf(labels, sizeof(labels), "{probe=\"%s\"}", name);
		sample(o, "perfrelay_probe_attached", false, labels, (uint64_t) json_object_get_boolean(v));
	}
	/* The streams' notices of records lost upstream (docs/protocol.md, "Lost upstream"). */
	family(o,
	       "perfrelay_notices",
	       "counter",
	       "Notices of upstream loss made: kernel (a producer lost records), throttle_started, throttle_stopped.");
	sample(o, "perfrelay_notices", true, "{kind=\"kernel\"}", jget_u64(probes, "notices_kernel"));
	sample(o,
	       "perfrelay_notices",
	       true,
	       "{kind=\"throttle_started\"}",
	       jget_u64(probes, "notices_throttle_started"));
	sample(o,
	       "perfrelay_notices",
	       true,
	       "{kind=\"throttle_stopped\"}",
	       jget_u64(probes, "notices_throttle_stopped"));
	family(o, "perfrelay_notices_delivered", "counter", "Notices written to streams.");
	sample(o, "perfrelay_notices_delivered", true, "", jget_u64(probes, "notices_delivered"));
	family(o, "perfrelay_notices_dropped", "counter", "Notices a stream had no room for.");
	sample(o, "perfrelay_notices_dropped", true, "", jget_u64(probes, "notices_dropped"));
}

/* The sections of GetStats() with plain figures: those of plain_sections[] with their names,
 * types and help, then every other one (a feature's section this table does not know yet, as
 * the worked example's "served" in docs/architecture.md) as gauges perfrelay_<section>_<key>,
 * so that a new feature's figures are scraped without an edit here (docs/metrics.md). */
static void collect_sections(Out *o, json_object *stats) {
	json_object *section;

	for (size_t i = 0; i < ELEMENTSOF(plain_sections); i++) {
		if (!json_object_object_get_ex(stats, plain_sections[i].section, &section))
			continue;
		for (size_t k = 0; k < ELEMENTSOF(plain_sections[i].fields) && plain_sections[i].fields[k][0];
		     k++) {
			const char *const *f = plain_sections[i].fields[k];

			family(o, f[1], f[2], f[3]);
			sample(o, f[1], streq(f[2], "counter"), NULL, jget_u64(section, f[0]));
		}
	}
	json_object_object_foreach(stats, key, value) {
		if (section_known(key) || !metric_name_ok(key) ||
		    !json_object_is_type(value, json_type_object))
			continue;
		json_object_object_foreach(value, field, figure) {
			char name[256], help[300];

			if (!metric_name_ok(field) || !json_object_is_type(figure, json_type_int))
				continue;
			if (snprintf(name, sizeof(name), "perfrelay_%s_%s", key, field) >= (int) sizeof(name))
				continue;
			snprintf(help, sizeof(help), "GetStats() %s.%s (docs/dbus.md).", key, field);
			family(o, name, "gauge", help);
			sample(o, name, false, NULL, json_object_get_uint64(figure));
		}
	}
}

/* The daemon's part: the properties for the headline figures, GetStats() (the one snapshot
 * perfrelayctl stats prints) for everything per producer, per CPU and per client. Returns 0,
 * or a negative errno when the daemon did not answer (then perfrelay_up is 0 and no daemon
 * sample is written: the text goes to a side buffer first, so a call that fails half-way
 * leaves no half family). */
static int collect_daemon(sd_bus *bus, Out *o) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	json_object *stats = NULL, *list = NULL, *clients = NULL;
	_cleanup_free_ char *text = NULL;
	size_t size = 0;
	uint64_t v[ELEMENTSOF(daemon_counters)];
	uint32_t n_clients, readers;
	Out side = { .om = o->om };
	int r;

	for (size_t i = 0; i < ELEMENTSOF(daemon_counters); i++) {
		r = get_u64(bus, daemon_counters[i].prop, &v[i]);
		if (r < 0)
			return r;
	}
	r = get_u32(bus, "Clients", &n_clients);
	if (r >= 0)
		r = get_u32(bus, "Readers", &readers);
	if (r >= 0)
		r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, BUS_IFACE, "GetStats", NULL, &reply, "");
	if (r >= 0)
		r = bus_value_to_json(reply, &stats);
	if (r < 0)
		return r;
	if (!json_object_is_type(stats, json_type_object)) {
		json_object_put(stats);
		return -EBADMSG;
	}

	side.f = open_memstream(&text, &size);
	if (!side.f) {
		json_object_put(stats);
		return -ENOMEM;
	}
	for (size_t i = 0; i < ELEMENTSOF(daemon_counters); i++) {
		family(&side, daemon_counters[i].name, "counter", daemon_counters[i].help);
		sample(&side, daemon_counters[i].name, true, NULL, v[i]);
	}
	family(&side, "perfrelay_clients", "gauge", "Socket subscribers connected now.");
	sample(&side, "perfrelay_clients", false, NULL, n_clients);
	family(&side, "perfrelay_readers", "gauge", "Reader threads.");
	sample(&side, "perfrelay_readers", false, NULL, readers);
	if (json_object_object_get_ex(stats, "producers", &list))
		collect_list(&side, list, "id", "producer", producer_fields, ELEMENTSOF(producer_fields));
	if (json_object_object_get_ex(stats, "cpus", &list))
		collect_list(&side, list, "cpu", "cpu", cpu_fields, ELEMENTSOF(cpu_fields));
	if (json_object_object_get_ex(stats, "clients", &clients))
		for (size_t k = 0; k < ELEMENTSOF(client_fields); k++) {
			family(&side, client_fields[k][1], "counter", client_fields[k][2]);
			sample(&side, client_fields[k][1], true, NULL, jget_u64(clients, client_fields[k][0]));
		}
	collect_sections(&side, stats);
	collect_probes(&side, stats);
	collect_unit_records(&side, stats);
	json_object_put(stats);
	/* Without them (a daemon that lacks the method) the rest still stands. */
	(void) collect_units(bus, &side);
	if (fclose(side.f) != 0)
		return -ENOMEM;
	fwrite(text, 1, size, o->f);
	return 0;
}

/* Each target's figures (the stats file's objects under the targets' names, "nats": {...}),
 * labelled target="nats". */
static void collect_export_targets(Out *o, json_object *j) {
	static const struct {
		const char *key, *name, *type, *help;
	} figures[] = {
		{ "offered", "perfrelay_export_target_offered", "counter", "Events offered to the target." },
		{ "exported",
		  "perfrelay_export_target_exported",
		  "counter",
		  "Events the target delivered: acknowledged (NATS, OTLP), written (file), sent (journal)." },
		{ "export_dropped", "perfrelay_export_target_dropped", "counter", "Events the target gave up." },
		{ "dropped_queue_full",
		  "perfrelay_export_target_dropped_queue_full",
		  "counter",
		  "Dropped: queue full." },
		{ "dropped_retries",
		  "perfrelay_export_target_dropped_retries",
		  "counter",
		  "Dropped: out of retries." },
		{ "dropped_refused",
		  "perfrelay_export_target_dropped_refused",
		  "counter",
		  "Dropped: refused for good (a collector's 4xx, a failed write)." },
		{ "dropped_shutdown",
		  "perfrelay_export_target_dropped_shutdown",
		  "counter",
		  "Dropped: left at exit." },
		{ "dropped_rate",
		  "perfrelay_export_target_dropped_rate",
		  "counter",
		  "Dropped: above the journal's RateLimitPerSec=." },
		{ "export_retried", "perfrelay_export_target_retried", "counter", "Events sent again." },
		{ "rotations", "perfrelay_export_target_rotations", "counter", "Files rotated (file)." },
		{ "queued", "perfrelay_export_target_queued", "gauge", "Events batched or waiting now." },
		{ "in_flight", "perfrelay_export_target_in_flight", "gauge", "Events sent and not yet answered." },
	};

	for (size_t i = 0; i < ELEMENTSOF(figures); i++) {
		bool counter = streq(figures[i].type, "counter"), any = false;

		json_object_object_foreach(j, target, t) {
			char labels[128];

			if (!json_object_is_type(t, json_type_object) ||
			    !json_object_object_get_ex(t, "offered", NULL) ||
			    !json_object_object_get_ex(t, figures[i].key, NULL) || strlen(target) > 32 ||
			    strspn(target, "abcdefghijklmnopqrstuvwxyz") != strlen(target))
				continue; /* not a target's object: only names made of [a-z] */
			if (!any)
				family(o, figures[i].name, figures[i].type, figures[i].help);
			any = true;
			snprintf(labels, sizeof(labels), "{target=\"%s\"}", target);
			sample(o, figures[i].name, counter, labels, jget_u64(t, figures[i].key));
		}
	}
}

/* Resume=yes (docs/export.md, "Resuming"): what the history lost before it reached the
 * exporter, by reason, and the cursor file's writes that failed. */
static void collect_export_resume(Out *o, json_object *j) {
	json_object *r, *lost, *v;
	char labels[96];
	bool any = false;

	if (!json_object_object_get_ex(j, "resume", &r))
		return;
	if (json_object_object_get_ex(r, "history_lost", &lost) &&
	    json_object_is_type(lost, json_type_object)) {
		json_object_object_foreach(lost, reason, count) {
			if (reason[strspn(reason, "abcdefghijklmnopqrstuvwxyz-")] != 0)
				continue; /* not one the exporter writes: nothing to quote in a label */
			if (!any)
				family(o,
				       "perfrelay_export_history_lost",
				       "counter",
				       "Events the history lost before the resuming exporter read them, by reason.");
			any = true;
			snprintf(labels, sizeof(labels), "{reason=\"%.64s\"}", reason);
			sample(o,
			       "perfrelay_export_history_lost",
			       true,
			       labels,
			       (uint64_t) json_object_get_int64(count));
		}
	}
	if (json_object_object_get_ex(r, "save_errors", &v)) {
		family(o,
		       "perfrelay_export_cursor_save_errors",
		       "counter",
		       "Writes of the exporter's CursorFile= that failed.");
		sample(o, "perfrelay_export_cursor_save_errors", true, NULL, (uint64_t) json_object_get_int64(v));
	}
}

/* perfrelay-export's counters from its stats file; absent file: no export samples. */
static void collect_export(Out *o) {
	static const struct {
		const char *key, *name, *help;
	} counters[] = {
		{ "offered", "perfrelay_export_offered", "Events perfrelay-export read from the socket." },
		{ "exported", "perfrelay_export_acked", "Events JetStream acknowledged." },
		{ "export_dropped",
		  "perfrelay_export_dropped",
		  "Events perfrelay-export gave up (queue full, retries, shutdown)." },
		{ "export_retried", "perfrelay_export_retried", "Republishes after a refusal or a missing ack." },
		{ "duplicates", "perfrelay_export_duplicates", "Acks for message ids the stream already held." },
		{ "daemon_lost", "perfrelay_export_daemon_lost", "Events the daemon dropped for the exporter." },
	};
	json_object *j = json_object_from_file(export_stats_file), *v;

	if (!j)
		return;
	for (size_t i = 0; i < ELEMENTSOF(counters); i++)
		if (json_object_object_get_ex(j, counters[i].key, &v)) {
			family(o, counters[i].name, "counter", counters[i].help);
			sample(o, counters[i].name, true, NULL, (uint64_t) json_object_get_int64(v));
		}
	if (json_object_object_get_ex(j, "connected", &v)) {
		family(o,
		       "perfrelay_export_connected",
		       "gauge",
		       "1 while perfrelay-export is connected to NATS.");
		sample(o, "perfrelay_export_connected", false, NULL, json_object_get_boolean(v) ? 1 : 0);
	}
	collect_export_targets(o, j);
	collect_export_resume(o, j);
	json_object_put(j);
}

/* The whole exposition for one scrape. */
static int metrics_collect(bool openmetrics, char **ret, size_t *ret_size) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	char *text = NULL;
	size_t size = 0;
	Out o = { .om = openmetrics };
	int r;

	o.f = open_memstream(&text, &size);
	if (!o.f)
		return -ENOMEM;
	r = sd_bus_open_system(&bus);
	if (r >= 0)
		r = collect_daemon(bus, &o);
	if (r < 0) /* the scrape still answers, with perfrelay_up 0; the journal says why */
		fprintf(stderr, "%s: cannot read perfrelayd's counters over D-Bus: %s\n", program, strerror(-r));
	family(&o, "perfrelay_up", "gauge", "1 if perfrelayd answered on D-Bus for this scrape.");
	sample(&o, "perfrelay_up", false, NULL, r >= 0);
	collect_export(&o);
	if (openmetrics)
		fputs("# EOF\n", o.f);
	if (fclose(o.f) != 0) {
		free(text);
		return -ENOMEM;
	}
	*ret = text;
	*ret_size = size;
	return 0;
}

static void send_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		p += k;
		n -= (size_t) k;
	}
}

static void respond(int fd, const char *status, const char *type, const char *body, size_t len, bool head) {
	char hdr[512];
	int n = snprintf(
		hdr,
		sizeof(hdr),
		"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
		status,
		type,
		len);

	send_all(fd, hdr, (size_t) n);
	if (!head)
		send_all(fd, body, len);
}

/* Serves one request on a connected socket, then closes it. */
static void serve(int fd) {
	char buf[HTTP_REQUEST_MAX];
	size_t len = 0;
	HttpRequest req;
	HttpVerdict v = HTTP_INCOMPLETE;
	struct timespec start;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (v == HTTP_INCOMPLETE) {
		struct timespec now;
		int left;
		ssize_t k;

		clock_gettime(CLOCK_MONOTONIC, &now);
		left = REQUEST_TIMEOUT_MS -
			(int) ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
		if (left <= 0 || poll(&(struct pollfd){ .fd = fd, .events = POLLIN }, 1, left) <= 0)
			goto out;
		k = recv(fd, buf + len, sizeof(buf) - len, 0);
		if (k <= 0)
			goto out;
		len += (size_t) k;
		v = http_request_parse(buf, len, &req);
	}
	switch (v) {
	case HTTP_METRICS: {
		char *text = NULL;
		size_t size = 0;

		if (metrics_collect(req.openmetrics, &text, &size) < 0) {
			respond(fd, "500 Internal Server Error", "text/plain", "out of memory\n", 14, req.head);
			break;
		}
		respond(fd,
			"200 OK",
			req.openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8" :
					  "text/plain; version=0.0.4; charset=utf-8",
			text,
			size,
			req.head);
		free(text);
		break;
	}
	case HTTP_NOT_FOUND:
		respond(fd, "404 Not Found", "text/plain", "only /metrics is served here\n", 29, false);
		break;
	case HTTP_BAD_METHOD:
		respond(fd, "405 Method Not Allowed", "text/plain", "GET or HEAD\n", 12, false);
		break;
	case HTTP_TOO_LARGE:
		respond(fd, "431 Request Header Fields Too Large", "text/plain", "request too large\n", 18, false);
		break;
	default:
		respond(fd, "400 Bad Request", "text/plain", "bad request\n", 12, false);
		break;
	}
out:
	shutdown(fd, SHUT_WR);
	close(fd);
}

static int listen_on(const char *addr) {
	_cleanup_free_ char *host = strdup(addr);
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6 };
	struct sockaddr_in sa4 = { .sin_family = AF_INET };
	char *colon, *end;
	unsigned long port;
	int fd, one = 1;
	bool v6;

	if (!host)
		return -ENOMEM;
	colon = strrchr(host, ':');
	if (!colon)
		return -EINVAL;
	*colon = 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end || port == 0 || port > 65535)
		return -EINVAL;
	if (host[0] == '[' && colon[-1] == ']') {
		colon[-1] = 0;
		v6 = true;
		if (inet_pton(AF_INET6, host + 1, &sa6.sin6_addr) != 1)
			return -EINVAL;
		sa6.sin6_port = htons((uint16_t) port);
	} else {
		v6 = false;
		if (inet_pton(AF_INET, host, &sa4.sin_addr) != 1)
			return -EINVAL;
		sa4.sin_port = htons((uint16_t) port);
	}
	fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if ((v6 ? bind(fd, (struct sockaddr *) &sa6, sizeof(sa6)) :
		  bind(fd, (struct sockaddr *) &sa4, sizeof(sa4))) < 0 ||
	    listen(fd, 16) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

static void help(void) {
	printf("%s [OPTIONS...]\n\n"
	       "Serve perfrelayd's counters as OpenMetrics on /metrics (docs/metrics.md).\n\n"
	       "     --listen=ADDR:PORT  Listen here instead of on the socket systemd passes\n"
	       "                         (e.g. 127.0.0.1:9471 or [::1]:9471)\n"
	       "     --export-stats=FILE perfrelay-export's stats file (default %s)\n"
	       "  -h --help             Show this help\n",
	       program,
	       export_stats_file);
}

int main(int argc, char *argv[]) {
	enum { ARG_LISTEN = 0x100, ARG_EXPORT_STATS };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "listen", required_argument, NULL, ARG_LISTEN },
						 { "export-stats", required_argument, NULL, ARG_EXPORT_STATS },
						 {} };
	const char *listen_addr = NULL;
	int opt, fd, n, acceptconn = 0;
	socklen_t l = sizeof(acceptconn);

	while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return 0;
		case ARG_LISTEN:
			listen_addr = optarg;
			break;
		case ARG_EXPORT_STATS:
			export_stats_file = optarg;
			break;
		default:
			return 2;
		}
	signal(SIGPIPE, SIG_IGN);

	if (listen_addr) {
		fd = listen_on(listen_addr);
		if (fd < 0) {
			fprintf(stderr, "%s: cannot listen on %s: %s\n", program, listen_addr, strerror(-fd));
			return 1;
		}
	} else {
		n = sd_listen_fds(true);
		if (n != 1) {
			fprintf(stderr,
				"%s: expected one socket from systemd (got %d); use --listen=ADDR:PORT\n",
				program,
				n);
			return 1;
		}
		fd = SD_LISTEN_FDS_START;
		/* Accept=yes passes a connection: answer it and exit. */
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acceptconn, &l) < 0 || !acceptconn) {
			serve(fd);
			return 0;
		}
	}
	for (;;) {
		int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
				continue;
			fprintf(stderr, "%s: accept failed: %m\n", program);
			return 1;
		}
		serve(c);
	}
}
