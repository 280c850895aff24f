/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* StartCapture() and StopCapture() (docs/capture.md), and one org.perfrelay1.Capture object per
 * capture at /org/perfrelay1/capture/<id>: root and ControlGroups= members only (packets carry
 * every user's traffic; AllowGroups= members see events but do not act). A capture ends when its
 * requester (or root) calls StopCapture() or the requester leaves the bus. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "bus-internal.h"
#include "log.h"

struct BusCapture {
	Bus *bus;
	LIST_FIELDS(BusCapture, captures);
	uint32_t id;
	uid_t requester_uid; /* who may stop it besides root */
	char path[64];
	sd_bus_slot *slot;
	sd_bus_track *track; /* the requester: when it leaves the bus, the capture ends */
};

static BusCapture *bus_capture_free(BusCapture *c) {
	if (!c)
		return NULL;
	LIST_REMOVE(captures, c->bus->captures, c);
	sd_bus_slot_unref(c->slot);
	sd_bus_track_unref(c->track);
	free(c);
	return NULL;
}

void bus_captures_free_all(Bus *b) {
	while (b->captures)
		bus_capture_free(b->captures);
}

static void bus_capture_end(BusCapture *c) {
	Bus *b = c->bus;

	(void) b->host.stop_capture(b->host.userdata, c->id);
	bus_capture_free(c);
}

void bus_captures_end_all(Bus *b) {
	while (b->captures)
		bus_capture_end(b->captures);
}

static int on_requester_gone(sd_bus_track *track, void *userdata) {
	BusCapture *c = userdata;

	log_info("The requester of capture %u left the bus: capture stopped", c->id);
	bus_capture_end(c);
	return 0;
}

static int capture_property_get(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	BusCapture *c = userdata;
	CaptureSummary s;
	int r;

	r = c->bus->host.capture_info(c->bus->host.userdata, c->id, &s);
	if (r < 0)
		return sd_bus_error_set_errnof(error, r, "Capture %u: %m", c->id);
	if (streq(property, "Id"))
		return sd_bus_message_append(reply, "u", s.id);
	if (streq(property, "Unit"))
		return sd_bus_message_append(reply, "s", s.unit);
	if (streq(property, "Cgroup"))
		return sd_bus_message_append(reply, "s", s.cgroup);
	if (streq(property, "CgroupId"))
		return sd_bus_message_append(reply, "t", s.cgroup_id);
	if (streq(property, "Ifindex"))
		return sd_bus_message_append(reply, "u", s.ifindex);
	if (streq(property, "Direction"))
		return sd_bus_message_append(reply, "s", capture_direction_to_string(s.direction));
	if (streq(property, "Bytes"))
		return sd_bus_message_append(reply, "u", s.bytes);
	if (streq(property, "PacketsPerSecond"))
		return sd_bus_message_append(reply, "u", s.packets_per_second);
	if (streq(property, "Seen"))
		return sd_bus_message_append(reply, "t", s.stats.seen);
	if (streq(property, "Captured"))
		return sd_bus_message_append(reply, "t", s.stats.captured);
	if (streq(property, "RateDropped"))
		return sd_bus_message_append(reply, "t", s.stats.rate_dropped);
	return sd_bus_message_append(reply, "t", s.stats.failed);
}

/* clang-format off */
static const sd_bus_vtable capture_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_PROPERTY("Id", "u", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Unit", "s", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Cgroup", "s", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("CgroupId", "t", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Ifindex", "u", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Direction", "s", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Bytes", "u", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("PacketsPerSecond", "u", capture_property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Seen", "t", capture_property_get, 0, 0),
	SD_BUS_PROPERTY("Captured", "t", capture_property_get, 0, 0),
	SD_BUS_PROPERTY("RateDropped", "t", capture_property_get, 0, 0),
	SD_BUS_PROPERTY("Failed", "t", capture_property_get, 0, 0),
	SD_BUS_VTABLE_END
};
/* clang-format on */

static int read_options(sd_bus_message *m, CaptureRequest *req, sd_bus_error *error) {
	const char *key;
	int r;

	r = sd_bus_message_enter_container(m, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *sig;
		const char **s = NULL;
		uint32_t *u = NULL;

		r = sd_bus_message_read(m, "s", &key);
		if (r < 0)
			return r;
		if (streq(key, "unit"))
			s = &req->unit;
		else if (streq(key, "cgroup"))
			s = &req->cgroup;
		else if (streq(key, "direction"))
			s = &req->direction;
		else if (streq(key, "bytes"))
			u = &req->bytes;
		else if (streq(key, "ifindex"))
			u = &req->ifindex;
		else if (streq(key, "packets_per_second"))
			u = &req->packets_per_second;
		else
			return sd_bus_error_setf(
				error,
				SD_BUS_ERROR_INVALID_ARGS,
				"unknown option \"%.64s\" (known: unit, cgroup, ifindex, direction, bytes, "
				"packets_per_second)",
				key);
		sig = s ? "s" : "u";
		r = s ? sd_bus_message_read(m, "v", sig, s) : sd_bus_message_read(m, "v", sig, u);
		if (r < 0)
			return sd_bus_error_setf(
				error,
				SD_BUS_ERROR_INVALID_ARGS,
				"option \"%s\": expected a variant of type %s",
				key,
				sig);
		r = sd_bus_message_exit_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

/* A StartCapture() call between the caller's check and the reply: while systemd is asked where
 * the unit runs, the call's message (and the option strings that point into it) is kept. */
typedef struct PendingCapture {
	Bus *bus;
	sd_bus_message *message;
	CaptureRequest req;
	uid_t uid;
} PendingCapture;

static void pending_capture_free(void *userdata) {
	PendingCapture *p = userdata;

	sd_bus_message_unref(p->message);
	free(p);
}

static int capture_start(
	Bus *b, sd_bus_message *message, const CaptureRequest *req, uid_t uid, sd_bus_error *error) {
	_cleanup_free_ char *why = NULL;
	BusCapture *c;
	uint32_t id;
	int r;

	r = b->host.start_capture(b->host.userdata, req, &id, &why);
	if (r < 0)
		return sd_bus_error_setf(
			error,
			r == -EBUSY                          ? SD_BUS_ERROR_LIMITS_EXCEEDED :
				r == -EPERM                  ? SD_BUS_ERROR_ACCESS_DENIED :
				r == -EINVAL || r == -ENOENT ? SD_BUS_ERROR_INVALID_ARGS :
							       SD_BUS_ERROR_FAILED,
			"StartCapture: %s",
			why ?: strerror(-r));
	c = calloc(1, sizeof(*c));
	if (!c) {
		(void) b->host.stop_capture(b->host.userdata, id);
		return -ENOMEM;
	}
	c->bus = b;
	c->id = id;
	c->requester_uid = uid;
	snprintf(c->path, sizeof(c->path), "%s/%" PRIu32, BUS_CAPTURE_PATH_PREFIX, id);
	LIST_PREPEND(captures, b->captures, c);
	r = sd_bus_add_object_vtable(b->bus, &c->slot, c->path, BUS_INTERFACE_CAPTURE, capture_vtable, c);
	if (r >= 0)
		r = sd_bus_track_new(b->bus, &c->track, on_requester_gone, c);
	if (r >= 0)
		r = sd_bus_track_add_sender(c->track, message);
	if (r < 0) {
		bus_capture_end(c);
		return r;
	}
	return sd_bus_reply_method_return(message, "o", c->path);
}

/* systemd's answer: the unit's ControlGroup, or that it has none. */
static int on_unit_cgroup(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	PendingCapture *p = userdata;
	const sd_bus_error *e = sd_bus_message_get_error(reply);
	const char *cgroup = NULL;
	int r;

	if (e && (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))) {
		/* Not systemd's bus (a private bus): the daemon searches the tree. */
		r = capture_start(p->bus, p->message, &p->req, p->uid, &error);
	} else if (e) {
		r = sd_bus_error_setf(
			&error,
			SD_BUS_ERROR_INVALID_ARGS,
			"StartCapture: systemd does not say where unit %s runs: %s",
			p->req.unit,
			e->message ?: e->name);
	} else {
		r = sd_bus_message_read(reply, "v", "s", &cgroup);
		if (r >= 0 && (!cgroup || !cgroup[0]))
			r = sd_bus_error_setf(
				&error,
				SD_BUS_ERROR_INVALID_ARGS,
				"StartCapture: unit %s has no cgroup (systemd says it is not running)",
				p->req.unit);
		else if (r >= 0) {
			p->req.unit_cgroup = cgroup;
			r = capture_start(p->bus, p->message, &p->req, p->uid, &error);
		}
	}
	if (sd_bus_error_is_set(&error))
		(void) sd_bus_reply_method_error(p->message, &error);
	else if (r < 0)
		(void) sd_bus_reply_method_errnof(p->message, r, "StartCapture: %m");
	return 0;
}

/* When systemd runs, it says which cgroup a unit has (its ControlGroup property): a directory of
 * the same name elsewhere in the tree is not the unit. The answer comes back asynchronously, so
 * the event loop keeps serving while systemd answers. */
static int ask_systemd_for_cgroup(Bus *b, sd_bus_message *message, const CaptureRequest *req, uid_t uid) {
	static const struct {
		const char *suffix, *interface;
	} interfaces[] = {
		{ ".service", "org.freedesktop.systemd1.Service" },
		{ ".scope", "org.freedesktop.systemd1.Scope" },
		{ ".slice", "org.freedesktop.systemd1.Slice" },
		{ ".socket", "org.freedesktop.systemd1.Socket" },
		{ ".mount", "org.freedesktop.systemd1.Mount" },
		{ ".swap", "org.freedesktop.systemd1.Swap" },
	};
	_cleanup_free_ char *path = NULL;
	sd_bus_slot *slot = NULL;
	const char *interface = NULL;
	PendingCapture *p;
	int r;

	for (size_t i = 0; i < ELEMENTSOF(interfaces); i++)
		if (endswith(req->unit, interfaces[i].suffix))
			interface = interfaces[i].interface;
	if (!interface)
		return 0; /* the manager refuses the name */
	r = sd_bus_path_encode("/org/freedesktop/systemd1/unit", req->unit, &path);
	if (r < 0)
		return r;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	*p = (PendingCapture){ .bus = b, .message = sd_bus_message_ref(message), .req = *req, .uid = uid };
	r = sd_bus_call_method_async(
		b->bus,
		&slot,
		"org.freedesktop.systemd1",
		path,
		"org.freedesktop.DBus.Properties",
		"Get",
		on_unit_cgroup,
		p,
		"ss",
		interface,
		"ControlGroup");
	if (r < 0) {
		pending_capture_free(p);
		return r;
	}
	/* The slot frees p when the call ends, or with the bus. */
	(void) sd_bus_slot_set_destroy_callback(slot, pending_capture_free);
	(void) sd_bus_slot_set_floating(slot, 1);
	sd_bus_slot_unref(slot);
	return 1;
}

int bus_method_start_capture(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	CaptureRequest req = {};
	Bus *b = userdata;
	uid_t uid;
	int r;

	r = bus_require_control(b, message, "StartCapture", &uid, error);
	if (r < 0)
		return r;
	r = read_options(message, &req, error);
	if (r < 0)
		return r;
	req.may_capture_host = uid == 0 || b->config->allow_host_captures;
	if (req.unit && sd_booted() > 0) {
		r = ask_systemd_for_cgroup(b, message, &req, uid);
		if (r != 0)
			return r;
	}
	return capture_start(b, message, &req, uid, error);
}

/* Only the requester (by uid) or root ends a capture early: a ControlGroups= member cannot stop
 * another admin's capture. */
int bus_method_stop_capture(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	const char *path;
	uid_t uid;
	int r;

	r = bus_require_control(b, message, "StopCapture", &uid, error);
	if (r < 0)
		return r;
	r = sd_bus_message_read(message, "o", &path);
	if (r < 0)
		return r;
	LIST_FOREACH(captures, c, b->captures)
		if (streq(c->path, path)) {
			if (uid != 0 && uid != c->requester_uid)
				return sd_bus_error_setf(
					error,
					SD_BUS_ERROR_ACCESS_DENIED,
					"StopCapture: capture %s was started by uid %u; only it or root may stop it",
					path,
					(unsigned) c->requester_uid);
			bus_capture_end(c);
			return sd_bus_reply_method_return(message, NULL);
		}
	return sd_bus_error_setf(error, BUS_ERROR_NO_SUCH_CAPTURE, "No capture %s", path);
}
