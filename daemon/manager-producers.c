/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Third-party producers in the manager: scans of the programs that write into the pinned
 * "events" map (producers.c), published to the reader threads (decoders.h) at start, when a
 * reader meets a third-party record type it has no decoder for, and when ListProducers() asks;
 * at most one scan per PRODUCERS_SCAN_INTERVAL_USEC. */
#include <bpf/bpf.h>

#include "perfrelay-config.h"

#include "log.h"
#include "manager-internal.h"
#include "time-util.h"

/* A scan walks every BPF program of the system: bounded, so that a stream of undeclared
 * record types or of ListProducers() calls cannot keep the main thread busy. */
#define PRODUCERS_SCAN_INTERVAL_USEC (200 * USEC_PER_MSEC)

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

int manager_scan_producers(Manager *m, bool force) {
	_cleanup_(producers_scan_freep) ProducerScan *s = NULL;
	const ProducerScan *old = decoders_current(m->decoders);
	uint64_t now = now_usec(CLOCK_MONOTONIC);
	int r;

	if (!force && m->producers_scanned_usec != 0 &&
	    now - m->producers_scanned_usec < PRODUCERS_SCAN_INTERVAL_USEC)
		return 0;
	m->producers_scanned_usec = now;
	r = producers_scan(m->events_map_id, &s);
	if (r < 0)
		return log_warning_errno(r, "Failed to look for third-party producers: %m");
	m->producer_scans++;
	if (old && producers_scan_same(old, s))
		return 0; /* nothing new: readers keep the scan they have */
	log_scan(old, s);
	r = decoders_publish(m->decoders, TAKE_PTR(s));
	if (r < 0)
		return log_oom();
	return 1;
}

int manager_setup_producers(Manager *m) {
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	int r;

	if (bpf_obj_get_info_by_fd(probes_events_fd(m->probes), &info, &len) < 0)
		return log_error_errno(-errno, "Failed to read the id of the events map: %m");
	m->events_map_id = info.id;
	r = decoders_new(m->n_readers, &m->decoders);
	if (r < 0)
		return log_oom();
	for (size_t i = 0; i < m->n_readers; i++)
		reader_set_decoders(m->readers[i], m->decoders);
	(void) manager_scan_producers(m, true);
	return 0;
}

void manager_producers_tick(Manager *m) {
	if (!m->decoders)
		return;
	if (decoders_take_unknown(m->decoders))
		(void) manager_scan_producers(m, false);
	(void) decoders_collect(m->decoders);
}
