/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon on the system bus: the connection and the name, the counters' PropertiesChanged
 * and EventsLost signals once a second, losing the bus, and the life cycle. The objects are in
 * bus-manager.c and bus-monitor.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "bus-internal.h"
#include "log.h"
#include "stats.h"

uint64_t bus_now(Bus *b) {
	uint64_t t = 0;

	(void) sd_event_now(b->event, CLOCK_MONOTONIC, &t);
	return t;
}

int bus_sender_euid(sd_bus_message *message, uid_t *ret) {
	_cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
	int r;

	r = sd_bus_query_sender_creds(message, SD_BUS_CREDS_EUID | SD_BUS_CREDS_AUGMENT, &creds);
	if (r >= 0)
		r = sd_bus_creds_get_euid(creds, ret);
	return r;
}

/* Methods that change state need root. The bus policy says so too; this is the check that does
 * not depend on the policy file being installed right. No uid, no access. */
int bus_check_root(sd_bus_message *message, const char *what, sd_bus_error *error) {
	uid_t euid = (uid_t) -1; /* nobody until the bus says otherwise */
	int r;

	r = bus_sender_euid(message, &euid);
	if (r < 0) {
		log_debug_errno(
			r,
			"%s from %s: cannot determine the caller's uid (%m), refusing",
			what,
			strna(sd_bus_message_get_sender(message)));
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root; the caller's user id could not be determined",
			what);
	}
	if (euid != 0)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root (the caller is uid %u)",
			what,
			(unsigned) euid);
	return 0;
}

uid_t bus_viewer(sd_bus_message *message) {
	uid_t uid;

	return bus_sender_euid(message, &uid) >= 0 ? uid : BUS_VIEWER_NOBODY;
}

/* Counters and loss, once a second ---------------------------------------------------------- */

/* Takes every ring's lost count; `emit`: tells what grew since the last call in an EventsLost
 * signal per CPU. */
static void bus_take_events_lost(Bus *b, bool emit) {
	StatsSources src = bus_stats_sources(b);
	size_t idx = 0;

	for (size_t i = 0; i < src.n_readers; i++) {
		const Reader *rd = src.readers[i];

		for (size_t k = 0; k < reader_n_rings(rd) && idx < b->n_rings; k++, idx++) {
			uint64_t lost = STAT_LOAD(reader_cpu_stats(rd, k)->lost);
			uint32_t cpu = reader_slot_cpu(rd, k);
			int r;

			if (lost <= b->lost_signalled[idx])
				continue;
			if (emit) {
				r = sd_bus_emit_signal(
					b->bus,
					BUS_PATH,
					BUS_INTERFACE_MANAGER,
					"EventsLost",
					"ut",
					cpu,
					lost - b->lost_signalled[idx]);
				if (r < 0) {
					log_debug_errno(r, "Failed to emit EventsLost for CPU %u: %m", cpu);
					continue;
				}
			}
			b->lost_signalled[idx] = lost;
		}
	}
}

static int on_stats_timer(sd_event_source *es, uint64_t usec, void *userdata) {
	Bus *b = userdata;
	StatsSources src = bus_stats_sources(b);
	StatsTotals c;
	char *names[8];
	size_t n = 0;
	int r;

	if (stats_totals(&src, true, &c) < 0)
		c.producer_failures = b->last.producer_failures; /* unreadable now: not a change */
#define CHANGED(field, name)                        \
	do {                                        \
		if (c.field != b->last.field)       \
			names[n++] = (char *) name; \
	} while (0)
	CHANGED(clients, "Clients");
	CHANGED(events_received, "EventsReceived");
	CHANGED(events_delivered, "EventsDelivered");
	CHANGED(events_lost, "EventsLost");
	CHANGED(producer_failures, "ProducerFailures");
	CHANGED(client_drops, "ClientDrops");
#undef CHANGED
	names[n] = NULL;
	if (n > 0) {
		r = sd_bus_emit_properties_changed_strv(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, names);
		if (r < 0)
			log_debug_errno(r, "Failed to emit PropertiesChanged for the counters: %m");
		else
			b->last = c;
	}
	bus_take_events_lost(b, true);

	r = sd_event_source_set_time_relative(es, STATS_INTERVAL_USEC);
	if (r >= 0)
		r = sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
	if (r < 0)
		log_warning_errno(
			r,
			"Failed to re-arm the D-Bus counter timer, counters no longer emit "
			"PropertiesChanged: %m");
	return 0;
}

/* Losing the bus ------------------------------------------------------------------------- */

static int on_bus_gone(sd_event_source *es, void *userdata) {
	Bus *b = userdata;

	bus_monitors_free_all(b);
	bus_captures_end_all(b); /* their requesters cannot reach us any more */
	b->stats_timer = sd_event_source_disable_unref(b->stats_timer);
	b->gone_source = sd_event_source_disable_unref(b->gone_source);
	(void) sd_bus_detach_event(b->bus);
	return 0;
}

