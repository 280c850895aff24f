/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The statistics methods: GetStats(), the stats snapshot (stats.c) as an a{sv} tree (docs/dbus.md,
 * "GetStats") with each feature's sections after the core's, and GetCpuStats() and
 * GetReaderStats(), its per-CPU and per-reader views. */
#include "api/bus-figures.h"
#include "core/manager-internal.h"
#include "core/stats.h"

/* GetStats() -------------------------------------------------------------------------------- */

/* "malformed_by_reason": a{st} of the reasons with a count. */
static int append_reasons(sd_bus_message *m, const uint64_t *by_reason) {
	int r = open_entry(m, "malformed_by_reason", "a{st}", 'a', "{st}");

	for (unsigned e = 1; r >= 0 && e < _DECODE_ERROR_MAX; e++)
		if (by_reason[e])
			r = sd_bus_message_append(m, "{st}", decode_error_to_string(e), by_reason[e]);
	return r < 0 ? r : close_entry(m);
}

/* The fields of one producer (or of the total) as {sv} entries of an open a{sv}. */
static int append_producer_fields(sd_bus_message *m, const ProducerSnapshot *p) {
	int r = APPEND_FIGURES(
		m,
		{ "hits", p->filtered + p->attempts },
		{ "filtered", p->filtered },
		{ "attempts", p->attempts },
		{ "failures", p->failures },
		{ "failures_downtime", p->failures_downtime },
		{ "failures_serving", p->failures_serving },
		{ "received", p->received },
		{ "malformed", p->malformed },
		{ "crash_lost", p->crash_lost },
		{ "crash_lost_at_start", p->crash_lost_at_start },
		{ "seq_gaps", p->seq_gaps },
		{ "received_session", p->received_session },
		{ "malformed_session", p->malformed_session });

	return r < 0 ? r : append_reasons(m, p->malformed_by_reason);
}

static int append_producer(sd_bus_message *m, const StatsSnapshot *s, size_t i) {
	int r = sd_bus_message_append(m, "{sv}", "id", "u", s->producers[i].id);

	return r < 0 ? r : append_producer_fields(m, &s->producers[i]);
}

static int append_cpu(sd_bus_message *m, const StatsSnapshot *s, size_t i) {
	const CpuSnapshot *c = &s->cpus[i];
	int r = sd_bus_message_append(m, "{sv}{sv}", "cpu", "u", c->cpu, "reader", "u", c->reader);

	return r < 0 ? r :
		       APPEND_FIGURES(
			       m,
			       { "received", c->ring.received },
			       { "bytes", c->ring.bytes },
			       { "lost", c->ring.lost },
			       { "malformed", c->ring.malformed },
			       { "other", c->ring.other },
			       { "corrupt", c->ring.corrupt },
			       { "corrupt_bytes", c->ring.corrupt_bytes },
			       { "attempts", c->attempts },
			       { "failures", c->failures });
}

static int append_reader(sd_bus_message *m, const StatsSnapshot *s, size_t i) {
	const ReaderSnapshot *rd = &s->readers[i];
	int r = sd_bus_message_append(m, "{sv}{sv}", "id", "u", rd->id, "cpus", "s", rd->cpus);

	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "events", rd->events },
			{ "wakeups", rd->wakeups },
			{ "batches", rd->batches },
			{ "btf_decoded", rd->btf_decoded },
			{ "btf_short", rd->btf_short },
			{ "decoder_holds", rd->decoder_holds },
			{ "decoder_hold_expired", rd->decoder_hold_expired },
			{ "rt_demotions", rd->rt_demotions });
	return r < 0 ? r : append_reasons(m, rd->malformed_by_reason);
}

static int append_client(sd_bus_message *m, const StatsSnapshot *s, size_t i) {
	const ClientSnapshot *c = &s->clients[i];
	int r = sd_bus_message_append(
		m,
		"{sv}{sv}{sv}{sv}",
		"id",
		"t",
		c->id,
		"uid",
		"u",
		c->uid,
		"pid",
		"u",
		c->pid,
		"shared",
		"b",
		(int) c->shared);

	return r < 0 ? r :
		       APPEND_FIGURES(
			       m,
			       { "offered", c->offered },
			       { "sent", c->sent },
			       { "dropped", c->dropped },
			       { "queued_bytes", c->queued_bytes });
}

