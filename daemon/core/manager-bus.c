/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager on the system bus: the org.perfrelay1.Manager object's own part (its properties,
 * the counters' PropertiesChanged and EventsLost once a second, ListClients(),
 * DisconnectClient(), Reload(); GetStats() and its views are in manager-bus-stats.c), and the
 * bus connection made with every feature's part. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "perfrelay-config.h"

#include "base/log.h"
#include "core/manager-internal.h"
#include "core/stats.h"
#include "time-util.h"

/* Counters are compared, and PropertiesChanged and EventsLost emitted, at most this often. */
#define STATS_INTERVAL_USEC USEC_PER_SEC

/* Manager properties ------------------------------------------------------------------------ */

/* The scalar properties, by name: Version, State, PinPath, Cpus, Readers, StartedAt. */
static int property_get_scalar(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Manager *m = userdata;

	if (streq(property, "Version"))
		return sd_bus_message_append(reply, "s", PERFRELAY_VERSION_STRING);
	if (streq(property, "State"))
		return sd_bus_message_append(reply, "s", manager_state_to_string(m->state));
	if (streq(property, "PinPath"))
		return sd_bus_message_append(reply, "s", m->config->pin_path);
	if (streq(property, "Cpus"))
		return sd_bus_message_append(reply, "u", (uint32_t) cpuset_count(&m->cpus));
	if (streq(property, "Readers"))
		return sd_bus_message_append(reply, "u", (uint32_t) m->n_readers);
	if (streq(property, "StartedAt"))
		return sd_bus_message_append(reply, "t", m->started_at);
	return -EINVAL; /* a vtable entry without a case here */
}

/* a(sbbss): name, available, required, first kernel version with it, what is off without it. */
static int property_get_kernel_features(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Manager *m = userdata;
	const KernelFeatures *f = m->kernel;
	int r;

	r = sd_bus_message_open_container(reply, 'a', "(sbbss)");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _FEATURE_MAX; i++) {
		r = sd_bus_message_append(
			reply,
			"(sbbss)",
			kernel_feature_to_string(i),
			(int) kernel_features_has(f, i),
			(int) kernel_feature_required(i),
			kernel_feature_since(i),
			kernel_feature_without(i));
		if (r < 0)
			return r;
	}
	return sd_bus_message_close_container(reply);
}

/* The counters, by property name: one getter, so that each name is spelled once here. */
static int property_get_counter(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Manager *m = userdata;
	bool failures = streq(property, "ProducerFailures");
	StatsSources src;
	StatsTotals c;
	int r;

	manager_stats_sources(m, &src);
	r = stats_totals(&src, failures, &c);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the producers' counters under %s: %m", m->config->pin_path);
	if (streq(property, "Clients"))
		return sd_bus_message_append(reply, "u", (uint32_t) MIN(c.clients, (uint64_t) UINT32_MAX));
	if (streq(property, "EventsReceived"))
		return sd_bus_message_append(reply, "t", c.events_received);
	if (streq(property, "EventsDelivered"))
		return sd_bus_message_append(reply, "t", c.events_delivered);
	if (streq(property, "EventsLost"))
		return sd_bus_message_append(reply, "t", c.events_lost);
	if (failures)
		return sd_bus_message_append(reply, "t", c.producer_failures);
	if (streq(property, "ClientDrops"))
		return sd_bus_message_append(reply, "t", c.client_drops);
	return -EINVAL; /* a vtable entry without a case here */
}

/* Manager methods --------------------------------------------------------------------------- */

typedef struct ClientListing {
	sd_bus_message *reply;
	uid_t viewer;
} ClientListing;

static int append_client(const ServerClientInfo *c, void *userdata) {
	ClientListing *l = userdata;
	sd_bus_message *reply = l->reply;
	_cleanup_free_ char *filter = NULL;
	int r;

	if (!bus_viewer_sees(l->viewer, c->uid))
		return 0;
	r = subscription_to_json(c->sub, &filter);
	if (r < 0)
		return r;
	return sd_bus_message_append(
		reply,
		"(tuusttt)",
		c->id,
		(uint32_t) c->uid,
		(uint32_t) c->pid,
		filter,
		c->stats.sent,
		c->stats.dropped,
		c->stats.queued_bytes);
}

