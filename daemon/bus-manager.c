/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The org.perfrelay1.Manager object on /org/perfrelay1: its properties, its methods (stats,
 * clients, probes, reload) and its vtable. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "perfrelay-config.h"

#include "bus-internal.h"
#include "log.h"
#include "stats.h"

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
	Bus *b = userdata;

	if (streq(property, "Version"))
		return sd_bus_message_append(reply, "s", PERFRELAY_VERSION_STRING);
	if (streq(property, "State"))
		return sd_bus_message_append(reply, "s", b->host.state(b->host.userdata));
	if (streq(property, "PinPath"))
		return sd_bus_message_append(reply, "s", b->config->pin_path);
	if (streq(property, "Cpus"))
		return sd_bus_message_append(reply, "u", (uint32_t) cpuset_count(b->host.cpus));
	if (streq(property, "Readers"))
		return sd_bus_message_append(reply, "u", (uint32_t) bus_stats_sources(b).n_readers);
	if (streq(property, "StartedAt"))
		return sd_bus_message_append(reply, "t", b->host.started_at);
	return -EINVAL; /* a vtable entry without a case here */
}

static int property_get_probes(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;
	Probes *p = b->host.probes;
	int r;

	r = sd_bus_message_open_container(reply, 'a', "s");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(p, i)) {
			r = sd_bus_message_append(reply, "s", probe_to_string(i));
			if (r < 0)
				return r;
		}
	return sd_bus_message_close_container(reply);
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
	Bus *b = userdata;
	const Features *f = b->host.features;
	int r;

	r = sd_bus_message_open_container(reply, 'a', "(sbbss)");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _FEATURE_MAX; i++) {
		r = sd_bus_message_append(
			reply,
			"(sbbss)",
			feature_to_string(i),
			(int) features_has(f, i),
			(int) feature_required(i),
			feature_since(i),
			feature_without(i));
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
	Bus *b = userdata;
	bool failures = streq(property, "ProducerFailures");
	StatsSources src = bus_stats_sources(b);
	StatsTotals c;
	int r;

	r = stats_totals(&src, failures, &c);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the producers' counters under %s: %m", b->config->pin_path);
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
	Bus *b = userdata;
	int r;

	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(tuusttt)");
	if (r < 0)
		return r;
	r = server_foreach_client(
		b->host.server,
		append_client,
		&(ClientListing){ .reply = reply, .viewer = bus_viewer(message) });
	if (r < 0)
		return r;
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_list_probes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	Bus *b = userdata;
	Probes *p = b->host.probes;
	int r;

	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(sbt)");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		struct perfrelay_counters sum;

		r = probes_read_counters(p, probe_producer(i), &sum, NULL);
		if (r < 0)
			return sd_bus_error_set_errnof(
				error, r, "Failed to read the counters of probe %s: %m", probe_to_string(i));
		r = sd_bus_message_append(
			reply, "(sbt)", probe_to_string(i), (int) probes_is_enabled(p, i), sum.attempts);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_set_probe_enabled(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	const char *name;
	int enabled, probe, r;

	r = sd_bus_message_read(message, "sb", &name, &enabled);
	if (r < 0)
		return r;
	r = bus_check_root(message, "SetProbeEnabled", error);
	if (r < 0)
		return r;
	probe = probe_from_string(name);
	if (probe < 0)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_INVALID_ARGS,
			"Unknown probe \"%s\" (known: exec exit fork open connect)",
			name);
	r = b->host.set_probe_enabled(b->host.userdata, (unsigned) probe, enabled);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to %s probe %s: %m", enabled ? "attach" : "detach", name);
	return sd_bus_reply_method_return(message, NULL);
}

static int method_disconnect_client(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	uint64_t id;
	int r;

	r = sd_bus_message_read(message, "t", &id);
	if (r < 0)
		return r;
	r = bus_check_root(message, "DisconnectClient", error);
	if (r < 0)
		return r;
	r = server_disconnect_client(b->host.server, id);
	if (r == -ESRCH)
		return sd_bus_error_setf(
			error, BUS_ERROR_NO_SUCH_CLIENT, "No socket client with id %" PRIu64, id);
	if (r < 0)
		return r;
	return sd_bus_reply_method_return(message, NULL);
}