/* `key`: aa{sv}, one a{sv} per element, filled by `fn`. */
static int append_list(
	sd_bus_message *m,
	const char *key,
	const StatsSnapshot *s,
	size_t n,
	int (*fn)(sd_bus_message *m, const StatsSnapshot *s, size_t i)) {
	int r = open_entry(m, key, "aa{sv}", 'a', "a{sv}");

	for (size_t i = 0; r >= 0 && i < n; i++) {
		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = fn(m, s, i);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	return r < 0 ? r : close_entry(m);
}

static int append_stats(Manager *mgr, sd_bus_message *m, const StatsSnapshot *s) {
	int r;

	r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = append_list(m, "producers", s, s->n_producers, append_producer);
	if (r >= 0)
		r = open_entry(m, "total", "a{sv}", 'a', "{sv}");
	if (r >= 0)
		r = append_producer_fields(m, &s->total);
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = append_list(m, "cpus", s, s->n_cpus, append_cpu);
	if (r >= 0)
		r = append_list(m, "readers", s, s->n_readers, append_reader);
	if (r >= 0)
		r = open_entry(m, "clients", "a{sv}", 'a', "{sv}");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "connected", s->clients_connected },
			{ "offered", s->clients_offered },
			{ "delivered", s->clients_delivered },
			{ "dropped", s->clients_dropped });
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = append_list(m, "client_list", s, s->n_clients, append_client);
	if (r >= 0)
		r = open_entry(m, "shared", "a{sv}", 'a', "{sv}");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "rings", s->shared.rings },
			{ "bytes", s->shared.bytes },
			{ "clients", s->shared.clients },
			{ "fallbacks", s->shared.fallbacks },
			{ "hostile", s->shared.hostile },
			{ "moved", s->shared.moved });
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = open_entry(m, "users", "a{sv}", 'a', "{sv}");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "uids", s->users.uids },
			{ "clients", s->users.clients },
			{ "queue_bytes", s->users.bytes },
			{ "queue_bytes_max", s->users.bytes_max },
			{ "pool_clients", s->users.pool_clients },
			{ "pool_queue_bytes", s->users.pool_bytes },
			{ "refused_clients", s->users.refused[USERS_CLIENTS] },
			{ "refused_clients_per_uid", s->users.refused[USERS_CLIENTS_PER_UID] },
			{ "refused_queue_bytes", s->users.refused[USERS_BYTES] },
			{ "refused_queue_bytes_per_uid", s->users.refused[USERS_BYTES_PER_UID] });
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = open_entry(m, "bus", "a{sv}", 'a', "{sv}");
	if (r >= 0) {
		BusStats bs;

		bus_get_stats(mgr->bus, &bs);
		r = APPEND_FIGURES(m, { "reads_limited", bs.reads_limited });
	}
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = APPEND_FIGURES(m, { "ring_lost", s->ring_lost });
	if (r >= 0)
		r = manager_features_stats_append(mgr, m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

/* The stats snapshot and an empty method return for it: the start of GetStats(),
 * GetCpuStats() and GetReaderStats(), which are all views of the one snapshot. */
static int stats_reply_new(
	sd_bus_message *message,
	Manager *m,
	StatsSnapshot **ret_st,
	sd_bus_message **ret_reply,
	sd_bus_error *error) {
	int r;

	r = manager_stats_snapshot(m, ret_st);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", m->config->pin_path);
	return sd_bus_message_new_method_return(message, ret_reply);
}

int manager_method_get_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	Manager *mgr = userdata;
	SubscriptionAccess access;
	size_t kept = 0;
	uid_t viewer;
	int r;

	r = bus_require_read(mgr->bus, message, "GetStats", &viewer, &access, error);
	if (r < 0)
		return r;
	r = stats_reply_new(message, mgr, &s, &reply, error);
	if (r < 0)
		return r;
	/* Other users' connections (uid, pid) are for root only; the totals are for everyone. */
	for (size_t i = 0; i < s->n_clients; i++)
		if (bus_viewer_sees(viewer, s->clients[i].uid))
			s->clients[kept++] = s->clients[i];
	s->n_clients = kept;
	r = append_stats(mgr, reply, s);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

/* GetCpuStats(), GetReaderStats() ------------------------------------------------------------ */

int manager_method_get_cpu_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Manager *mgr = userdata;
	int r;

	r = stats_reply_new(message, mgr, &st, &reply, error);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(uuttttttt)");
	if (r < 0)
		return r;
	for (size_t i = 0; i < st->n_cpus; i++) {
		const CpuSnapshot *c = &st->cpus[i];

		r = sd_bus_message_append(
			reply,
			"(uuttttttt)",
			(uint32_t) c->cpu,
			(uint32_t) c->reader,
			c->ring.received,
			c->ring.lost,
			c->ring.bytes,
			c->ring.malformed,
			c->failures,
			c->ring.corrupt,
			c->ring.corrupt_bytes);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

int manager_method_get_reader_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Manager *mgr = userdata;
	int r;

	r = stats_reply_new(message, mgr, &st, &reply, error);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(uauttt)");
	if (r < 0)
		return r;
	for (size_t i = 0; i < st->n_readers; i++) {
		const ReaderSnapshot *rd = &st->readers[i];
		CpuSet cpus;

		r = cpuset_parse(rd->cpus, &cpus);
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'r', "uauttt");
		if (r >= 0)
			r = sd_bus_message_append(reply, "u", (uint32_t) rd->id);
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'a', "u");
		FOREACH_CPU(cpu, &cpus) {
			if (r < 0)
				break;
			r = sd_bus_message_append(reply, "u", (uint32_t) cpu);
		}
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r >= 0)
			r = sd_bus_message_append(reply, "ttt", rd->wakeups, rd->batches, rd->events);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}