static int method_list_clients(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	Manager *m = userdata;
	SubscriptionAccess access;
	uid_t viewer;
	int r;

	r = bus_require_read(m->bus, message, "ListClients", &viewer, &access, error);
	if (r < 0)
		return r;
	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(tuusttt)");
	if (r < 0)
		return r;
	r = server_foreach_client(
		m->server, append_client, &(ClientListing){ .reply = reply, .viewer = viewer });
	if (r < 0)
		return r;
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_disconnect_client(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Manager *m = userdata;
	uint64_t id;
	int r;

	r = sd_bus_message_read(message, "t", &id);
	if (r < 0)
		return r;
	r = bus_check_root(message, "DisconnectClient", error);
	if (r < 0)
		return r;
	r = server_disconnect_client(m->server, id);
	if (r == -ESRCH)
		return sd_bus_error_setf(
			error, BUS_ERROR_NO_SUCH_CLIENT, "No socket client with id %" PRIu64, id);
	if (r < 0)
		return r;
	return sd_bus_reply_method_return(message, NULL);
}

static int method_reload(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Manager *m = userdata;
	_cleanup_free_ char *text = NULL;
	int r;

	r = bus_check_root(message, "Reload", error);
	if (r < 0)
		return r;
	log_info("Reload requested by %s", strna(sd_bus_message_get_sender(message)));
	r = manager_reload(m, &text);
	/* A file that cannot be read or parsed: nothing changed, and the text says where. */
	if (r < 0 && text)
		return sd_bus_error_setf(error, BUS_ERROR_INVALID_CONFIG, "%s", text);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Reloaded, but a feature failed to apply the new configuration: %m");
	return sd_bus_reply_method_return(message, NULL);
}

/* Counters and loss, once a second ---------------------------------------------------------- */

/* Takes every ring's lost count; `emit`: tells what grew since the last call in an EventsLost
 * signal per CPU. */
static void manager_take_events_lost(Manager *m, bool emit) {
	sd_bus *bus = bus_connection(m->bus);
	size_t idx = 0;

	for (size_t i = 0; i < m->n_readers; i++) {
		const Reader *rd = m->readers[i];

		for (size_t k = 0; k < reader_n_rings(rd) && idx < m->n_rings; k++, idx++) {
			uint64_t lost = STAT_LOAD(reader_cpu_stats(rd, k)->lost);
			uint32_t cpu = reader_slot_cpu(rd, k);
			int r;

			if (lost <= m->lost_signalled[idx])
				continue;
			if (emit && bus) {
				r = sd_bus_emit_signal(
					bus,
					BUS_PATH,
					BUS_INTERFACE_MANAGER,
					"EventsLost",
					"ut",
					cpu,
					lost - m->lost_signalled[idx]);
				if (r < 0) {
					log_debug_errno(r, "Failed to emit EventsLost for CPU %u: %m", cpu);
					continue;
				}
			}
			m->lost_signalled[idx] = lost;
		}
	}
}

static int on_stats_timer(sd_event_source *es, uint64_t usec, void *userdata) {
	Manager *m = userdata;
	StatsSources src;
	StatsTotals c;
	char *names[8];
	size_t n = 0;
	int r;

	manager_stats_sources(m, &src);
	if (stats_totals(&src, true, &c) < 0)
		c.producer_failures = m->bus_last.producer_failures; /* unreadable now: not a change */
#define CHANGED(field, name)                        \
	do {                                        \
		if (c.field != m->bus_last.field)   \
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
		bus_emit_manager_changed(m->bus, names);
		m->bus_last = c;
	}
	manager_take_events_lost(m, true);

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

/* The manager object --------------------------------------------------------------------- */

#define COUNTER_FLAGS SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE

/* clang-format off */
static const sd_bus_vtable manager_vtable[] = {
	SD_BUS_VTABLE_START(0),

	SD_BUS_PROPERTY("Version", "s", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("State", "s", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	SD_BUS_PROPERTY("PinPath", "s", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Cpus", "u", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Readers", "u", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	/* The counters: PropertiesChanged from on_stats_timer(), at most once a second. */
	SD_BUS_PROPERTY("Clients", "u", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("EventsReceived", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("EventsDelivered", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("EventsLost", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("ProducerFailures", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("ClientDrops", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("StartedAt", "t", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("KernelFeatures", "a(sbbss)", property_get_kernel_features, 0, SD_BUS_VTABLE_PROPERTY_CONST),

	SD_BUS_METHOD_WITH_NAMES("GetCpuStats",
	                         NULL, "",
	                         "a(uuttttttt)", SD_BUS_PARAM(cpus),
	                         manager_method_get_cpu_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetReaderStats",
	                         NULL, "",
	                         "a(uauttt)", SD_BUS_PARAM(readers),
	                         manager_method_get_reader_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetStats",
	                         NULL, "",
	                         "a{sv}", SD_BUS_PARAM(stats),
	                         manager_method_get_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("ListClients",
	                         NULL, "",
	                         "a(tuusttt)", SD_BUS_PARAM(clients),
	                         method_list_clients, SD_BUS_VTABLE_UNPRIVILEGED),
	/* UNPRIVILEGED only keeps sd-bus from applying its own CAP_SYS_ADMIN check: these two
	 * check the sender's uid themselves (bus_check_root()). */
	SD_BUS_METHOD_WITH_NAMES("DisconnectClient",
	                         "t", SD_BUS_PARAM(id),
	                         NULL, "",
	                         method_disconnect_client, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Reload",
	                         NULL, "",
	                         NULL, "",
	                         method_reload, SD_BUS_VTABLE_UNPRIVILEGED),

	SD_BUS_SIGNAL_WITH_NAMES("EventsLost", "ut", SD_BUS_PARAM(cpu) SD_BUS_PARAM(count), 0),

	SD_BUS_VTABLE_END
};
/* clang-format on */

static void manager_bus_part_gone(void *userdata) {
	Manager *m = userdata;

	m->bus_stats_source = sd_event_source_disable_unref(m->bus_stats_source);
}

static void feature_bus_gone(void *userdata) {
	Feature *f = userdata;

	f->vtable->bus_gone(f);
}

int manager_setup_bus(Manager *m) {
	StatsSources src;
	ApiOptions api = manager_api_options(m->config);
	int r;

	r = bus_new(m->event, &api, m->hub, server_users(m->server), &m->bus);
	if (r < 0 || !m->bus)
		return r;
	for (size_t i = 0; i < m->n_readers; i++)
		m->n_rings += reader_n_rings(m->readers[i]);
	m->lost_signalled = calloc(m->n_rings ?: 1, sizeof(uint64_t));
	if (!m->lost_signalled)
		return log_oom();
	r = bus_add_part(
		m->bus,
		&(const BusPart){ .vtable = manager_vtable, .userdata = m, .gone = manager_bus_part_gone });
	for (size_t i = 0; r >= 0 && i < m->n_features; i++) {
		Feature *f = m->features[i];

		if (f->vtable->bus_vtable || f->vtable->bus_gone)
			r = bus_add_part(
				m->bus,
				&(const BusPart){
					.vtable = f->vtable->bus_vtable,
					.userdata = f,
					.gone = f->vtable->bus_gone ? feature_bus_gone : NULL,
				});
	}
	if (r < 0)
		return log_error_errno(r, "Failed to publish %s on the system bus: %m", BUS_PATH);

	manager_stats_sources(m, &src);
	(void) stats_totals(&src, true, &m->bus_last);
	manager_take_events_lost(m, false);
	r = sd_event_add_time_relative(
		m->event,
		&m->bus_stats_source,
		CLOCK_MONOTONIC,
		STATS_INTERVAL_USEC,
		10 * USEC_PER_MSEC,
		on_stats_timer,
		m);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the D-Bus counter timer: %m");
	bus_take_name(m->bus);
	return 0;
}

void manager_free_bus(Manager *m) {
	m->bus = bus_free(m->bus); /* every part is told first: the timer goes */
	m->bus_stats_source = sd_event_source_disable_unref(m->bus_stats_source);
	free(m->lost_signalled);
	m->lost_signalled = NULL;
}

void manager_emit_state_changed(Manager *m) {
	bus_emit_manager_changed(m->bus, STRV_MAKE("State"));
}
