/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ListProducers(): the producers perfrelayd knows, from the scan of the programs that write into
 * "events" (producers.c) and the stats snapshot (their counters), as aa{sv} (docs/dbus.md,
 * "ListProducers"). */
#include "bus-internal.h"
#include "decode.h"
#include "stats.h"

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

int bus_method_list_producers(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Bus *b = userdata;
	/* The scan first: it may replace (and free) the one the stats sources would name. */
	const ProducerScan *scan = b->host.producers(b->host.userdata);
	StatsSources src = bus_stats_sources(b);
	size_t k = 0;
	int r;

	r = stats_snapshot(&src, &st);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", b->config->pin_path);
	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "a{sv}");
	/* Every id with activity or declared by a program, ascending: the snapshot's producers
	 * are ascending, and declared ids without activity are merged in. */
	for (uint32_t id = 0; r >= 0 && id < PERFRELAY_MAX_PRODUCERS; id++) {
		const ProducerSnapshot *p = NULL;

		while (k < st->n_producers && st->producers[k].id < id)
			k++;
		if (k < st->n_producers && st->producers[k].id == id)
			p = &st->producers[k];
		if (p || (id > 0 && declared(scan, id)))
			r = append_producer(reply, scan, id, p, NULL);
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
