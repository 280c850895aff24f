/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager as the bus glue sees it (bus.h, BusHost): what it may read and call, and the bus
 * connection made with it. */
#include "perfrelay-config.h"

#include "manager-internal.h"

static const char *const manager_state_table[_MANAGER_STATE_MAX] = {
	[MANAGER_STARTING] = "starting",
	[MANAGER_RUNNING] = "running",
	[MANAGER_STOPPING] = "stopping",
};

static const char *manager_state_to_string(ManagerState s) {
	return (unsigned) s < _MANAGER_STATE_MAX ? manager_state_table[s] : NULL;
}

/* What the bus glue may do with the manager (BusHost). */
static const char *bus_host_state(void *userdata) {
	Manager *m = userdata;

	return manager_state_to_string(m->state);
}

static void bus_host_stats_sources(void *userdata, StatsSources *ret) {
	manager_stats_sources(userdata, ret);
}

static int bus_host_set_probe_enabled(void *userdata, unsigned probe, bool enabled) {
	return manager_set_probe_enabled(userdata, probe, enabled);
}

static int bus_host_reload(void *userdata, char **ret_error) {
	return manager_reload(userdata, ret_error);
}

static int bus_host_snapshot(
	void *userdata, uint64_t since_ns, uint64_t until_ns, const Subscription *filter, int *ret_fd) {
	return manager_snapshot(userdata, since_ns, until_ns, filter, ret_fd);
}

static int bus_host_unit_counters(void *userdata, UnitCounters **ret, size_t *ret_n) {
	return manager_unit_counters(userdata, ret, ret_n);
}

static int bus_host_start_capture(void *userdata, const CaptureRequest *req, uint32_t *ret_id, char **ret_error) {
	return manager_start_capture(userdata, req, ret_id, ret_error);
}

static int bus_host_stop_capture(void *userdata, uint32_t id) {
	return manager_stop_capture(userdata, id);
}

static int bus_host_capture_info(void *userdata, uint32_t id, CaptureSummary *ret) {
	Manager *m = userdata;

	return m->captures ? captures_get(m->captures, id, ret) : -ENOENT;
}

static const ProducerScan *bus_host_producers(void *userdata) {
	Manager *m = userdata;

	(void) manager_scan_producers(m, false);
	return decoders_current(m->decoders);
}

int manager_setup_bus(Manager *m) {
	int r;

	r = bus_new(
		&(const BusHost){
			.userdata = m,
			.started_at = m->started_at,
			.features = m->features,
			.cpus = &m->cpus,
			.probes = m->probes,
			.hub = m->hub,
			.server = m->server,
			.state = bus_host_state,
			.stats_sources = bus_host_stats_sources,
			.set_probe_enabled = bus_host_set_probe_enabled,
			.reload = bus_host_reload,
			.producers = bus_host_producers,
			.snapshot = bus_host_snapshot,
			.unit_counters = bus_host_unit_counters,
			.start_capture = bus_host_start_capture,
			.stop_capture = bus_host_stop_capture,
			.capture_info = bus_host_capture_info,
		},
		m->event,
		m->config,
		&m->bus);
	return r;
}
