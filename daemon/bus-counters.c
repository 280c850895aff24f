/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GetUnitCounters(): each cgroup's perf counter totals (docs/counters.md) as a(sta{st}): unit
 * ("" when the cgroup belongs to no unit), cgroup id, and the configured counters by their JSON
 * names. Counters that change at every context switch tell what another user's processes do (a
 * side channel), so root, AllowGroups= and ControlGroups= members get every cgroup, anyone else
 * the cgroups of their own slice and manager (user-UID.slice, user@UID.service). The answer is
 * the view the counters' interval made, never a walk of the table per call. */
#include "bus-internal.h"
#include "perfcount.h"

int bus_method_get_unit_counters(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_free_ UnitCounters *units = NULL;
	Bus *b = userdata;
	SubscriptionAccess access;
	size_t n = 0;
	uid_t uid;
	int r;

	r = bus_sender_access(b, message, &uid, &access, error);
	if (r < 0)
		return r;
	r = b->host.unit_counters(b->host.userdata, &units, &n);
	if (r < 0)
		return sd_bus_error_set_errnof(error, r, "Failed to read the counters_cgroups table: %m");
	r = sd_bus_message_new_method_return(message, &reply);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "(sta{st})");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		const CgroupCounters *c = &units[i].counters;

		if (access != SUBSCRIPTION_ACCESS_ALL && units[i].owner != uid)
			continue;
		r = sd_bus_message_open_container(reply, 'r', "sta{st}");
		if (r >= 0)
			r = sd_bus_message_append(reply, "st", units[i].unit, c->cgroup_id);
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'a', "{st}");
		for (unsigned k = 0; r >= 0 && k < PERFRELAY_COUNTERS_MAX; k++)
			if (c->mask & (1u << k))
				r = sd_bus_message_append(reply, "{st}", counter_key_to_string(k), c->value[k]);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}
