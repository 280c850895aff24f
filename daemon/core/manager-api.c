/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What features use of the core (manager.h): the manager's objects, the flush loop, the units of
 * cgroups and the stats snapshot. */
#include "perfrelay-config.h"

#include "core/manager-internal.h"

const Config *manager_config(const Manager *m) {
	return m->config;
}

ApiOptions manager_api_options(const Config *c) {
	return (ApiOptions){
		.socket_path = c->socket_path,
		.users = {
			.max_clients = c->max_clients,
			.max_clients_per_uid = c->max_clients_per_uid,
			.max_bytes = c->max_queue_bytes,
			.max_bytes_per_uid = c->max_queue_bytes_per_uid,
		},
		.client_queue_bytes = c->client_queue_bytes,
		.max_request_bytes = c->max_request_bytes,
		.max_json_depth = c->max_json_depth,
		.request_timeout_ms = c->request_timeout_ms,
		.shared_ring_bytes = c->shared_ring_bytes,
		.max_shared_rings = c->max_shared_rings,
		.max_shared_rings_per_uid = c->max_shared_rings_per_uid,
		.bus_events_per_second = c->bus_events_per_second,
		.allow_groups = c->allow_groups,
		.control_groups = c->control_groups,
	};
}

const ManagerOptions *manager_options(const Manager *m) {
	return &m->o;
}

sd_event *manager_event(const Manager *m) {
	return m->event;
}

Hub *manager_hub(const Manager *m) {
	return m->hub;
}

void manager_publish_notice(Manager *m, unsigned slot, const HubNotice *n, HubNoticeStats *st) {
	hub_reader_begin(m->hub, slot);
	hub_publish_notice(m->hub, slot, n, st);
	hub_reader_end(m->hub, slot);
	if (m->server)
		server_publish_notice(m->server, n, st);
}

void manager_set_history(Manager *m, const ServerHistoryOps *ops, void *userdata) {
	m->history_ops = ops;
	m->history_userdata = ops ? userdata : NULL;
	if (m->server)
		server_set_history(m->server, ops, userdata);
}

const ServerHistoryOps *manager_history(const Manager *m, void **ret_userdata) {
	*ret_userdata = m->history_userdata;
	return m->history_ops;
}

void manager_history_wake(Manager *m) {
	if (m->server)
		server_history_wake(m->server);
}

Probes *manager_probes(const Manager *m) {
	return m->probes;
}

Decoders *manager_decoders(const Manager *m) {
	return m->decoders;
}

Bus *manager_bus(const Manager *m) {
	return m->bus;
}

const KernelFeatures *manager_kernel(const Manager *m) {
	return m->kernel;
}

const CpuSet *manager_cpus(const Manager *m) {
	return &m->cpus;
}

const CpuSet *manager_cpus_parked(const Manager *m) {
	return &m->cpus_parked;
}

Reader *const *manager_readers(const Manager *m, size_t *ret_n) {
	*ret_n = m->n_readers;
	return m->readers;
}

CgroupFs *manager_cgroups(const Manager *m) {
	return m->cgroups;
}

CgroupWatch *manager_cgroup_watch(const Manager *m) {
	return m->cgroup_watch;
}

void manager_set_containers(Manager *m, ContainerTable *t) {
	Reader *const *readers;
	size_t n;

	m->containers = t;
	if (!t)
		return; /* done(): the readers, and their caches, are gone already */
	readers = manager_readers(m, &n);
	for (size_t i = 0; i < n; i++)
		reader_set_containers(readers[i], t);
}

ContainerTable *manager_containers(const Manager *m) {
	return m->containers;
}

bool manager_is_running(const Manager *m) {
	return m->state == MANAGER_RUNNING;
}

const char *manager_pin_path(const Manager *m) {
	return m->config->pin_path;
}

bool manager_kernel_unsupported(const Manager *m) {
	return m->kernel_unsupported;
}

static void flush_one(HubClient *c, void *userdata) {
	/* An overflowed client is closed even while it blocks: hub_prepare_sleep() does not let
	 * the loop sleep until it is gone. Each client's own consumer writes it out: the socket
	 * server, the bus monitors, standard output. */
	if (!hub_client_blocked(c) || hub_client_overflowed(c))
		hub_client_run_flush(c);
}

void manager_flush(Manager *m) {
	do
		hub_foreach_client(m->hub, flush_one, m);
	while (hub_prepare_sleep(m->hub));
}

const char *manager_cgroup_unit(
	Manager *m, uint64_t id, char *buf, size_t size, bool *ret_gone, uid_t *ret_owner) {
	ssize_t n;

	if (ret_owner)
		*ret_owner = (uid_t) -1; /* the system's, also for a cgroup that is gone */
	n = m->cgroup_watch ? cgroup_watch_resolve_owner(m->cgroup_watch, id, buf, size, ret_owner) : 0;
	if (ret_gone)
		*ret_gone = n == -ESTALE;
	if (n >= 0)
		return n > 0 ? buf : NULL;
	/* Gone: the unit the cgroup watch saw it made for. */
	return cgroup_watch_lookup(m->cgroup_watch, id, buf, size) > 0 ? buf : NULL;
}

int manager_stats_snapshot(Manager *m, StatsSnapshot **ret) {
	StatsSources src;

	manager_stats_sources(m, &src);
	return stats_snapshot(&src, ret);
}
