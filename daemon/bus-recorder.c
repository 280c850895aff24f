/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Snapshot(): the flight recorder's window (docs/recorder.md) as a file descriptor of JSON
 * lines. Root and ControlGroups= members only: a snapshot shows every user's events, and taking
 * one is an act (docs/security.md), which AllowGroups= does not grant. */
#include "bus-internal.h"
#include "request.h"

typedef struct SnapshotBounds {
	uint64_t since_ns, until_ns;
} SnapshotBounds;

/* since_ns and until_ns (t): the options a filter does not have. */
static int read_bound(sd_bus_message *message, const char *key, void *userdata, sd_bus_error *error) {
	SnapshotBounds *b = userdata;
	uint64_t *v;
	int r;

	if (streq(key, "since_ns"))
		v = &b->since_ns;
	else if (streq(key, "until_ns"))
		v = &b->until_ns;
	else
		return 0;
	r = sd_bus_message_read(message, "v", "t", v);
	if (r < 0)
		return sd_bus_error_setf(
			error, SD_BUS_ERROR_INVALID_ARGS, "option \"%s\": expected a variant of type t", key);
	return 1;
}

int bus_method_snapshot(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(subscription_freep) Subscription *sub = NULL;
	_cleanup_close_ int fd = -EBADF;
	SnapshotBounds bounds = {};
	Bus *b = userdata;
	int r;

	r = bus_require_control(b, message, "Snapshot", NULL, error);
	if (r < 0)
		return r;
	r = bus_read_filter(b, message, read_bound, &bounds, &sub, error);
	if (r < 0)
		return r;
	sub->access = SUBSCRIPTION_ACCESS_ALL;
	r = b->host.snapshot(b->host.userdata, bounds.since_ns, bounds.until_ns, sub, &fd);
	if (r == -ENODEV)
		return sd_bus_error_set(
			error, SD_BUS_ERROR_NOT_SUPPORTED, "The flight recorder is off (Recorder=no)");
	if (r < 0)
		return sd_bus_error_set_errnof(error, r, "Failed to take a snapshot: %m");
	return sd_bus_reply_method_return(message, "h", fd);
}
