/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager owns everything the daemon runs: config, probes and pins, rings and reader
 * threads, the hub and its clients, and the sd-event loop of the main thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "api/bus.h"
#include "api/server.h"
#include "kernel/cgroup.h"
#include "kernel/cgroupwatch.h"
#include "config/config.h"
#include "kernel/cpuset.h"
#include "decode/decoders.h"
#include "hub/hub.h"
#include "kernel/kernel-features.h"
#include "macro.h"
#include "kernel/probes.h"
#include "core/reader.h"
#include "core/stats.h"

typedef struct Manager Manager;
typedef struct FeatureVtable FeatureVtable; /* feature.h */

typedef struct ManagerOptions {
	const char *config_path; /* main config file; drop-ins in "<config_path>.d" */
	const char *pin_path;    /* overrides PinPath= when set */
	bool stdout_events;      /* --stdout: a JSON-lines client on fd 1 */
} ManagerOptions;

/* `features`: the table of features (features/feature-table.h), in start-up order; it outlives the manager. */
int manager_new(const ManagerOptions *o, const FeatureVtable *const *features, size_t n_features, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Pins, probes, rings, readers: everything up to READY=1. */
int manager_start(Manager *m);
/* Runs the event loop until SIGTERM/SIGINT; drains the rings on the way out. */
int manager_run(Manager *m);

const char *manager_pin_path(const Manager *m);

/* After a failed manager_start(): whether it failed because the kernel lacks a required feature. */
bool manager_kernel_unsupported(const Manager *m);
/* perfrelayd's exit status when the kernel lacks a required feature (LSB: "unimplemented
 * feature"), so that units and scripts can tell it from other failures (docs/kernels.md). */
#define PERFRELAY_EXIT_KERNEL 3

/* What a feature may use of the core (manager-api.c). The pointers stay valid until the
 * feature's done(), except manager_config(), which a reload replaces. */
const Config *manager_config(const Manager *m);
const ManagerOptions *manager_options(const Manager *m);
sd_event *manager_event(const Manager *m);
Hub *manager_hub(const Manager *m);
Probes *manager_probes(const Manager *m);
Decoders *manager_decoders(const Manager *m); /* the readers' third-party decoders */
Bus *manager_bus(const Manager *m);           /* NULL without a system bus */
const KernelFeatures *manager_kernel(const Manager *m);
const CpuSet *manager_cpus(const Manager *m);        /* CPUs with a ring, or parked */
const CpuSet *manager_cpus_parked(const Manager *m); /* of those, the offline ones */
Reader *const *manager_readers(const Manager *m, size_t *ret_n);
CgroupFs *manager_cgroups(const Manager *m);         /* NULL without cgroup2 */
CgroupWatch *manager_cgroup_watch(const Manager *m); /* NULL without cgroup2 */
/* The table of containers (kernel/containers.h) the readers' events take their container from,
 * set by the containers feature before the readers start, and back to NULL in its done() (the
 * readers are gone by then); what other features (captures by container) look names up in. */
void manager_set_containers(Manager *m, ContainerTable *t);
ContainerTable *manager_containers(const Manager *m); /* NULL: none */
bool manager_is_running(const Manager *m);            /* READY=1 sent and not stopping */
/* The unit of cgroup `id` (written to buf, NULL when it has none): as it is, or, when it cannot
 * be resolved (removed), as the cgroup watch saw it; *ret_gone (may be NULL) says whether it
 * was removed; *ret_owner (may be NULL) the user it belongs to ((uid_t) -1: the system, or
 * unknown). */
const char *manager_cgroup_unit(Manager *m, uint64_t id, char *buf, size_t size, bool *ret_gone, uid_t *ret_owner);
/* A notice of records lost upstream (hub.h, HubNotice) to every stream that takes it: the
 * clients of the main thread's hub slot `slot`, and the shared members that asked. */
void manager_publish_notice(Manager *m, unsigned slot, const HubNotice *n, HubNoticeStats *st);
/* The history's streams (api/server.h, ServerHistoryOps), from start() on: a feature offers
 * them (NULL ops: withdraws them, ending every stream), and says when new blocks are there. */
void manager_set_history(Manager *m, const ServerHistoryOps *ops, void *userdata);
void manager_history_wake(Manager *m);
/* The history's streams as offered (NULL: none), for a feature that reads it (the recorder's
 * snapshots); *ret_userdata is the ops' userdata. */
const ServerHistoryOps *manager_history(const Manager *m, void **ret_userdata);
/* The flush loop: every client's consumer, until nothing is left. */
void manager_flush(Manager *m);
/* Kernel-side demand (docs/pipeline.md, "Demand"): the record types (bit t: type t < 64) some
 * consumer wants now, the hub's clients' and the features' (FeatureVtable.demand); and what a
 * feature calls when its own changed (the features hear of it through demand_changed). */
uint64_t manager_demand(Manager *m);
void manager_demand_changed(Manager *m);
/* The stats snapshot of the core (stats.h). */
int manager_stats_snapshot(Manager *m, StatsSnapshot **ret);
/* A CPU went offline or came online (uevents, or a look at /sys): its ring is retired or
 * replaced, and the features hear of it (manager-cpu.c). manager_cpus_check() looks at the
 * online CPUs and acts on every difference. */
void manager_cpu_offline(Manager *m, unsigned cpu);
void manager_cpu_online(Manager *m, unsigned cpu);
void manager_cpus_check(Manager *m);
