/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager owns everything the daemon runs: config, probes and pins, rings and reader
 * threads, the hub and its clients, and the sd-event loop of the main thread. */
#pragma once

#include <stdbool.h>

#include <systemd/sd-event.h>

#include "config.h"
#include "kernelfeatures.h"
#include "hub.h"
#include "ledger.h"
#include "probes.h"
#include "reader.h"
#include "server.h"

typedef struct Manager Manager;

typedef enum ManagerState {
	MANAGER_STARTING, /* until READY=1 */
	MANAGER_RUNNING,
	MANAGER_STOPPING, /* SIGTERM/SIGINT: draining the rings */
	_MANAGER_STATE_MAX,
} ManagerState;
const char *manager_state_to_string(ManagerState s); /* "starting", ... */

/* Totals over the whole daemon (D-Bus properties, perfrelayctl status). */
typedef struct ManagerCounters {
	uint64_t events_received;   /* valid records the readers took from the rings */
	uint64_t events_delivered;  /* events written whole to a socket client or standard output, or
				     * sent as a bus Event signal */
	uint64_t events_lost;       /* PERF_RECORD_LOST counts: the kernel found a ring full */
	uint64_t producer_failures; /* bpf_perf_event_output() failures counted by the producers */
	uint64_t client_drops;      /* events a client was offered and did not get (queue full, bus rate,
				     * left in its queue when it went) */
	uint64_t events_offered;    /* events that matched a client: delivered + dropped + still queued */
	uint64_t clients;           /* socket subscribers connected now */
} ManagerCounters;

typedef struct ManagerOptions {
	const char *config_path; /* main config file; drop-ins in "<config_path>.d" */
	const char *pin_path;    /* overrides PinPath= when set */
	bool stdout_events;      /* --stdout: a JSON-lines client on fd 1 */
} ManagerOptions;

int manager_new(const ManagerOptions *o, Manager **ret);
Manager *manager_free(Manager *m);

/* Pins, probes, rings, readers: everything up to READY=1. */
int manager_start(Manager *m);
/* Runs the event loop until SIGTERM/SIGINT; drains the rings on the way out. */
int manager_run(Manager *m);

const char *manager_pin_path(const Manager *m);

/* For the bus glue; main thread. Counters of readers are read with STAT_LOAD (stats.h). */
ManagerState manager_state(const Manager *m);
uint64_t manager_started_at(const Manager *m); /* CLOCK_REALTIME usec of manager_new() */
const Config *manager_config(const Manager *m);
const CpuSet *manager_cpus(const Manager *m); /* CPUs with a ring */
size_t manager_n_readers(const Manager *m);
const Reader *manager_reader(const Manager *m, size_t i);
Probes *manager_probes(Manager *m);
const Features *manager_features(const Manager *m);
/* After a failed manager_start(): whether it failed because the kernel lacks a required feature. */
bool manager_kernel_unsupported(const Manager *m);
/* perfrelayd's exit status when the kernel lacks a required feature (LSB: "unimplemented
 * feature"), so that units and scripts can tell it from other failures (docs/kernels.md). */
#define PERFRELAY_EXIT_KERNEL 3
Server *manager_server(Manager *m);
Hub *manager_hub(Manager *m);
Ledger *manager_ledger(Manager *m);
/* A producer's pinned failure count when this daemon began serving: the failures of the
 * downtime before it (and of earlier daemons). */
uint64_t manager_failures_at_start(const Manager *m, uint32_t producer);
/* What this daemon's start counted as lost with the rings of a dead daemon. */
uint64_t manager_crash_lost_at_start(const Manager *m, uint32_t producer);

/* Fills *ret. producer_failures is read from the pinned counters array only when
 * `with_failures` is set (a map read per call); if that read fails it is 0 and the error is
 * returned, with every other field filled. */
int manager_get_counters(Manager *m, bool with_failures, ManagerCounters *ret);

/* Attaches or detaches a built-in probe until the next reload or restart (which apply
 * Probes= again). */
int manager_set_probe_enabled(Manager *m, unsigned probe, bool enabled);

/* Re-reads the configuration (SIGHUP, D-Bus Reload()): applies Probes=, the [Socket] limits and
 * [Bus]; settings read only at start are kept and named in a warning. On a configuration error
 * nothing changes, and *ret_error (if given) gets the "FILE:LINE: message" text. If a probe
 * cannot be attached or detached, everything else is applied and the error returned without a
 * text. */
int manager_reload(Manager *m, char **ret_error);
