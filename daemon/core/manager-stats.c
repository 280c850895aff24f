/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager's figures: the counters the D-Bus properties show, and the exit summary. */
#include <inttypes.h>

#include "perfrelay-config.h"

#include "base/log.h"
#include "core/manager-internal.h"
#include "core/stats.h"
#include "string-table.h"
#include "time-util.h"

static const char *const manager_state_table[_MANAGER_STATE_MAX] = {
	[MANAGER_STARTING] = "starting",
	[MANAGER_RUNNING] = "running",
	[MANAGER_STOPPING] = "stopping",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(manager_state, ManagerState);

void manager_stats_sources(Manager *m, StatsSources *ret) {
	StatsClients others = {};
	BusStats bs;

	/* Clients outside the socket: the features' (standard output) and the bus monitors. */
	manager_features_stats_clients(m, &others);
	bus_get_stats(m->bus, &bs);
	others.delivered += bs.delivered;
	others.dropped += bs.dropped;
	/* A monitor's hub queue is emptied into signals on every pass of the loop: what it was
	 * offered is what it sent or dropped. */
	others.offered += bs.delivered + bs.dropped;

	*ret = (StatsSources){
		.probes = m->probes,
		.ledger = m->ledger,
		.readers = m->readers,
		.n_readers = m->n_readers,
		.server = m->server,
		.failures_at_start = m->failures_at_start,
		.crash_lost_at_start = m->crash_lost_at_start,
		.others = others,
	};
}

/* The figures a user needs to see that nothing was lost uncounted, logged at exit: the same
 * snapshot as GetStats() and perfrelayctl stats (docs/dbus.md says what each means). */
void manager_log_stats(Manager *m) {
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	StatsSources src;
	int r;

	manager_stats_sources(m, &src);
	r = stats_snapshot(&src, &s);
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
	manager_features_log_stats(m);
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
