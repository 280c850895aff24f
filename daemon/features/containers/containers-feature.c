/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Containers by name (docs/containers.md): the table of containers the readers' cgroup caches
 * fill (kernel/containers.h), named here, on the main thread, from each runtime's state
 * (container-lookup.h); GetStats()' "containers" section. A reader that meets a new container
 * wakes this loop through an eventfd; a container whose state does not name it yet is asked
 * again after 100 ms, 400 ms, 1.6 s and 6.4 s, then counted failed. */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "api/bus-figures.h"
#include "base/log.h"
#include "core/manager.h"
#include "features/containers/container-lookup.h"
#include "features/containers/containers-config.h"
#include "features/feature-table.h"
#include "time-util.h"

#define LOOKUP_TRIES      5u
#define LOOKUP_FIRST_USEC (100u * 1000u)
#define LOOKUP_BATCH      64u

typedef struct ContainersFeature {
	Feature feature;
	ContainerTable *table;
	int wake_fd; /* valid when has_fd: the struct starts zeroed, and setup may not have run */
	bool has_fd;
	sd_event_source *wake_source, *retry_timer;
} ContainersFeature;

static const ContainersConfig *cfg(Manager *m) {
	return config_part(manager_config(m), &containers_config);
}

/* ContainerWakeFn: on a reader, under the table's lock, once per new container. */
static void wake(void *userdata) {
	ContainersFeature *cf = userdata;
	uint64_t one = 1;

	/* EAGAIN (the counter is full) wakes the loop all the same. */
	(void) !write(cf->wake_fd, &one, sizeof(one));
}

static void arm_retry(ContainersFeature *cf);

/* The delay before try `tries` + 1: 100 ms, then four times longer each time. */
static uint64_t retry_delay(unsigned tries) {
	return (uint64_t) LOOKUP_FIRST_USEC << (2 * (tries - 1));
}

static void run_lookups(ContainersFeature *cf) {
	Manager *m = cf->feature.manager;
	const Config *c = manager_config(m);
	ContainerRoots roots = { .podman = c->podman_root, .docker = c->docker_root };
	Container *due[LOOKUP_BATCH];
	uint64_t now = now_usec(CLOCK_MONOTONIC);
	size_t n;

	do {
		n = container_table_due(cf->table, now, due, ELEMENTSOF(due));
		for (size_t i = 0; i < n; i++) {
			Container *x = due[i];
			ContainerNames *names = NULL;
			unsigned tries = container_tries(x);
			int r = container_lookup(container_ref(x), &roots, &names);

			if (r == 1)
				container_table_named(cf->table, x, names);
			else if (r == -EOPNOTSUPP)
				container_table_failed(cf->table, x, CONTAINER_UNNAMED);
			else if (tries >= LOOKUP_TRIES) {
				log_debug_errno(
					r,
					"Container %s of %s not named after %u lookups: %m",
					container_ref(x)->id,
					container_runtime_to_string(container_ref(x)->runtime),
					tries);
				container_table_failed(cf->table, x, CONTAINER_FAILED);
			} else
				container_table_retry(cf->table, x, now + retry_delay(tries));
			container_unref(x);
		}
	} while (n == ELEMENTSOF(due));
	arm_retry(cf);
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
	run_lookups(userdata);
	return 0;
}

static void arm_retry(ContainersFeature *cf) {
	uint64_t due = container_table_next_due(cf->table);

	if (due == UINT64_MAX) {
		(void) sd_event_source_set_enabled(cf->retry_timer, SD_EVENT_OFF);
		return;
	}
	(void) sd_event_source_set_time(cf->retry_timer, due);
	(void) sd_event_source_set_enabled(cf->retry_timer, SD_EVENT_ONESHOT);
}

static int on_wake(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	ContainersFeature *cf = userdata;
	uint64_t v;

	(void) !read(fd, &v, sizeof(v));
	run_lookups(cf);
	return 0;
}

