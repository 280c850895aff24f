/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one snapshot of every counter: pinned producer counters, the pinned ledger, the readers'
 * and the clients' counters, taken in one place so that every consumer reports the same. */
#include <bpf/bpf.h>
#include <stdlib.h>

#include "macro.h"
#include "core/stats.h"

StatsSnapshot *stats_snapshot_free(StatsSnapshot *s) {
	if (!s)
		return NULL;
	free(s->producers);
	free(s->cpus);
	free(s->readers);
	free(s->clients);
	free(s);
	return NULL;
}


static void producer_add(ProducerSnapshot *t, const ProducerSnapshot *p) {
	t->attempts += p->attempts;
	t->filtered += p->filtered;
	t->failures += p->failures;
	t->failures_downtime += p->failures_downtime;
	t->failures_serving += p->failures_serving;
	t->received += p->received;
	t->malformed += p->malformed;
	t->crash_lost += p->crash_lost;
	t->crash_lost_at_start += p->crash_lost_at_start;
	t->seq_gaps += p->seq_gaps;
	t->received_session += p->received_session;
	t->malformed_session += p->malformed_session;
	for (unsigned e = 0; e < _DECODE_ERROR_MAX; e++)
		t->malformed_by_reason[e] += p->malformed_by_reason[e];
}

static int cpu_compare(const void *a, const void *b) {
	const CpuSnapshot *x = a, *y = b;

	return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

static int stats_producers(const StatsSources *src, StatsSnapshot *s) {
	Probes *probes = src->probes;
	Ledger *ledger = src->ledger;
	unsigned n_cpus = probes_possible_cpus(probes);
	_cleanup_free_ struct perfrelay_counters *per_cpu = calloc(n_cpus, sizeof(*per_cpu));
	_cleanup_free_ ProducerSnapshot *list = NULL;
	size_t n = 0;

	if (!per_cpu)
		return -ENOMEM;
	s->total.id = UINT32_MAX;
	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		ProducerSnapshot p = { .id = id };
		struct perfrelay_counters sum;
		int r;

		r = probes_read_counters(probes, id, &sum, per_cpu);
		if (r < 0)
			return r;
		p.attempts = sum.attempts;
		p.failures = sum.failures;
		/* Only the built-in probes filter (demand.bpf.h): one lookup each, not 1024. */
		if (id < PERFRELAY_PRODUCER_THIRD_PARTY_MIN && probe_of_producer(id) >= 0) {
			r = probes_read_filtered(probes, id, &p.filtered);
			if (r < 0)
				return r;
		}
		p.failures_downtime = MIN(src->failures_at_start[id], sum.failures);
		p.failures_serving = sum.failures - p.failures_downtime;
		for (unsigned cpu = 0; cpu < n_cpus; cpu++) {
			const struct perfrelay_received *e = ledger_entry(ledger, id, cpu);

			p.received += STAT_LOAD(e->received);
			p.malformed += STAT_LOAD(e->malformed);
			p.crash_lost += STAT_LOAD(e->crash_lost);
			p.seq_gaps += STAT_LOAD(e->seq_gaps);
		}
		p.crash_lost_at_start = src->crash_lost_at_start[id];
		for (size_t i = 0; i < src->n_readers; i++) {
			const ReaderStats *rs = reader_stats(src->readers[i]);

			p.received_session += STAT_LOAD(rs->received_by_producer[id]);
			p.malformed_session += STAT_LOAD(rs->malformed_by_producer[id]);
			for (unsigned e = 0; e < _DECODE_ERROR_MAX; e++)
				p.malformed_by_reason[e] += STAT_LOAD(rs->malformed_by_producer_reason[id][e]);
		}
		producer_add(&s->total, &p);
		if (p.attempts || p.filtered || p.received || p.malformed || p.crash_lost ||
		    p.malformed_session) {
			/* Grown in small steps, not allocated for every id at once: this runs every
			 * second (STATUS=), and freeing a block above glibc's mmap threshold raises
			 * the threshold, so that later large allocations (client queues) would come
			 * from the heap and not be returned to the system when freed. */
			if (n % 16 == 0) {
				ProducerSnapshot *grown = reallocarray(list, n + 16, sizeof(*list));

				if (!grown)
					return -ENOMEM;
				list = grown;
			}
			list[n++] = p;
		}
	}
	s->producers = TAKE_PTR(list);
	s->n_producers = n;
	return 0;
}

