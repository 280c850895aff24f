/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The built-in probes at run time: Probes= applied at start (after every ring is read, so no
 * event is emitted before) and on reload, the Probes property, ListProbes() and
 * SetProbeEnabled() (root only). The probes' programs and pins are the core's (probes.c). */
#include <stdio.h>
#include <string.h>

#include "features/feature-table.h"
#include "core/manager.h"
#include "base/log.h"
#include "features/probes/probes-config.h"

/* Attaches or detaches a built-in probe until the next reload or restart (which apply Probes=
 * again). */
static int probes_set_one(Feature *f, unsigned probe, bool enabled) {
	Manager *m = f->manager;
	int r;

	if (probe >= _PROBE_MAX)
		return -EINVAL;
	if (probes_is_enabled(manager_probes(m), probe) == enabled)
		return 0;
	r = probes_set_enabled(manager_probes(m), probe, enabled);
	/* Detaching can fail half way (a pin that cannot be removed): tell the bus either way. */
	bus_emit_manager_changed(manager_bus(m), STRV_MAKE("Probes"));
	if (r < 0)
		return log_error_errno(
			r, "Failed to %s probe %s: %m", enabled ? "attach" : "detach", probe_to_string(probe));
	log_info("Probe %s %s", probe_to_string(probe), enabled ? "attached" : "detached");
	return 0;
}

static uint32_t probe_mask(const Manager *m) {
	uint32_t mask = 0;

	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(manager_probes(m), i))
			mask |= 1u << i;
	return mask;
}

/* Probes= of the configuration now. */
static uint32_t probes_wanted(const Manager *m) {
	const ProbesConfig *pc = config_part(manager_config(m), &probes_config);

	return pc->probes;
}

static int probes_start(Feature *f) {
	Manager *m = f->manager;
	Probes *p = manager_probes(m);
	int r;

	r = probes_apply(p, probes_wanted(m));
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(p, i))
			log_info(
				"Probe %s attached%s",
				probe_to_string(i),
				probes_was_reused(p, i) ? " (pinned links reused)" : "");
	return 0;
}

static int probes_reload(Feature *f) {
	Manager *m = f->manager;
	uint32_t attached = probe_mask(m);
	int r;

	r = probes_apply(manager_probes(m), probes_wanted(m));
	if (probe_mask(m) != attached)
		bus_emit_manager_changed(manager_bus(m), STRV_MAKE("Probes"));
	/* probes_apply() logged which probe; the rest is applied all the same. */
	return r;
}

static int property_get_probes(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Feature *f = userdata;
	Probes *p = manager_probes(f->manager);
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

static int method_list_probes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	Feature *f = userdata;
	Probes *p = manager_probes(f->manager);
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
	Feature *f = userdata;
	const char *name;
	int enabled, probe, r;

	r = sd_bus_message_read(message, "sb", &name, &enabled);
	if (r < 0)
		return r;
	r = bus_check_root(message, "SetProbeEnabled", error);
	if (r < 0)
		return r;
	probe = probe_from_string(name);
	if (probe < 0) {
		char known[128] = "";

		for (unsigned i = 0; i < _PROBE_MAX; i++) {
			size_t n = strlen(known);

			snprintf(known + n, sizeof(known) - n, "%s%s", n ? " " : "", probe_to_string(i));
		}
		return sd_bus_error_setf(
			error, SD_BUS_ERROR_INVALID_ARGS, "Unknown probe \"%s\" (known: %s)", name, known);
	}
	r = probes_set_one(f, (unsigned) probe, enabled);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to %s probe %s: %m", enabled ? "attach" : "detach", name);
	return sd_bus_reply_method_return(message, NULL);
}

/* clang-format off */
static const sd_bus_vtable probes_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_PROPERTY("Probes", "as", property_get_probes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	SD_BUS_METHOD_WITH_NAMES("ListProbes",
	                         NULL, "",
	                         "a(sbt)", SD_BUS_PARAM(probes),
	                         method_list_probes, SD_BUS_VTABLE_UNPRIVILEGED),
	/* UNPRIVILEGED only keeps sd-bus from applying its own CAP_SYS_ADMIN check: the method
	 * checks the sender's uid itself (bus_check_root()). */
	SD_BUS_METHOD_WITH_NAMES("SetProbeEnabled",
	                         "sb", SD_BUS_PARAM(name) SD_BUS_PARAM(enabled),
	                         NULL, "",
	                         method_set_probe_enabled, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

const FeatureVtable probes_feature = {
	.name = "probes",
	.object_size = sizeof(Feature),
	.config = &probes_config,
	.start = probes_start,
	.reload = probes_reload,
	.bus_vtable = probes_bus_vtable,
};