static int method_reload(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	_cleanup_free_ char *text = NULL;
	int r;

	r = bus_check_root(message, "Reload", error);
	if (r < 0)
		return r;
	log_info("Reload requested by %s", strna(sd_bus_message_get_sender(message)));
	r = b->host.reload(b->host.userdata, &text);
	/* A file that cannot be read or parsed: nothing changed, and the text says where. */
	if (r < 0 && text)
		return sd_bus_error_setf(error, BUS_ERROR_INVALID_CONFIG, "%s", text);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Reloaded, but attaching or detaching a probe for Probes= failed: %m");
	return sd_bus_reply_method_return(message, NULL);
}

/* The manager object --------------------------------------------------------------------- */

#define COUNTER_FLAGS SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE

/* clang-format off */
const sd_bus_vtable bus_manager_vtable[] = {
	SD_BUS_VTABLE_START(0),

	SD_BUS_PROPERTY("Version", "s", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("State", "s", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	SD_BUS_PROPERTY("PinPath", "s", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Cpus", "u", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Readers", "u", property_get_scalar, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Probes", "as", property_get_probes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
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
	                         bus_method_get_cpu_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetReaderStats",
	                         NULL, "",
	                         "a(uauttt)", SD_BUS_PARAM(readers),
	                         bus_method_get_reader_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetStats",
	                         NULL, "",
	                         "a{sv}", SD_BUS_PARAM(stats),
	                         bus_method_get_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("ListProducers",
	                         NULL, "",
	                         "aa{sv}", SD_BUS_PARAM(producers),
	                         bus_method_list_producers, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Snapshot",
	                         "a{sv}", SD_BUS_PARAM(options),
	                         "h", SD_BUS_PARAM(events),
	                         bus_method_snapshot, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetUnitCounters",
	                         NULL, "",
	                         "a(sta{st})", SD_BUS_PARAM(units),
	                         bus_method_get_unit_counters, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("StartCapture",
	                         "a{sv}", SD_BUS_PARAM(options),
	                         "o", SD_BUS_PARAM(capture),
	                         bus_method_start_capture, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("StopCapture",
	                         "o", SD_BUS_PARAM(capture),
	                         NULL, "",
	                         bus_method_stop_capture, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("ListClients",
	                         NULL, "",
	                         "a(tuusttt)", SD_BUS_PARAM(clients),
	                         method_list_clients, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("ListProbes",
	                         NULL, "",
	                         "a(sbt)", SD_BUS_PARAM(probes),
	                         method_list_probes, SD_BUS_VTABLE_UNPRIVILEGED),
	/* UNPRIVILEGED only keeps sd-bus from applying its own CAP_SYS_ADMIN check: these three
	 * check the sender's uid themselves (bus_check_root()). */
	SD_BUS_METHOD_WITH_NAMES("SetProbeEnabled",
	                         "sb", SD_BUS_PARAM(name) SD_BUS_PARAM(enabled),
	                         NULL, "",
	                         method_set_probe_enabled, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("DisconnectClient",
	                         "t", SD_BUS_PARAM(id),
	                         NULL, "",
	                         method_disconnect_client, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Reload",
	                         NULL, "",
	                         NULL, "",
	                         method_reload, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Subscribe",
	                         "a{sv}", SD_BUS_PARAM(filter),
	                         "o", SD_BUS_PARAM(monitor),
	                         bus_method_subscribe, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Unsubscribe",
	                         "o", SD_BUS_PARAM(monitor),
	                         NULL, "",
	                         bus_method_unsubscribe, SD_BUS_VTABLE_UNPRIVILEGED),

	SD_BUS_SIGNAL_WITH_NAMES("EventsLost", "ut", SD_BUS_PARAM(cpu) SD_BUS_PARAM(count), 0),

	SD_BUS_VTABLE_END
};
/* clang-format on */
