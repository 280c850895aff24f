/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Third-party producers in the manager: scans of the programs that write into the pinned
 * "events" map (producers.c), published to the reader threads (decoders.h) at start, when such
 * a program loads (the load watch: PERF_RECORD_BPF_EVENT), when a reader holds a third-party
 * record it has no decoder for, and when ListProducers() asks; at most one scan per
 * PRODUCERS_SCAN_INTERVAL_USEC, the others deferred to its end. */
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "perfrelay-config.h"

#include "loadwatch.h"
#include "log.h"
#include "manager-internal.h"
#include "time-util.h"

/* A scan walks every BPF program of the system: bounded, so that a stream of program loads,
 * of undeclared record types or of ListProducers() calls cannot keep the main thread busy. A
 * reader holds the records that wait for a scan (reader.h): short. */
#define PRODUCERS_SCAN_INTERVAL_USEC (50 * USEC_PER_MSEC)
/* Programs held by the load watch that one scan takes; more wait for the next, asked for. */
#define PRODUCERS_MAX_LOADED         256u

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

static int scan_now(Manager *m) {
	_cleanup_(producers_scan_freep) ProducerScan *s = NULL;
	const ProducerScan *old = decoders_current(m->decoders);
	uint64_t started_ns = now_nsec(CLOCK_BOOTTIME);
	int loaded[PRODUCERS_MAX_LOADED];
	size_t n_loaded = 0;
	int r;

	/* The programs the load watch opened so far stay loaded through the scan: it describes
	 * them even if their loaders unloaded them already. Those it opens meanwhile wait for the
	 * next scan (which their loads ask for). */
	n_loaded = load_watch_take(m->load_watch, loaded, ELEMENTSOF(loaded));
	if (n_loaded == ELEMENTSOF(loaded))
		decoders_want_scan(m->decoders);

	m->producers_scanned_usec = now_usec(CLOCK_MONOTONIC);
	r = producers_scan(m->events_map_id, &s);
	for (size_t i = 0; i < n_loaded; i++)
		safe_close(loaded[i]);
	if (r < 0)
		return log_warning_errno(r, "Failed to look for third-party producers: %m");
	m->producer_scans++;
	if (!old || !producers_scan_same(old, s)) {
		log_scan(old, s);
		r = decoders_publish(m->decoders, TAKE_PTR(s));
		if (r < 0)
			return log_oom();
		r = 1;
	} else
		r = 0; /* nothing new: readers keep the scan they have */
	decoders_scan_done(m->decoders, started_ns);
	return r;
}

static int on_scan_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	(void) scan_now(userdata);
	return 0;
}

int manager_scan_producers(Manager *m, bool force) {
	uint64_t now = now_usec(CLOCK_MONOTONIC), due;
	int r;

	if (force || m->producers_scanned_usec == 0 ||
	    now - m->producers_scanned_usec >= PRODUCERS_SCAN_INTERVAL_USEC)
		return scan_now(m);
	/* Deferred, not dropped: a reader may be holding records for it. */
	due = m->producers_scanned_usec + PRODUCERS_SCAN_INTERVAL_USEC;
	if (m->producers_timer_source)
		r = sd_event_source_set_time(m->producers_timer_source, due);
	else
		r = sd_event_add_time(
			m->event, &m->producers_timer_source, CLOCK_MONOTONIC, due, 0, on_scan_timer, m);
	if (r >= 0)
		r = sd_event_source_set_enabled(m->producers_timer_source, SD_EVENT_ONESHOT);
	if (r < 0)
		return scan_now(m);
	return 0;
}

static int on_want_scan(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	Manager *m = userdata;

	if (decoders_take_want(m->decoders))
		(void) manager_scan_producers(m, false);
	return 0;
}

void manager_producers_cpu_online(Manager *m, unsigned cpu) {
	load_watch_cpu_online(m->load_watch, cpu);
}

void manager_free_producers(Manager *m) {
	sd_event_source_disable_unref(m->producers_want_source);
	sd_event_source_disable_unref(m->producers_timer_source);
	m->load_watch = load_watch_free(m->load_watch);
}

int manager_setup_producers(Manager *m) {
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	unsigned n_cpus;
	int r;

	if (bpf_obj_get_info_by_fd(probes_events_fd(m->probes), &info, &len) < 0)
		return log_error_errno(-errno, "Failed to read the id of the events map: %m");
	m->events_map_id = info.id;
	r = libbpf_num_possible_cpus();
	if (r < 0)
		return log_error_errno(r, "Failed to count the possible CPUs: %m");
	n_cpus = (unsigned) r;
	r = decoders_new(m->n_readers, n_cpus, &m->decoders);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the third-party decoders: %m");
	r = sd_event_add_io(
		m->event, &m->producers_want_source, decoders_want_fd(m->decoders), EPOLLIN, on_want_scan, m);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the readers' requests for producer scans: %m");
	for (size_t i = 0; i < m->n_readers; i++)
		reader_set_decoders(m->readers[i], m->decoders);
	/* The watch first: a program that loads during the first scan is then not missed. */
	if (features_has(m->features, FEATURE_BPF_EVENT)) {
		r = load_watch_new(
			n_cpus, m->events_map_id, m->decoders, m->config->reader_nice, &m->load_watch);
		if (r < 0)
			log_warning_errno(
				r,
				"Failed to watch program loads: %m; producers that load later are found when "
				"their records arrive");
	}
	(void) scan_now(m);
	return 0;
}

void manager_producers_tick(Manager *m) {
	/* Requests for scans come through decoders_want_fd() (on_want_scan()). */
	if (m->decoders)
		(void) decoders_collect(m->decoders);
}
