/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Third-party producers (docs/producers.md): scans of the programs that write into the pinned
 * "events" map (producer-scan.c), published to the reader threads (the core's decoders, decoders.h)
 * at start, when such a program loads (the load watch: PERF_RECORD_BPF_EVENT), when a reader
 * holds a third-party record it has no decoder for, and when ListProducers() asks; at most one
 * scan per PRODUCERS_SCAN_INTERVAL_USEC, the others deferred to its end. ListProducers() and
 * GetStats()' "producer_scan" section. */
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "perfrelay-config.h"

#include "api/bus-figures.h"
#include "features/feature-table.h"
#include "core/manager.h"
#include "features/producers/loadwatch.h"
#include "base/log.h"
#include "time-util.h"

/* A scan walks every BPF program of the system: bounded, so that a stream of program loads,
 * of undeclared record types or of ListProducers() calls cannot keep the main thread busy. A
 * reader holds the records that wait for a scan (reader.h): short. */
#define PRODUCERS_SCAN_INTERVAL_USEC (50 * USEC_PER_MSEC)
/* Programs held by the load watch that one scan takes; more wait for the next, asked for. */
#define PRODUCERS_MAX_LOADED         256u

typedef struct ProducersFeature {
	Feature feature;
	uint32_t events_map_id;
	uint64_t scanned_usec; /* CLOCK_MONOTONIC of the last scan */
	uint64_t scans;
	sd_event_source *want_source;  /* a reader asks for a scan */
	sd_event_source *timer_source; /* a scan deferred by the interval */
	LoadWatch *load_watch;         /* program loads; NULL without the kernel feature bpf_event */
} ProducersFeature;

static void log_scan(const ProducerScan *old, const ProducerScan *s) {
	for (size_t i = 0; i < s->n_progs; i++) {
		const ProducerProg *p = &s->progs[i];
		bool known = false;

		for (size_t k = 0; old && k < old->n_progs && !known; k++)
			known = old->progs[k].prog_id == p->prog_id;
		if (known)
			continue;
		if (p->producer)
			log_info(
				"Producer program %s (id %u) found: producer %u \"%s\"",
				p->name,
				p->prog_id,
				p->producer,
				p->producer_name);
		else
			log_info("Producer program %s (id %u) found", p->name, p->prog_id);
		for (size_t k = 0; k < s->n_types; k++) {
			const ProducerType *t = &s->types[k];

			if (t->prog_id != p->prog_id)
				continue;
			if (t->rec)
				log_info(
					"Record type 0x%x \"%s\" of program %s: decoded from its BTF (%u fields)",
					t->type,
					t->name,
					p->name,
					btfrec_n_steps(t->rec));
			else
				log_warning(
					"Record type 0x%x \"%s\" of program %s: refused a decoder (%s); its "
					"records are published as \"unknown\"",
					t->type,
					t->name,
					p->name,
					btfrec_error_to_string(t->refused));
		}
	}
}

static int scan_now(ProducersFeature *p) {
	_cleanup_(producers_scan_freep) ProducerScan *s = NULL;
	Decoders *decoders = manager_decoders(p->feature.manager);
	const ProducerScan *old = decoders_current(decoders);
	uint64_t started_ns = now_nsec(CLOCK_BOOTTIME);
	int loaded[PRODUCERS_MAX_LOADED];
	size_t n_loaded = 0;
	int r;

	/* The programs the load watch opened so far stay loaded through the scan: it describes
	 * them even if their loaders unloaded them already. Those it opens meanwhile wait for the
	 * next scan (which their loads ask for). */
	n_loaded = load_watch_take(p->load_watch, loaded, ELEMENTSOF(loaded));
	if (n_loaded == ELEMENTSOF(loaded))
		decoders_want_scan(decoders);

	p->scanned_usec = now_usec(CLOCK_MONOTONIC);
	r = producers_scan(p->events_map_id, &s);
	for (size_t i = 0; i < n_loaded; i++)
		safe_close(loaded[i]);
	if (r < 0)
		return log_warning_errno(r, "Failed to look for third-party producers: %m");
	p->scans++;
	if (!old || !producers_scan_same(old, s)) {
		log_scan(old, s);
		r = decoders_publish(decoders, TAKE_PTR(s));
		if (r < 0)
			return log_oom();
		r = 1;
	} else
		r = 0; /* nothing new: readers keep the scan they have */
	decoders_scan_done(decoders, started_ns);
	return r;
}

static int on_scan_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	(void) scan_now(userdata);
	return 0;
}

/* Scans (at most once per interval: else the scan is deferred to the interval's end, and 0
 * returned) and publishes what is new to the readers: 1 if something was, 0 if not. */
