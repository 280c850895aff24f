/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager's figures: the counters the D-Bus properties show, and the exit summary. */
#include <inttypes.h>

#include "perfrelay-config.h"

#include "log.h"
#include "manager-internal.h"
#include "stats.h"
#include "time-util.h"

int manager_get_counters(Manager *m, bool with_failures, ManagerCounters *ret) {
	ManagerCounters c = {};
	BusStats bs;
	int r = 0;

	for (size_t i = 0; i < m->n_readers; i++) {
		const Reader *rd = m->readers[i];

		c.events_received += STAT_LOAD(reader_stats(rd)->events);
		for (size_t k = 0; k < reader_n_rings(rd); k++)
			c.events_lost += STAT_LOAD(reader_cpu_stats(rd, k)->lost);
	}
	if (m->server) {
		ServerStats ss;

		server_get_stats(m->server, &ss);
		c.clients = ss.clients;
		c.events_delivered += ss.gone_sent + ss.live_sent;
		c.client_drops += ss.gone_dropped + ss.live_dropped;
		c.events_offered += ss.gone_offered + ss.live_offered;
	}
	c.events_delivered += m->stdout_gone.sent;
	c.client_drops += m->stdout_gone.dropped;
	c.events_offered += m->stdout_gone.offered;
	if (m->stdout_client) {
		HubClientStats st;

		hub_client_get_stats(m->stdout_client, &st);
		c.events_delivered += st.sent;
		c.client_drops += st.dropped;
		c.events_offered += st.offered;
	}
	bus_get_stats(m->bus, &bs);
	c.events_delivered += bs.delivered;
	c.client_drops += bs.dropped;
	/* A monitor's hub queue is emptied into signals on every pass of the loop: what it was
	 * offered is what it sent or dropped. */
	c.events_offered += bs.delivered + bs.dropped;

	if (with_failures && m->probes) {
		struct perfrelay_counters sum;

		r = probes_read_all_counters(m->probes, &sum, NULL);
		if (r >= 0)
			c.producer_failures = sum.failures;
	}
	*ret = c;
	return r;
}

/* The figures a user needs to see that nothing was lost uncounted, logged at exit: the same
 * snapshot as GetStats() and perfrelayctl stats (docs/dbus.md says what each means). */
void manager_log_stats(Manager *m) {
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	int r;

	r = stats_snapshot(m, &s);
	if (r < 0) {
		log_warning_errno(r, "Failed to take the exit statistics: %m");
		return;
	}
	for (size_t i = 0; i < s->n_readers; i++) {
		const ReaderSnapshot *rd = &s->readers[i];

		log_info(
			"Reader %u (CPUs %s): %" PRIu64 " events, %" PRIu64 " wakeups, %" PRIu64 " batches",
			rd->id,
			rd->cpus,
			rd->events,
			rd->wakeups,
			rd->batches);
		for (unsigned e = 1; e < _DECODE_ERROR_MAX; e++)
			if (rd->malformed_by_reason[e])
				log_info(
					"Reader %u: %" PRIu64 " records rejected: %s",
					rd->id,
					rd->malformed_by_reason[e],
					decode_error_to_string(e));
	}
	for (size_t i = 0; i < s->n_cpus; i++) {
		const CpuSnapshot *c = &s->cpus[i];

		log_info(
			"CPU %u: %" PRIu64 " received, %" PRIu64 " lost, %" PRIu64 " malformed, %" PRIu64
			" bytes",
			c->cpu,
			c->ring.received,
			c->ring.lost,
			c->ring.malformed,
			c->ring.bytes);
		if (c->ring.corrupt)
			log_warning(
				"CPU %u: ring framing broken %" PRIu64 " times, %" PRIu64 " bytes skipped",
				c->cpu,
				c->ring.corrupt,
				c->ring.corrupt_bytes);
	}
	for (size_t i = 0; i < s->n_producers; i++) {
		const ProducerSnapshot *p = &s->producers[i];

		log_info(
			"Producer %u: %" PRIu64 " attempts, %" PRIu64 " received, %" PRIu64
			" malformed, %" PRIu64 " failures (%" PRIu64 " before this daemon served), %" PRIu64
			" crash_lost, %" PRIu64 " seq_gaps; this daemon: %" PRIu64 " received, %" PRIu64
			" malformed",
			p->id,
			p->attempts,
			p->received,
			p->malformed,
			p->failures,
			p->failures_downtime,
			p->crash_lost,
			p->seq_gaps,
			p->received_session,
			p->malformed_session);
	}
	for (size_t i = 0; i < m->n_readers; i++) {
		CgroupCacheStats us;

		reader_unit_cache_stats(m->readers[i], &us);
		if (us.misses > 0)
			log_info(
				"Reader %u: units: %" PRIu64 " cache hits, %" PRIu64 " resolved, %" PRIu64
				" failed, %" PRIu64 " evicted",
				reader_id(m->readers[i]),
				us.hits,
				us.misses,
				us.failures,
				us.evictions);
	}
	if (m->stdout_client) {
		HubClientStats cs;

		hub_client_get_stats(m->stdout_client, &cs);
		log_info(
			"Standard output: %" PRIu64 " offered, %" PRIu64 " sent, %" PRIu64 " dropped",
			cs.offered,
			cs.sent,
			cs.dropped);
	}
	if (m->server) {
		ServerStats ss;
		uint64_t refused = 0;

		server_get_stats(m->server, &ss);
		for (unsigned e = 0; e < _PROTOCOL_ERROR_MAX; e++)
			refused += ss.refused[e];
		log_info(
			"Socket clients: %" PRIu64 " connections, %" PRIu64 " subscribed, %" PRIu64
			" refused with an error; %" PRIu64 " events offered, %" PRIu64 " sent, %" PRIu64
			" dropped; %" PRIu64 " passed fds closed",
			ss.accepted,
			ss.subscribed,
			refused,
			ss.gone_offered,
			ss.gone_sent,
			ss.gone_dropped,
			ss.fds_closed);
	}
	log_info(
		"All clients: %" PRIu64 " offered, %" PRIu64 " delivered, %" PRIu64 " dropped",
		s->clients_offered,
		s->clients_delivered,
		s->clients_dropped);
}
