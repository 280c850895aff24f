/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon on the system bus: the connection and the name, the parts that publish on it,
 * losing the bus, and the life cycle. The monitors are in bus-monitor.c; who may do what is in
 * bus-access.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/bus-internal.h"
#include "base/log.h"

/* Losing the bus ------------------------------------------------------------------------- */

static void bus_parts_gone(Bus *b) {
	bus_monitors_free_all(b);
	for (size_t i = 0; i < b->n_parts; i++)
		if (b->parts[i].gone)
			b->parts[i].gone(b->parts[i].userdata);
}

static int on_bus_gone(sd_event_source *es, void *userdata) {
	Bus *b = userdata;

	bus_parts_gone(b); /* captures end: their requesters cannot reach us any more */
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

int bus_new(sd_event *event, const ApiOptions *options, Hub *hub, Users *users, Bus **ret) {
	_cleanup_(bus_freep) Bus *b = NULL;
	int r;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->event = sd_event_ref(event);
	b->o = *options;
	b->hub = hub;
	b->users = users;

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
		r = bus_add_part(b, &(const BusPart){ .vtable = bus_monitor_manager_vtable, .userdata = b });
	if (r < 0)
		return log_error_errno(r, "Failed to publish %s on the system bus: %m", BUS_PATH);
	r = sd_bus_attach_event(b->bus, event, SD_EVENT_PRIORITY_NORMAL);
	if (r < 0)
		return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
	*ret = TAKE_PTR(b);
	return 0;
}

int bus_add_part(Bus *b, const BusPart *part) {
	int r;

	if (b->n_parts >= BUS_PARTS_MAX)
		return -E2BIG;
	if (part->vtable) {
		/* Floating: the slot goes with the connection. */
		r = sd_bus_add_object_vtable(
			b->bus, NULL, BUS_PATH, BUS_INTERFACE_MANAGER, part->vtable, part->userdata);
		if (r < 0)
			return r;
	}
	b->parts[b->n_parts++] = *part;
	return 0;
}

void bus_take_name(Bus *b) {
	int r;

	if (!b)
		return;
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
}

Bus *bus_free(Bus *b) {
	if (!b)
		return NULL;
	if (!b->gone)
		bus_parts_gone(b);
	else
		bus_monitors_free_all(b);
	sd_event_source_disable_unref(b->gone_source);
	bus_senders_free(b);
	if (b->bus) {
		(void) sd_bus_detach_event(b->bus);
		sd_bus_flush_close_unref(b->bus);
	}
	sd_event_unref(b->event);
	free(b);
	return NULL;
}

sd_bus *bus_connection(Bus *b) {
	return b && !b->gone ? b->bus : NULL;
}

void bus_set_options(Bus *b, const ApiOptions *options) {
	if (!b)
		return;
	b->o = *options;

	bus_monitors_revoke(b);
}

void bus_emit_manager_changed(Bus *b, char **names) {
	int r;

	if (!b || b->gone)
		return;
	r = sd_bus_emit_properties_changed_strv(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, names);
	if (r < 0)
		log_debug_errno(r, "Failed to emit PropertiesChanged for %s: %m", names[0]);
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
		st.reads_limited = b->reads_limited;
		bus_monitors_add_stats(b, &st);
	}
	*ret = st;
}
