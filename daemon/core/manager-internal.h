/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager's state, shared by the core's files (manager.c and manager-*.c) and nobody else:
 * features see the manager through feature.h. Main thread only, except where a field says
 * otherwise. */
#pragma once

#include <systemd/sd-event.h>

#include "perfrelay-config.h"

#include "api/bus.h"
#include "kernel/cgroup.h"
#include "kernel/cgroupwatch.h"
#include "decode/decoders.h"
#include "core/feature.h"
#include "hub/hub.h"
#include "kernel/kernel-features.h"
#include "kernel/ledger.h"
#include "core/manager.h"
#include "kernel/probes.h"
#include "core/reader.h"
#include "kernel/ring.h"
#include "api/server.h"
#include "core/stats.h"

typedef enum ManagerState {
	MANAGER_STARTING, /* until READY=1 */
	MANAGER_RUNNING,
	MANAGER_STOPPING, /* SIGTERM/SIGINT: draining the rings */
	_MANAGER_STATE_MAX,
} ManagerState;

struct Manager {
	ManagerOptions o;
	ManagerState state;
	uint64_t started_at; /* CLOCK_REALTIME usec */
	char *dropin_dir;
	Config *config;
	const ConfigPart **config_parts; /* the features' sections (FeatureVtable.config) */
	size_t n_config_parts;
	sd_event *event;
	Probes *probes;
	Ledger *ledger; /* the pinned "received" map, mmapped */
	/* Per producer: its pinned failure count when this daemon began serving (the failures of
	 * the downtime before it), and what ledger_settle() found lost with a dead daemon. */
	uint64_t failures_at_start[PERFRELAY_MAX_PRODUCERS];
	uint64_t crash_lost_at_start[PERFRELAY_MAX_PRODUCERS];
	bool serving;            /* our rings may be in the array: quiesce before the last drain */
	bool quiesced;           /* slots cleared and a grace period waited out: nothing writes */
	KernelFeatures *kernel;  /* what the running kernel offers, probed at start */
	bool kernel_unsupported; /* start failed: a required kernel feature is missing */
	Hub *hub;
	Reader **readers;
	size_t n_readers;
	CpuSet cpus;        /* CPUs with a ring, or parked */
	CpuSet cpus_parked; /* CPUs of `cpus` that are offline: slot empty, ring drained or none yet */
	CpuSet cpus_unserved_seen;  /* CPUs outside every group already reported as online */
	CgroupFs *cgroups;          /* cgroup2 mount for unit names; NULL if there is none */
	CgroupWatch *cgroup_watch;  /* the units of removed cgroups; NULL: none */
	ContainerTable *containers; /* the containers feature's (manager_set_containers()); NULL: none */
	Decoders *decoders;         /* the scans the readers decode third-party records with */
	Server *server;             /* the event socket and its subscribers */
	/* The history's streams, offered by a feature (manager_set_history()); NULL: none. */
	const ServerHistoryOps *history_ops;
	void *history_userdata;
	Bus *bus; /* NULL without a system bus */
	sd_event_source *notify_source;

	/* The features (feature.h), in the order of the table main() gave. */
	Feature **features;
	size_t n_features;

	/* Health: STATUS= every second, and WATCHDOG=1 while every reader makes progress. */
	sd_event_source *health_source;
	uint64_t watchdog_usec; /* from $WATCHDOG_USEC, 0 when systemd does not watch us */
	uint64_t health_last_usec;
	uint64_t health_last_events;
	bool watchdog_withheld;

	/* The bus's counters as of the last PropertiesChanged (manager-bus.c). */
	sd_event_source *bus_stats_source;
	StatsTotals bus_last;
	uint64_t *lost_signalled; /* per ring, in reader order: lost count as of the last EventsLost */
	size_t n_rings;
};

/* manager-features.c: the hooks of every feature (feature.h), in table order ("done" in
 * reverse). setup/start/reload return the first error; the others cannot fail. */
int manager_features_new(Manager *m, const FeatureVtable *const *table, size_t n);
void manager_features_free(Manager *m);
unsigned manager_features_hub_slots(Manager *m, unsigned first_slot);
int manager_features_setup(Manager *m);
int manager_features_start(Manager *m);
void manager_features_quiesce(Manager *m);
void manager_features_finish(Manager *m);
void manager_features_done(Manager *m);
int manager_features_reload(Manager *m);
void manager_features_cpu_prepare(Manager *m, unsigned cpu);
void manager_features_cpu_online(Manager *m, unsigned cpu);
void manager_features_tick(Manager *m);
void manager_features_bus_gone(Manager *m);
int manager_features_stats_append(Manager *m, sd_bus_message *reply);
void manager_features_log_stats(Manager *m);
void manager_features_stats_clients(Manager *m, StatsClients *add);

/* manager-cpu.c */
RingOptions manager_ring_options(const Manager *m);
/* A CPU's slots in "events" and "critical" (its protected lane). */
int manager_store_ring(Manager *m, unsigned cpu, const Ring *ring, const char **ret_array);
int manager_clear_cpu_slots(Manager *m, unsigned cpu);
/* The CPU groups the readers serve, the offline CPUs parked in them. */
int manager_cpu_groups(Manager *m, CpuSet **ret, size_t *ret_n);

/* manager-bus.c: the bus connection, org.perfrelay1.Manager's own part, and the features'. */
int manager_setup_bus(Manager *m);
void manager_free_bus(Manager *m);
void manager_emit_state_changed(Manager *m);
/* manager-bus-stats.c: GetStats(), GetCpuStats(), GetReaderStats() (userdata: the manager) */
int manager_method_get_stats(sd_bus_message *message, void *userdata, sd_bus_error *error);
int manager_method_get_cpu_stats(sd_bus_message *message, void *userdata, sd_bus_error *error);
int manager_method_get_reader_stats(sd_bus_message *message, void *userdata, sd_bus_error *error);

/* manager-health.c: STATUS= and WATCHDOG=1 every second */
int manager_setup_health(Manager *m);
#if PERFRELAY_FAULT_INJECTION
int manager_on_fault_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata);
#endif

/* manager-reload.c */
/* Re-reads the configuration (SIGHUP, D-Bus Reload()): applies the [Socket] limits and [Bus],
 * then the features' reload() (the probe feature applies Probes=); settings read only at start
 * are kept and named in a warning. On a configuration error nothing changes, and *ret_error (if
 * given) gets the "FILE:LINE: message" text. A feature's error is returned without a text. */
int manager_reload(Manager *m, char **ret_error);

/* manager-stats.c */
/* Where the counters are now: for stats_snapshot() and stats_totals(). */
void manager_stats_sources(Manager *m, StatsSources *ret);
void manager_log_stats(Manager *m);
const char *manager_state_to_string(ManagerState s);

/* What api/ (the event socket, the bus) takes of a configuration (manager-api.c). */
ApiOptions manager_api_options(const Config *c);
