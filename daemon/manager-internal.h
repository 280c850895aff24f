/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager's state, shared by its files (manager.c and manager-*.c) and nobody else.
 * Main thread only, except where a field says otherwise. */
#pragma once

#include <systemd/sd-event.h>

#include "bus.h"
#include "captures.h"
#include "cgroup.h"
#include "cgroupwatch.h"
#include "decoders.h"
#include "hotplug.h"
#include "hub.h"
#include "kernelfeatures.h"
#include "ledger.h"
#include "loadwatch.h"
#include "manager.h"
#include "perfcount.h"
#include "probes.h"
#include "reader.h"
#include "recorder.h"
#include "ring.h"
#include "server.h"
#include "stats.h"

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
	sd_event *event;
	Probes *probes;
	Ledger *ledger; /* the pinned "received" map, mmapped */
	/* Per producer: its pinned failure count when this daemon began serving (the failures of
	 * the downtime before it), and what ledger_settle() found lost with a dead daemon. */
	uint64_t failures_at_start[PERFRELAY_MAX_PRODUCERS];
	uint64_t crash_lost_at_start[PERFRELAY_MAX_PRODUCERS];
	bool serving;            /* our rings may be in the array: quiesce before the last drain */
	bool quiesced;           /* slots cleared and a grace period waited out: nothing writes */
	Features *features;      /* what the running kernel offers, probed at start */
	bool kernel_unsupported; /* start failed: a required kernel feature is missing */
	Hub *hub;
	Reader **readers;
	size_t n_readers;
	CpuSet cpus;       /* CPUs with a ring */
	CgroupFs *cgroups; /* cgroup2 mount for unit names; NULL if there is none */
	Server *server;    /* the event socket and its subscribers */
	Bus *bus;          /* NULL without a system bus */

	HubClient *stdout_client;
	HubClientStats stdout_gone;     /* the standard output client's counters after it went away */
	sd_event_source *stdout_source; /* EPOLLOUT wait on fd 1, NULL for files */
	sd_event_source *notify_source;

	/* Health: STATUS= every second, and WATCHDOG=1 while every reader makes progress. */
	sd_event_source *health_source;
	uint64_t watchdog_usec; /* from $WATCHDOG_USEC, 0 when systemd does not watch us */
	uint64_t health_last_usec;
	uint64_t health_last_events;
	bool watchdog_withheld;

	Recorder *recorder; /* the flight recorder; NULL when off (manager-recorder.c) */
	sd_event_source *recorder_window_source; /* samples how far back it reaches, for the cgroup watch */
	CgroupWatch *cgroup_watch; /* the units of removed cgroups, for snapshots; NULL: none */

	/* Third-party producers (manager-producers.c). */
	Decoders *decoders; /* the scans the readers decode third-party records with */
	uint32_t events_map_id;
	uint64_t producers_scanned_usec; /* CLOCK_MONOTONIC of the last scan */
	uint64_t producer_scans;
	sd_event_source *producers_want_source;  /* a reader asks for a scan */
	sd_event_source *producers_timer_source; /* a scan deferred by the interval */
	LoadWatch *load_watch; /* program loads; NULL without the kernel feature bpf_event */

	/* CPU hotplug (manager_hotplug_*()). */
	HotplugWatch *hotplug; /* kernel uevents; NULL where they cannot be had (the tick remains) */
	CpuSet cpus_parked;    /* CPUs of `cpus` that are offline: slot empty, ring drained or none yet */
	CpuSet cpus_unserved_seen; /* CPUs outside every group already reported as online */

	/* Perf counters (manager-counters.c). */
	uint32_t counters_mask;           /* the counters in place (bits PERFRELAY_COUNTER_*); 0: off */
	unsigned counters_slot;           /* the hub slot the main thread publishes "counters" events in */
	sd_event_source *counters_source; /* the interval timer */
	CgroupCounters *counters_prev;    /* every cgroup's totals at the last interval, by id */
	size_t counters_prev_n;
	uint64_t counters_prev_at; /* CLOCK_MONOTONIC ns of the last interval; 0 before the first */
	/* GetUnitCounters()' answer, made once per interval from what the interval read anyway:
	 * callers cannot make the main thread walk the table. */
	UnitCounters *unit_view;
	size_t unit_view_n;
	/* The next "counters" event's seq. It starts at CLOCK_BOOTTIME ns when the daemon starts, so
	 * it never repeats within a boot across restarts (fewer than one event per ns is made): the
	 * exporter's message ids (boot id, producer, cpu, seq) stay unique (docs/counters.md). */
	uint64_t counters_seq;
	uint64_t counters_events;          /* "counters" events published */
	uint64_t counters_intervals;       /* intervals read */
	uint64_t counters_cgroups_removed; /* removed cgroups taken out of the table */

	Captures *captures; /* packet captures (manager-capture.c); NULL if they could not be set up */
};