/* sd-bus reports a lost connection as a local Disconnected message. The cleanup cannot run in
 * sd-bus's own dispatch, so it is deferred. */
static int on_bus_message(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	int r;

	if (b->gone || !sd_bus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected"))
		return 0;
	b->gone = true;
	log_warning(
		"Lost the connection to the system bus: the D-Bus interface and its %zu subscribers are gone "
		"until perfrelayd restarts; the event socket keeps working",
		b->n_subscribers);
	r = sd_event_add_defer(b->event, &b->gone_source, on_bus_gone, b);
	if (r < 0)
		log_warning_errno(r, "Failed to schedule the D-Bus cleanup: %m");
	return 0;
}

/* Life cycle ------------------------------------------------------------------------------ */

int bus_new(const BusHost *host, sd_event *event, const Config *config, Bus **ret) {
	_cleanup_(bus_freep) Bus *b = NULL;
	StatsSources src;
	int r;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->host = *host;
	b->event = sd_event_ref(event);
	b->config = config;
	src = bus_stats_sources(b);
	for (size_t i = 0; i < src.n_readers; i++)
		b->n_rings += reader_n_rings(src.readers[i]);
	b->lost_signalled = calloc(b->n_rings ?: 1, sizeof(uint64_t));
	if (!b->lost_signalled)
		return -ENOMEM;

	r = sd_bus_open_system(&b->bus);
	if (r < 0) {
		const char *address = getenv("DBUS_SYSTEM_BUS_ADDRESS");

		log_warning_errno(
			r,
			"Cannot connect to the system bus (%s): %m; running without D-Bus (no "
			"org.perfrelay1, no perfrelayctl status), the event socket works as usual",
			address ?: "unix:path=/run/dbus/system_bus_socket");
		*ret = NULL;
		return 0;
	}
	(void) sd_bus_set_exit_on_disconnect(b->bus, false);

	r = sd_bus_add_filter(b->bus, NULL, on_bus_message, b);
	if (r >= 0)
		r = sd_bus_add_object_vtable(
			b->bus, NULL, BUS_PATH, BUS_INTERFACE_MANAGER, bus_manager_vtable, b);
	if (r < 0)
		return log_error_errno(r, "Failed to publish %s on the system bus: %m", BUS_PATH);
	r = sd_bus_attach_event(b->bus, event, SD_EVENT_PRIORITY_NORMAL);
	if (r < 0)
		return log_error_errno(r, "Failed to attach the bus to the event loop: %m");

	/* Synchronous: READY=1 follows, and by then the name must answer. */
	r = sd_bus_request_name(b->bus, BUS_NAME, 0);
	if (r < 0)
		log_warning_errno(
			r,
			"Failed to acquire the name %s on the system bus (%s): %m; the object is "
			"reachable only by the unique name. Is the bus policy %s installed, or is "
			"another perfrelayd running?",
			BUS_NAME,
			r == -EEXIST ? "another connection owns it" : "refused",
			"/usr/share/dbus-1/system.d/org.perfrelay1.conf");
	else
		log_info("Acquired %s on the system bus", BUS_NAME);

	(void) stats_totals(&src, true, &b->last);
	bus_take_events_lost(b, false);
	r = sd_event_add_time_relative(
		event,
		&b->stats_timer,
		CLOCK_MONOTONIC,
		STATS_INTERVAL_USEC,
		10 * USEC_PER_MSEC,
		on_stats_timer,
		b);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the D-Bus counter timer: %m");
	*ret = TAKE_PTR(b);
	return 0;
}

Bus *bus_free(Bus *b) {
	if (!b)
		return NULL;
	bus_monitors_free_all(b);
	bus_captures_free_all(b);
	sd_event_source_disable_unref(b->stats_timer);
	sd_event_source_disable_unref(b->gone_source);
	if (b->bus) {
		(void) sd_bus_detach_event(b->bus);
		sd_bus_flush_close_unref(b->bus);
	}
	sd_event_unref(b->event);
	free(b->lost_signalled);
	free(b);
	return NULL;
}

void bus_set_config(Bus *b, const Config *config) {
	if (!b)
		return;
	b->config = config;

	bus_monitors_revoke(b, config);
}

void bus_emit_state_changed(Bus *b) {
	if (b && !b->gone)
		(void) sd_bus_emit_properties_changed(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, "State", NULL);
}

void bus_emit_probes_changed(Bus *b) {
	if (b && !b->gone)
		(void) sd_bus_emit_properties_changed(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, "Probes", NULL);
}

void bus_flush(Bus *b) {
	if (b && !b->gone)
		(void) sd_bus_flush(b->bus);
}

void bus_get_stats(const Bus *b, BusStats *ret) {
	BusStats st = {};

	if (b) {
		st.subscribers = b->n_subscribers;
		st.delivered = b->gone_delivered;
		st.dropped = b->gone_dropped;
		bus_monitors_add_stats(b, &st);
	}
	*ret = st;
}
