/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The D-Bus glue of the manager (docs/dbus.md): org.perfrelay1.Manager on /org/perfrelay1 and one
 * org.perfrelay1.Monitor object per event subscriber, on the system bus. Main thread only:
 * reader threads never see sd-bus; bus subscribers get their events through ordinary hub clients
 * whose frames the main thread takes from the hub (hub_client_consume()) and sends as signals.
 * The parts: bus.c (connection, timers), bus-manager.c, bus-monitor.c, bus-stats.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "captures.h"
#include "config.h"
#include "cpuset.h"
#include "hub.h"
#include "kernelfeatures.h"
#include "perfcount.h"
#include "probes.h"
#include "producers.h"
#include "server.h"
#include "stats.h"

typedef struct Bus Bus;

#define BUS_NAME                  "org.perfrelay1"
#define BUS_PATH                  "/org/perfrelay1"
#define BUS_MONITOR_PATH_PREFIX   "/org/perfrelay1/monitor"
#define BUS_INTERFACE_MANAGER     "org.perfrelay1.Manager"
#define BUS_INTERFACE_MONITOR     "org.perfrelay1.Monitor"
#define BUS_INTERFACE_CAPTURE     "org.perfrelay1.Capture"
#define BUS_CAPTURE_PATH_PREFIX   "/org/perfrelay1/capture"
#define BUS_ERROR_NO_SUCH_CAPTURE "org.perfrelay1.Error.NoSuchCapture"
#define BUS_ERROR_INVALID_CONFIG  "org.perfrelay1.Error.InvalidConfig"
#define BUS_ERROR_NO_SUCH_CLIENT  "org.perfrelay1.Error.NoSuchClient"

typedef struct BusStats {
	uint64_t subscribers; /* monitor objects now */
	uint64_t delivered;   /* Event signals sent, subscribers gone included */
	uint64_t dropped;     /* events not sent: over BusEventsPerSecond=, lost in the hub queue, or
			       * refused by sd-bus; subscribers gone included */
} BusStats;

/* All the bus glue sees of the daemon it serves; the manager fills it in (the bus never includes
 * manager.h). Pointers stay valid until bus_free(); the callbacks get `userdata`. */
typedef struct BusHost {
	void *userdata;
	uint64_t started_at; /* CLOCK_REALTIME usec */
	const Features *features;
	const CpuSet *cpus; /* CPUs with a ring */
	Probes *probes;
	Hub *hub;
	Server *server;
	const char *(*state)(void *userdata); /* "starting", "running", "stopping" */
	/* Where the counters are now (stats.h). */
	void (*stats_sources)(void *userdata, StatsSources *ret);
	/* Attaches or detaches a built-in probe until the next reload or restart. */
	int (*set_probe_enabled)(void *userdata, unsigned probe, bool enabled);
	/* Re-reads the configuration; on a configuration error *ret_error gets "FILE:LINE: message". */
	int (*reload)(void *userdata, char **ret_error);
	/* The third-party producers now (scanned again unless that was just done; NULL before the
	 * first scan); valid until the next call. */
	const ProducerScan *(*producers)(void *userdata);
	/* The flight recorder's window, filtered, as JSON lines in a new file (*ret_fd, at offset
	 * 0); -ENODEV when the recorder is off. */
	int (*snapshot)(
		void *userdata, uint64_t since_ns, uint64_t until_ns, const Subscription *filter, int *ret_fd);
	/* Every cgroup's perf counter totals (*ret malloc'd, NULL and 0 when counters are off). */
	int (*unit_counters)(void *userdata, UnitCounters **ret, size_t *ret_n);
	/* Packet captures (docs/capture.md); start_capture's *ret_error says why it refused. */
	int (*start_capture)(void *userdata, const CaptureRequest *req, uint32_t *ret_id, char **ret_error);
	int (*stop_capture)(void *userdata, uint32_t id);
	int (*capture_info)(void *userdata, uint32_t id, CaptureSummary *ret);
} BusHost;

/* Connects to the system bus ($DBUS_SYSTEM_BUS_ADDRESS or the default socket), publishes the
 * manager object, takes the name and attaches to `event`. Without a bus it logs one warning
 * and returns 0 with *ret = NULL: the daemon runs on without D-Bus. Failing to take the name
 * is a warning too (the object stays reachable by the unique name). */
int bus_new(const BusHost *host, sd_event *event, const Config *config, Bus **ret);
/* Removes every monitor (their hub clients first), releases the name and closes. Accepts NULL. */
Bus *bus_free(Bus *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(Bus *, bus_free);

/* [Bus] and the subscriber limits of [Socket] apply from now on. Accepts NULL. */
void bus_set_config(Bus *b, const Config *config);

/* PropertiesChanged for State and Probes, emitted when they change. Accept NULL. */
void bus_emit_state_changed(Bus *b);
void bus_emit_probes_changed(Bus *b);
/* Writes queued messages out, for the last ones before the daemon exits. Accepts NULL. */
void bus_flush(Bus *b);


void bus_get_stats(const Bus *b, BusStats *ret); /* zeros for NULL */
