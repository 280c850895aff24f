/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The statistics methods: GetStats(), the stats snapshot (stats.c) as an a{sv} tree (docs/dbus.md,
 * "GetStats"), and GetCpuStats() and GetReaderStats(), its per-CPU and per-reader views. */
#include "bus-internal.h"
#include "stats.h"

/* GetStats() -------------------------------------------------------------------------------- */

/* One "{sv}" entry holding a uint64. */
static int append_t(sd_bus_message *m, const char *key, uint64_t v) {
	return sd_bus_message_append(m, "{sv}", key, "t", v);
}

/* Opens "{sv}" with a variant of `contents`; close with close_entry(). */
static int open_entry(sd_bus_message *m, const char *key, const char *contents) {
	int r = sd_bus_message_open_container(m, 'e', "sv");

	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', contents);
	return r;
}

static int close_entry(sd_bus_message *m) {
	int r = sd_bus_message_close_container(m);

	return r < 0 ? r : sd_bus_message_close_container(m);
}

/* "malformed_by_reason": a{st} of the reasons with a count. */
static int append_reasons(sd_bus_message *m, const uint64_t *by_reason) {
	int r = open_entry(m, "malformed_by_reason", "a{st}");

	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{st}");
	for (unsigned e = 1; r >= 0 && e < _DECODE_ERROR_MAX; e++)
		if (by_reason[e])
			r = sd_bus_message_append(m, "{st}", decode_error_to_string(e), by_reason[e]);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r < 0 ? r : close_entry(m);
}

/* The fields of one producer (or of the total) as {sv} entries of an open a{sv}. */
static int append_producer_fields(sd_bus_message *m, const ProducerSnapshot *p) {
	const struct {
		const char *key;
		uint64_t v;
	} f[] = {
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
		{ "malformed_session", p->malformed_session },
	};
	int r = 0;

	for (size_t i = 0; r >= 0 && i < ELEMENTSOF(f); i++)
		r = append_t(m, f[i].key, f[i].v);
	return r < 0 ? r : append_reasons(m, p->malformed_by_reason);
}

static int append_stats(sd_bus_message *m, const StatsSnapshot *s) {
	int r;

	r = sd_bus_message_open_container(m, 'a', "{sv}");

	/* producers: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "producers", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_producers; i++) {
		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(m, "{sv}", "id", "u", s->producers[i].id);
		if (r >= 0)
			r = append_producer_fields(m, &s->producers[i]);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* total: a{sv} */
	if (r >= 0)
		r = open_entry(m, "total", "a{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = append_producer_fields(m, &s->total);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* cpus: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "cpus", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_cpus; i++) {
		const CpuSnapshot *c = &s->cpus[i];

		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(m, "{sv}{sv}", "cpu", "u", c->cpu, "reader", "u", c->reader);
		if (r >= 0)
			r = append_t(m, "received", c->ring.received);
		if (r >= 0)
			r = append_t(m, "bytes", c->ring.bytes);
		if (r >= 0)
			r = append_t(m, "lost", c->ring.lost);
		if (r >= 0)
			r = append_t(m, "malformed", c->ring.malformed);
		if (r >= 0)
			r = append_t(m, "other", c->ring.other);
		if (r >= 0)
			r = append_t(m, "corrupt", c->ring.corrupt);
		if (r >= 0)
			r = append_t(m, "corrupt_bytes", c->ring.corrupt_bytes);
		if (r >= 0)
			r = append_t(m, "attempts", c->attempts);
		if (r >= 0)
			r = append_t(m, "failures", c->failures);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* readers: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "readers", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_readers; i++) {
		const ReaderSnapshot *rd = &s->readers[i];

		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(m, "{sv}{sv}", "id", "u", rd->id, "cpus", "s", rd->cpus);
		if (r >= 0)
			r = append_t(m, "events", rd->events);
		if (r >= 0)
			r = append_t(m, "wakeups", rd->wakeups);
		if (r >= 0)
			r = append_t(m, "batches", rd->batches);
		if (r >= 0)
			r = append_reasons(m, rd->malformed_by_reason);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* clients: a{sv} */
	if (r >= 0)
		r = open_entry(m, "clients", "a{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = append_t(m, "connected", s->clients_connected);
	if (r >= 0)
		r = append_t(m, "offered", s->clients_offered);
	if (r >= 0)
		r = append_t(m, "delivered", s->clients_delivered);
	if (r >= 0)
		r = append_t(m, "dropped", s->clients_dropped);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* client_list: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "client_list", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_clients; i++) {
		const ClientSnapshot *c = &s->clients[i];

		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(
				m, "{sv}{sv}{sv}", "id", "t", c->id, "uid", "u", c->uid, "pid", "u", c->pid);
		if (r >= 0)
			r = append_t(m, "offered", c->offered);
		if (r >= 0)
			r = append_t(m, "sent", c->sent);
		if (r >= 0)
			r = append_t(m, "dropped", c->dropped);
		if (r >= 0)
			r = append_t(m, "queued_bytes", c->queued_bytes);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	if (r >= 0)
		r = append_t(m, "ring_lost", s->ring_lost);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

/* The stats snapshot and an empty method return for it: the start of GetStats(),
 * GetCpuStats() and GetReaderStats(), which are all views of the one snapshot. */
static int stats_reply_new(
	sd_bus_message *message, Bus *b, StatsSnapshot **ret_st, sd_bus_message **ret_reply, sd_bus_error *error) {
	StatsSources src = bus_stats_sources(b);
	int r;

	r = stats_snapshot(&src, ret_st);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", b->config->pin_path);
	return sd_bus_message_new_method_return(message, ret_reply);
}

int bus_method_get_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	Bus *b = userdata;
	int r;

	r = stats_reply_new(message, b, &s, &reply, error);
	if (r < 0)
		return r;
	r = append_stats(reply, s);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

/* GetCpuStats(), GetReaderStats() ------------------------------------------------------------ */

int bus_method_get_cpu_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Bus *b = userdata;
	int r;

	r = stats_reply_new(message, b, &st, &reply, error);
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

int bus_method_get_reader_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Bus *b = userdata;
	int r;

	r = stats_reply_new(message, b, &st, &reply, error);
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