static int containers_setup(Feature *f) {
	ContainersFeature *cf = (ContainersFeature *) f;
	Manager *m = f->manager;
	size_t n;
	int r;

	if (!cfg(m)->containers || !manager_cgroup_watch(m))
		return 0;
	cf->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cf->wake_fd < 0)
		return log_error_errno(errno, "Failed to make the containers' eventfd: %m");
	cf->has_fd = true;
	r = container_table_new(cfg(m)->names ? wake : NULL, cf, &cf->table);
	if (r < 0)
		return log_error_errno(r, "Failed to make the table of containers: %m");
	if (!cfg(m)->names)
		container_table_no_lookups(cf->table);
	/* Every reader's cache may hold an entry per cgroup, a removed one's until it is evicted:
	 * room for them all beside CONTAINER_TABLE_MAX others, so that what caches keep never
	 * crowds out a container that starts. */
	(void) manager_readers(m, &n);
	r = container_table_reserve(cf->table, n * READER_UNIT_CACHE_ENTRIES);
	if (r < 0)
		return log_error_errno(r, "Failed to size the table of containers: %m");
	if (cfg(m)->names) {
		r = sd_event_add_io(manager_event(m), &cf->wake_source, cf->wake_fd, EPOLLIN, on_wake, cf);
		if (r >= 0)
			r = sd_event_add_time(
				manager_event(m), &cf->retry_timer, CLOCK_MONOTONIC, UINT64_MAX, 0, on_retry, cf);
		if (r >= 0)
			r = sd_event_source_set_enabled(cf->retry_timer, SD_EVENT_OFF);
		if (r < 0)
			return log_error_errno(r, "Failed to watch for new containers: %m");
	}
	manager_set_containers(m, cf->table);
	return 0;
}

static void containers_tick(Feature *f) {
	ContainersFeature *cf = (ContainersFeature *) f;

	if (cf->table)
		container_table_sweep(cf->table, now_usec(CLOCK_MONOTONIC));
}

static void containers_done(Feature *f) {
	ContainersFeature *cf = (ContainersFeature *) f;

	cf->wake_source = sd_event_source_disable_unref(cf->wake_source);
	cf->retry_timer = sd_event_source_disable_unref(cf->retry_timer);
	/* The readers and their caches are gone: the table's references are the last. */
	if (cf->table)
		manager_set_containers(f->manager, NULL);
	cf->table = container_table_free(cf->table);
	if (cf->has_fd)
		cf->wake_fd = safe_close(cf->wake_fd);
	cf->has_fd = false;
}

static int containers_stats_append(Feature *f, sd_bus_message *m) {
	ContainersFeature *cf = (ContainersFeature *) f;
	ContainerTableStats st = {};
	int r;

	if (cf->table)
		container_table_get_stats(cf->table, &st);
	r = open_section(m, "containers");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "enabled", cf->table != NULL },
			{ "known", st.known },
			{ "pending", st.pending },
			{ "failed", st.failed },
			{ "unnamed", st.unnamed },
			{ "seen", st.seen },
			{ "table_full", st.full },
			{ "swept", st.swept },
			{ "lookups", st.lookups });
	if (r >= 0)
		r = open_section(m, "lookup_failures");
	for (ContainerRuntime rt = CONTAINER_NONE + 1; r >= 0 && rt < _CONTAINER_RUNTIME_MAX; rt++)
		r = sd_bus_message_append(
			m, "{sv}", container_runtime_to_string(rt), "t", st.lookup_failures[rt]);
	if (r >= 0)
		r = close_entry(m);
	if (r >= 0)
		r = close_entry(m);
	return r;
}

const FeatureVtable containers_feature = {
	.name = "containers",
	.object_size = sizeof(ContainersFeature),
	.config = &containers_config,
	.setup = containers_setup,
	.tick = containers_tick,
	.done = containers_done,
	.stats_append = containers_stats_append,
};