static int stats_readers(const StatsSources *src, StatsSnapshot *s) {
	Probes *probes = src->probes;
	unsigned n_cpus = probes_possible_cpus(probes);
	_cleanup_free_ struct perfrelay_counters *per_cpu = calloc(n_cpus, sizeof(*per_cpu));
	struct perfrelay_counters sum;
	size_t n_rings = 0;
	int r;

	if (!per_cpu)
		return -ENOMEM;
	r = probes_read_all_counters(probes, &sum, per_cpu);
	if (r < 0)
		return r;
	for (size_t i = 0; i < src->n_readers; i++)
		n_rings += reader_n_rings(src->readers[i]);
	s->readers = calloc(src->n_readers ?: 1, sizeof(*s->readers));
	s->cpus = calloc(n_rings ?: 1, sizeof(*s->cpus));
	if (!s->readers || !s->cpus)
		return -ENOMEM;

	for (size_t i = 0; i < src->n_readers; i++) {
		const Reader *rd = src->readers[i];
		const ReaderStats *rs = reader_stats(rd);
		ReaderSnapshot *out = &s->readers[s->n_readers++];

		out->id = reader_id(rd);
		if (cpuset_format(reader_cpus(rd), out->cpus, sizeof(out->cpus)) < 0)
			strcpy(out->cpus, "?");
		out->events = STAT_LOAD(rs->events);
		out->wakeups = STAT_LOAD(rs->wakeups);
		out->batches = STAT_LOAD(rs->batches);
		out->btf_decoded = STAT_LOAD(rs->btf_decoded);
		out->btf_short = STAT_LOAD(rs->btf_short);
		out->decoder_holds = STAT_LOAD(rs->decoder_holds);
		out->decoder_hold_expired = STAT_LOAD(rs->decoder_hold_expired);
		out->rt_demotions = STAT_LOAD(rs->rt_demotions);
		for (unsigned e = 0; e < _DECODE_ERROR_MAX; e++)
			out->malformed_by_reason[e] = STAT_LOAD(rs->malformed_by_reason[e]);

		for (size_t k = 0; k < reader_n_rings(rd); k++) {
			const CpuStats *cs = reader_cpu_stats(rd, k);
			CpuSnapshot *c;

			if (!reader_ring(rd, k))
				continue; /* offline since the start: listed once it has a ring */
			c = &s->cpus[s->n_cpus++];
			c->cpu = reader_slot_cpu(rd, k);
			c->reader = reader_id(rd);
			c->ring = (CpuStats){
				.received = STAT_LOAD(cs->received),
				.bytes = STAT_LOAD(cs->bytes),
				.lost = STAT_LOAD(cs->lost),
				.malformed = STAT_LOAD(cs->malformed),
				.other = STAT_LOAD(cs->other),
				.corrupt = STAT_LOAD(cs->corrupt),
				.corrupt_bytes = STAT_LOAD(cs->corrupt_bytes),
			};
			if (c->cpu < n_cpus) {
				c->attempts = per_cpu[c->cpu].attempts;
				c->failures = per_cpu[c->cpu].failures;
			}
			s->ring_lost += c->ring.lost;
		}
	}
	qsort(s->cpus, s->n_cpus, sizeof(*s->cpus), cpu_compare);
	return 0;
}

static int add_client(const ServerClientInfo *c, void *userdata) {
	StatsSnapshot *s = userdata;
	ClientSnapshot *n = reallocarray(s->clients, s->n_clients + 1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->clients = n;
	s->clients[s->n_clients++] = (ClientSnapshot){
		.id = c->id,
		.uid = (uint32_t) c->uid,
		.pid = (uint32_t) c->pid,
		.shared = c->shared,
		.offered = c->stats.offered,
		.sent = c->stats.sent,
		.dropped = c->stats.dropped,
		.queued_bytes = c->stats.queued_bytes,
	};
	return 0;
}

int stats_totals(const StatsSources *src, bool with_failures, StatsTotals *ret) {
	StatsTotals c = {
		.events_delivered = src->others.delivered,
		.client_drops = src->others.dropped,
		.events_offered = src->others.offered,
	};
	int r = 0;

	for (size_t i = 0; i < src->n_readers; i++) {
		const Reader *rd = src->readers[i];

		c.events_received += STAT_LOAD(reader_stats(rd)->events);
		for (size_t k = 0; k < reader_n_rings(rd); k++)
			c.events_lost += STAT_LOAD(reader_cpu_stats(rd, k)->lost);
	}
	if (src->server) {
		ServerStats ss;

		server_get_stats(src->server, &ss);
		c.clients = ss.clients;
		c.events_delivered += ss.gone_sent + ss.live_sent;
		c.client_drops += ss.gone_dropped + ss.live_dropped;
		c.events_offered += ss.gone_offered + ss.live_offered;
	}
	if (with_failures && src->probes) {
		struct perfrelay_counters sum;

		r = probes_read_all_counters(src->probes, &sum, NULL);
		if (r >= 0)
			c.producer_failures = sum.failures;
	}
	*ret = c;
	return r;
}

int stats_snapshot(const StatsSources *src, StatsSnapshot **ret) {
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = calloc(1, sizeof(*s));
	StatsTotals c;
	int r;

	if (!s)
		return -ENOMEM;
	if (!src->probes || !src->ledger)
		return -ESRCH; /* not started */
	r = stats_producers(src, s);
	if (r < 0)
		return r;
	r = stats_readers(src, s);
	if (r < 0)
		return r;
	if (src->server) {
		ServerStats ss;

		r = server_foreach_client(src->server, add_client, s);
		if (r < 0)
			return r;
		server_get_stats(src->server, &ss);
		s->shared.rings = ss.shared_rings;
		s->shared.bytes = ss.shared_bytes;
		s->shared.clients = ss.shared_clients;
		s->shared.fallbacks = ss.shared_fallbacks;
		s->shared.hostile = ss.shared_hostile;
		s->shared.moved = ss.shared_moved;
		users_get_stats(server_users(src->server), &s->users);
	}
	(void) stats_totals(src, false, &c);
	s->clients_connected = c.clients;
	s->clients_delivered = c.events_delivered;
	s->clients_dropped = c.client_drops;
	s->clients_offered = c.events_offered;
	*ret = TAKE_PTR(s);
	return 0;
}
