/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A feature is a module of the daemon (the flight recorder, counters, captures, ...) that owns
 * its state and registers with the core through one vtable, as systemd's unit types do. The core
 * calls the hooks at fixed points of its life cycle and knows no feature by name: main() hands it
 * the table of features (feature-table.c). A feature reaches the core through manager.h.
 * Everything here is main thread only. docs/architecture.md, "Adding a feature", has a worked
 * example. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "config/config.h"
#include "core/stats.h"

typedef struct Feature Feature;
typedef struct FeatureVtable FeatureVtable;
typedef struct Manager Manager; /* manager.h: what a feature may use of the core */

/* The head of every feature's state: the feature's own struct starts with it. */
struct Feature {
	const FeatureVtable *vtable;
	Manager *manager;
	unsigned hub_slot; /* the main thread's hub slot, when wants_hub_slot() said so */
};

/* Every hook may be NULL. Hooks run in the order of the table, "done" in reverse. */
struct FeatureVtable {
	const char *name;   /* for messages: "recorder" */
	size_t object_size; /* of the feature's struct, zeroed by the core, that starts with Feature */
	/* Its section of perfrelay.conf (config.h): parsed with the core's, its values read with
	 * config_part(manager_config(m), part). NULL: none. */
	const ConfigPart *config;

	/* Whether the feature publishes events from the main thread with this configuration: it
	 * then gets the main thread's hub slot, which every such feature shares (Feature.hub_slot;
	 * small, hub_set_small_slots()). */
	bool (*wants_hub_slot)(const Config *c);
	/* Start-up. setup: the rings are open and mapped, the readers not started yet (what the
	 * readers must have from their first record on). start: the readers run, the socket
	 * listens and the probes are attached before the features that come after the probe
	 * feature in the table start. An error fails the start (and is logged by the feature). */
	int (*setup)(Feature *f);
	int (*start)(Feature *f);
	/* Stop: before the array's slots are cleared and the emitters in flight waited out. */
	void (*quiesce)(Feature *f);
	/* Exit: after the readers stopped and the last output was flushed (nothing runs any more
	 * that could give it events). */
	void (*finish)(Feature *f);
	/* After the readers stopped, before the hub goes: release everything (not f itself). */
	void (*done)(Feature *f);
	/* The configuration was replaced (manager_config() is the new one). An error is returned
	 * by Reload() after every feature had its turn. */
	int (*reload)(Feature *f);
	/* A CPU comes online: cpu_prepare before its new ring is in the array, cpu_online after. */
	void (*cpu_prepare)(Feature *f, unsigned cpu);
	void (*cpu_online)(Feature *f, unsigned cpu);
	/* Once a second, from the health tick, while running. */
	void (*tick)(Feature *f);
	/* Kernel-side demand (docs/pipeline.md, "Demand"). demand: the record types (bit t: type
	 * t < 64) the feature consumes itself now, apart from the hub's clients (the recorder's
	 * RecorderTypes=, the process table's exec, fork and exit); ask again with
	 * manager_demand_changed() when that changes. demand_changed: the union of every
	 * consumer's types changed (the probe feature attaches and detaches). */
	uint64_t (*demand)(Feature *f);
	void (*demand_changed)(Feature *f);

	/* D-Bus: methods and properties added to org.perfrelay1.Manager on /org/perfrelay1 (the
	 * vtable's userdata is the Feature), and bus_gone() when the connection is lost or closes,
	 * to drop objects of its own. */
	const sd_bus_vtable *bus_vtable;
	void (*bus_gone)(Feature *f);
	/* Its entries in GetStats()' a{sv} (bus-figures.h helps), and in the exit summary. */
	int (*stats_append)(Feature *f, sd_bus_message *m);
	void (*log_stats)(Feature *f);
	/* Clients outside the event socket that it feeds (standard output), added to *add. */
	void (*stats_clients)(Feature *f, StatsClients *add);
};