/* manager.c */
void manager_flush(Manager *m); /* the flush loop: every client's consumer, until nothing is left */
RingOptions manager_ring_options(const Manager *m);
/* The unit of cgroup `id` (written to buf, NULL when it has none): as it is, or, when it cannot
 * be resolved (removed), as the cgroup watch saw it; *ret_gone (may be NULL) says whether it
 * was removed; *ret_owner (may be NULL) the user it belongs to ((uid_t) -1: the system, or
 * unknown). Main thread. */
const char *manager_cgroup_unit(Manager *m, uint64_t id, char *buf, size_t size, bool *ret_gone, uid_t *ret_owner);
void manager_park_offline_cpus(Manager *m, const CpuSet *online, CpuSet *groups, size_t n_groups);

/* manager-bus.c: the bus connection, with the manager as its BusHost */
int manager_setup_bus(Manager *m);

/* manager-health.c: STATUS= and WATCHDOG=1 every second */
int manager_setup_health(Manager *m);
#if PERFRELAY_FAULT_INJECTION
int manager_on_fault_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata);
#endif

/* manager-hotplug.c */
void manager_hotplug_setup(Manager *m);
void manager_hotplug_tick(Manager *m);

/* manager-producers.c */
int manager_setup_producers(Manager *m);
/* Scans for producers (unless `force`, at most once per interval: else the scan is deferred to
 * the interval's end, and 0 returned) and publishes what is new to the readers: 1 if something
 * was, 0 if not. */
int manager_scan_producers(Manager *m, bool force);
void manager_producers_tick(Manager *m);
void manager_free_producers(Manager *m); /* after the readers stopped */
void manager_producers_cpu_online(Manager *m, unsigned cpu);

/* manager-counters.c */
int manager_setup_counters(Manager *m);
void manager_counters_cpu_online(Manager *m, unsigned cpu);
void manager_free_counters(Manager *m);
int manager_unit_counters(Manager *m, UnitCounters **ret, size_t *ret_n);

/* manager-capture.c */
void manager_setup_captures(Manager *m);
/* On failure *ret_error (if given) says why, for the D-Bus error. */
int manager_start_capture(Manager *m, const CaptureRequest *req, uint32_t *ret_id, char **ret_error);
int manager_stop_capture(Manager *m, uint32_t id);

/* manager-recorder.c */
void manager_setup_recorder(Manager *m);
int manager_snapshot(Manager *m, uint64_t since_ns, uint64_t until_ns, const Subscription *filter, int *ret_fd);

/* manager-reload.c */
/* Re-reads the configuration (SIGHUP, D-Bus Reload()): applies Probes=, the [Socket] limits and
 * [Bus]; settings read only at start are kept and named in a warning. On a configuration error
 * nothing changes, and *ret_error (if given) gets the "FILE:LINE: message" text. If a probe
 * cannot be attached or detached, everything else is applied and the error returned without a
 * text. */
int manager_reload(Manager *m, char **ret_error);
/* Attaches or detaches a built-in probe until the next reload or restart (which apply
 * Probes= again). */
int manager_set_probe_enabled(Manager *m, unsigned probe, bool enabled);

/* manager-stats.c */
/* Where the counters are now: for stats_snapshot() and stats_totals(). */
void manager_stats_sources(Manager *m, StatsSources *ret);
void manager_log_stats(Manager *m);

/* manager-stdout.c: --stdout */
int manager_setup_stdout(Manager *m);
void manager_finish_stdout(Manager *m);
