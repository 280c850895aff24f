/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The features of the daemon (feature.h) as the core runs them: made from the table main()
 * gives, their hooks called in table order ("done" in reverse). The core's only way to a
 * feature. */
#include <assert.h>
#include <stdlib.h>

#include "perfrelay-config.h"

#include "base/log.h"
#include "core/manager-internal.h"

int manager_features_new(Manager *m, const FeatureVtable *const *table, size_t n) {
	m->features = calloc(n ?: 1, sizeof(Feature *));
	if (!m->features)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		Feature *f;

		assert(table[i]->object_size >= sizeof(Feature));
		f = calloc(1, table[i]->object_size);
		if (!f)
			return -ENOMEM;
		f->vtable = table[i];
		f->manager = m;
		m->features[m->n_features++] = f;
	}
	m->config_parts = calloc(n ?: 1, sizeof(ConfigPart *));
	if (!m->config_parts)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (table[i]->config)
			m->config_parts[m->n_config_parts++] = table[i]->config;
	return 0;
}

void manager_features_free(Manager *m) {
	for (size_t i = 0; i < m->n_features; i++)
		free(m->features[i]);
	free(m->features);
	m->features = NULL;
	m->n_features = 0;
}

#define FOREACH_FEATURE(f, m) \
	for (Feature **_p = (m)->features, *f; _p < (m)->features + (m)->n_features && (f = *_p, true); _p++)

/* One slot for every feature that publishes from the main thread: they take turns on it (each
 * between hub_reader_begin() and hub_reader_end()), and every slot is a ring in each shared ring
 * set and a queue in each client. */
unsigned manager_features_hub_slots(Manager *m, unsigned first_slot) {
	unsigned n = 0;

	FOREACH_FEATURE(f, m)
		if (f->vtable->wants_hub_slot && f->vtable->wants_hub_slot(m->config)) {
			f->hub_slot = first_slot;
			n = 1;
		}
	return n;
}

int manager_features_setup(Manager *m) {
	int r;

	FOREACH_FEATURE(f, m)
		if (f->vtable->setup) {
			r = f->vtable->setup(f);
			if (r < 0)
				return r;
		}
	return 0;
}

int manager_features_start(Manager *m) {
	int r;

	FOREACH_FEATURE(f, m)
		if (f->vtable->start) {
			r = f->vtable->start(f);
			if (r < 0)
				return r;
		}
	return 0;
}

void manager_features_quiesce(Manager *m) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->quiesce)
			f->vtable->quiesce(f);
}

void manager_features_finish(Manager *m) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->finish)
			f->vtable->finish(f);
}

void manager_features_done(Manager *m) {
	for (size_t i = m->n_features; i > 0; i--) {
		Feature *f = m->features[i - 1];

		if (f->vtable->done)
			f->vtable->done(f);
	}
}

int manager_features_reload(Manager *m) {
	int r = 0;

	FOREACH_FEATURE(f, m)
		if (f->vtable->reload) {
			int k = f->vtable->reload(f);

			if (k < 0 && r == 0)
				r = k;
		}
	return r;
}

void manager_features_cpu_prepare(Manager *m, unsigned cpu) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->cpu_prepare)
			f->vtable->cpu_prepare(f, cpu);
}

void manager_features_cpu_online(Manager *m, unsigned cpu) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->cpu_online)
			f->vtable->cpu_online(f, cpu);
}

void manager_features_tick(Manager *m) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->tick)
			f->vtable->tick(f);
}

uint64_t manager_demand(Manager *m) {
	uint64_t types = hub_demand(m->hub);

	FOREACH_FEATURE(f, m)
		if (f->vtable->demand)
			types |= f->vtable->demand(f);
	return types;
}

void manager_demand_changed(Manager *m) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->demand_changed)
			f->vtable->demand_changed(f);
}

void manager_features_bus_gone(Manager *m) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->bus_gone)
			f->vtable->bus_gone(f);
}

int manager_features_stats_append(Manager *m, sd_bus_message *reply) {
	int r;

	FOREACH_FEATURE(f, m)
		if (f->vtable->stats_append) {
			r = f->vtable->stats_append(f, reply);
			if (r < 0)
				return r;
		}
	return 0;
}

void manager_features_log_stats(Manager *m) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->log_stats)
			f->vtable->log_stats(f);
}

void manager_features_stats_clients(Manager *m, StatsClients *add) {
	FOREACH_FEATURE(f, m)
		if (f->vtable->stats_clients)
			f->vtable->stats_clients(f, add);
}