static int scan_soon(ProducersFeature *p) {
	uint64_t now = now_usec(CLOCK_MONOTONIC), due;
	int r;

	if (p->scanned_usec == 0 || now - p->scanned_usec >= PRODUCERS_SCAN_INTERVAL_USEC)
		return scan_now(p);
	/* Deferred, not dropped: a reader may be holding records for it. */
	due = p->scanned_usec + PRODUCERS_SCAN_INTERVAL_USEC;
	if (p->timer_source)
		r = sd_event_source_set_time(p->timer_source, due);
	else
		r = sd_event_add_time(
			manager_event(p->feature.manager),
			&p->timer_source,
			CLOCK_MONOTONIC,
			due,
			0,
			on_scan_timer,
			p);
	if (r >= 0)
		r = sd_event_source_set_enabled(p->timer_source, SD_EVENT_ONESHOT);
	if (r < 0)
		return scan_now(p);
	return 0;
}

static int on_want_scan(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	ProducersFeature *p = userdata;

	if (decoders_take_want(manager_decoders(p->feature.manager)))
		(void) scan_soon(p);
	return 0;
}

static void producers_cpu_online(Feature *f, unsigned cpu) {
	load_watch_cpu_online(((ProducersFeature *) f)->load_watch, cpu);
}

static void producers_done(Feature *f) {
	ProducersFeature *p = (ProducersFeature *) f;

	p->want_source = sd_event_source_disable_unref(p->want_source);
	p->timer_source = sd_event_source_disable_unref(p->timer_source);
	p->load_watch = load_watch_free(p->load_watch);
}

static int producers_setup(Feature *f) {
	ProducersFeature *p = (ProducersFeature *) f;
	Manager *m = f->manager;
	Decoders *decoders = manager_decoders(m);
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	unsigned n_cpus;
	int r;

	if (bpf_obj_get_info_by_fd(probes_events_fd(manager_probes(m)), &info, &len) < 0)
		return log_error_errno(-errno, "Failed to read the id of the events map: %m");
	p->events_map_id = info.id;
	n_cpus = probes_possible_cpus(manager_probes(m));
	r = sd_event_add_io(
		manager_event(m), &p->want_source, decoders_want_fd(decoders), EPOLLIN, on_want_scan, p);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the readers' requests for producer scans: %m");
	/* The watch first: a program that loads during the first scan is then not missed. */
	if (kernel_features_has(manager_kernel(m), FEATURE_BPF_EVENT)) {
		r = load_watch_new(
			n_cpus, p->events_map_id, decoders, manager_config(m)->reader_nice, &p->load_watch);
		if (r < 0)
			log_warning_errno(
				r,
				"Failed to watch program loads: %m; producers that load later are found when "
				"their records arrive");
	}
	(void) scan_now(p);
	return 0;
}

/* ListProducers(): the producers perfrelayd knows, from the scan and the stats snapshot (their
 * counters), as aa{sv} (docs/dbus.md, "ListProducers"). */
static int append_fields(sd_bus_message *m, const BtfRec *rec) {
	int r = sd_bus_message_append(m, "s", "fields");

	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', "a(ssuuu)");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "(ssuuu)");
	for (unsigned i = 0; r >= 0 && rec && i < btfrec_n_steps(rec); i++) {
		BtfRecValue v;

		btfrec_describe(rec, i, &v);
		if (v.kind == BTFREC_STRUCT_END || v.kind == BTFREC_ARRAY_END)
			continue;
		r = sd_bus_message_append(
			m, "(ssuuu)", v.name ?: "", btfrec_kind_to_string(v.kind), v.depth, v.offset, v.size);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

static int append_type(sd_bus_message *m, const ProducerType *t) {
	int r = sd_bus_message_open_container(m, 'a', "{sv}");

	if (r >= 0)
		r = sd_bus_message_append(
			m,
			"{sv}{sv}{sv}{sv}",
			"type",
			"q",
			t->type,
			"name",
			"s",
			t->name,
			"decoder",
			"s",
			t->rec ? "ok" : btfrec_error_to_string(t->refused),
			"size",
			"u",
			t->rec ? btfrec_size(t->rec) : 0);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = append_fields(m, t->rec);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

static bool prog_matches(const ProducerProg *p, uint32_t id, const ProducerProg *only) {
	return only ? p == only : p->producer == id;
}

/* One producer: id, name, its programs and their types, and its counters (zeros without
 * activity). `only`: a program without PERFRELAY_PRODUCER(), listed on its own with id 0. */
static int append_producer(
	sd_bus_message *m,
	const ProducerScan *scan,
	uint32_t id,
	const ProducerSnapshot *st,
	const ProducerProg *only) {
	static const ProducerSnapshot zero = {};
	const char *name = only ? only->name : "";
	int r;

	if (!st)
		st = &zero;
	for (size_t i = 0; scan && !only && i < scan->n_progs; i++)
		if (scan->progs[i].producer == id) {
			name = scan->progs[i].producer_name;
			break;
		}
	/* perfrelay's own producers are named by the daemon, not by a program's BTF. */
	if (!only && !name[0])
		name = builtin_producer_to_string(id) ?: "";
	r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}{sv}", "id", "u", id, "name", "s", name);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", "programs");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', "a(us)");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "(us)");
	for (size_t i = 0; r >= 0 && scan && i < scan->n_progs; i++)
		if (prog_matches(&scan->progs[i], id, only))
			r = sd_bus_message_append(m, "(us)", scan->progs[i].prog_id, scan->progs[i].name);
	for (unsigned k = 0; r >= 0 && k < 3; k++)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", "types");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && scan && i < scan->n_types; i++)
		for (size_t k = 0; r >= 0 && k < scan->n_progs; k++)
			if (scan->progs[k].prog_id == scan->types[i].prog_id &&
			    prog_matches(&scan->progs[k], id, only))
				r = append_type(m, &scan->types[i]);
	for (unsigned k = 0; r >= 0 && k < 3; k++)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_append(
			m,
			"{sv}{sv}{sv}{sv}{sv}",
			"attempts",
			"t",
			st->attempts,
			"failures",
			"t",
			st->failures,
			"received",
			"t",
			st->received,
			"malformed",
			"t",
			st->malformed,
			"seq_gaps",
			"t",
			st->seq_gaps);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

static bool declared(const ProducerScan *scan, uint32_t id) {
	for (size_t i = 0; scan && i < scan->n_progs; i++)
		if (scan->progs[i].producer == id)
			return true;
	return false;
}

static int method_list_producers(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	ProducersFeature *pf = userdata;
	Manager *m = pf->feature.manager;
	const ProducerScan *scan;
	SubscriptionAccess access;
	size_t k = 0;
	uid_t uid;
	int r;

	r = bus_require_read(manager_bus(m), message, "ListProducers", &uid, &access, error);
	if (r < 0)
		return r;
	/* Scanned again unless that was just done; valid until the next scan. */
	(void) scan_soon(pf);
	scan = decoders_current(manager_decoders(m));
	r = manager_stats_snapshot(m, &st);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", manager_pin_path(m));
	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "a{sv}");
	/* Every id with activity or declared by a program, ascending: the snapshot's producers
	 * are ascending, and declared ids without activity are merged in. */
	for (uint32_t id = 0; r >= 0 && id < PERFRELAY_MAX_PRODUCERS; id++) {
		const ProducerSnapshot *ps = NULL;

		while (k < st->n_producers && st->producers[k].id < id)
			k++;
		if (k < st->n_producers && st->producers[k].id == id)
			ps = &st->producers[k];
		if (ps || (id > 0 && declared(scan, id)))
			r = append_producer(reply, scan, id, ps, NULL);
	}
	for (size_t i = 0; r >= 0 && scan && i < scan->n_progs; i++)
		if (scan->progs[i].producer == 0)
			r = append_producer(reply, scan, 0, NULL, &scan->progs[i]);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int producers_stats_append(Feature *f, sd_bus_message *m) {
	ProducersFeature *p = (ProducersFeature *) f;
	const ProducerScan *s = decoders_current(manager_decoders(f->manager));
	uint64_t loads = 0, missed = 0;
	int r;

	load_watch_stats(p->load_watch, &loads, &missed);
	r = open_section(m, "producer_scan");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "scans", p->scans },
			{ "programs", s ? s->n_progs : 0 },
			{ "types", s ? s->n_types : 0 },
			{ "refused", s ? s->refused : 0 },
			{ "bad_declarations", s ? s->bad_decls : 0 },
			{ "schemas_too_large", s ? s->schemas_too_large : 0 },
			{ "loads", loads },
			{ "loads_missed", missed });
	if (r >= 0)
		r = sd_bus_message_append(
			m, "{sv}", "watching", "b", (int) (load_watch_n_rings(p->load_watch) > 0));
	return r < 0 ? r : close_entry(m);
}

/* clang-format off */
static const sd_bus_vtable producers_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("ListProducers",
	                         NULL, "",
	                         "aa{sv}", SD_BUS_PARAM(producers),
	                         method_list_producers, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

const FeatureVtable producers_feature = {
	.name = "producers",
	.object_size = sizeof(ProducersFeature),
	.setup = producers_setup,
	.cpu_online = producers_cpu_online,
	.done = producers_done,
	.bus_vtable = producers_bus_vtable,
	.stats_append = producers_stats_append,
};
