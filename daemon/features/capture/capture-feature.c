/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Packet captures (docs/capture.md): StartCapture() finds the unit's cgroup, bounds the request
 * by [Capture], and attaches a capture, which gets an org.perfrelay1.Capture object at
 * /org/perfrelay1/capture/<id>; StopCapture() and the requester's departure end it. Root and
 * ControlGroups= members only (packets carry every user's traffic; AllowGroups= members see
 * events but do not act). GetStats()' "capture" section. */
#include "perfrelay-config.h"

#include <dirent.h>
#include <net/if.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <inttypes.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include "api/bus-figures.h"
#include "features/capture/capture-config.h"
#include "features/capture/capture-set.h"
#include "error-util.h"
#include "features/feature-table.h"
#include "core/manager.h"
#include "list.h"
#include "base/log.h"
#include "hub/filter.h"
#include "kernel/containerid.h"
#include "kernel/containers.h"
#include "kernel/unitname.h"

typedef struct BusCapture BusCapture;

typedef struct CaptureFeature {
	Feature feature;
	Captures *captures;  /* NULL if they could not be set up */
	BusCapture *objects; /* the capture objects on the bus */
} CaptureFeature;

/* A unit's cgroup without systemd to ask (StartCapture() asks systemd first when it runs: the ControlGroup
 * of the unit): systemd names a unit's cgroup after the unit, below its slices. Only directories root made
 * are trusted: the walk never descends into a delegated subtree (a user's manager, user@UID.service, or a
 * cgroup whose cgroup.subtree_control belongs to someone else), where any user could make a directory named
 * after a system unit. A name found twice is refused, naming the candidates. */
#define FIND_DEPTH_MAX      8
#define FIND_DIRS_MAX       65536u
#define FIND_CANDIDATES_MAX 4

/* A walk of the cgroup tree for the directories `match` names (at most FIND_CANDIDATES_MAX kept,
 * every one counted), within a budget of directories. */
typedef struct CgroupSearch CgroupSearch;
struct CgroupSearch {
	/* Whether the directory at path (named name) is one sought; *ret_descend says whether to
	 * look below it too. */
	bool (*match)(const CgroupSearch *cs, const char *path, const char *name, bool *ret_descend);
	const char *unit;        /* a unit's search: its name */
	const ContainerRef *ref; /* a container's: its ref */
	size_t root_len;         /* of the cgroup2 root, at the start of every path */
	bool into_delegated;     /* descend into delegated subtrees (a rootless container's) */
	unsigned budget;
	size_t n_found;
	char found[FIND_CANDIDATES_MAX][PATH_MAX];
};

static bool cgroup_is_delegated(const char *path, const char *name) {
	char file[PATH_MAX];
	struct stat st;

	if (startswith(name, "user@") && endswith(name, ".service"))
		return true;
	if (stat(path, &st) < 0 || st.st_uid != 0)
		return true;
	if (snprintf(file, sizeof(file), "%s/cgroup.subtree_control", path) >= (int) sizeof(file))
		return true;
	return stat(file, &st) < 0 || st.st_uid != 0;
}

static int find_cgroups(const char *dir, unsigned depth, CgroupSearch *cs) {
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (depth > FIND_DEPTH_MAX)
		return 0;
	d = opendir(dir);
	if (!d)
		return 0;
	while (r == 0 && (de = readdir(d))) {
		char sub[PATH_MAX];
		bool descend = true;

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (cs->budget == 0) {
			r = -E2BIG;
			break;
		}
		cs->budget--;
		if (snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) >= (int) sizeof(sub))
			continue;
		if (cs->match(cs, sub, de->d_name, &descend)) {
			if (cs->n_found < FIND_CANDIDATES_MAX)
				snprintf(cs->found[cs->n_found], sizeof(cs->found[0]), "%s", sub);
			cs->n_found++;
		}
		if (descend && (cs->into_delegated || !cgroup_is_delegated(sub, de->d_name)))
			r = find_cgroups(sub, depth + 1, cs);
	}
	closedir(d);
	return r;
}

/* A unit's cgroup is named after the unit. */
static bool match_unit(const CgroupSearch *cs, const char *path, const char *name, bool *ret_descend) {
	return streq(name, cs->unit);
}

static const CaptureConfig *capture_cfg(const Manager *m) {
	return config_part(manager_config(m), &capture_config);
}

/* On failure *ret_error (if given) says why, for the D-Bus error. */
/* Whether capturing the cgroup at `path` (under the cgroup2 mount `root`) takes the host's
 * traffic, or many units' or sessions' at once: the root, and any slice (/system.slice and
 * /user.slice are together the whole host; user-1000.slice holds a user's every session). */
static bool cgroup_is_host_wide(const char *path, const char *root) {
	return streq(path, root) || endswith(path, ".slice");
}

/* A container's cgroup: the shallowest directory whose path names container `ref`
 * (containerid.h): below it is the same container. A rootless container's is in its user's tree,
 * the others' outside delegated subtrees (where a user could name a directory after a system
 * container). */
static bool match_container_dir(const CgroupSearch *cs, const char *path, const char *name, bool *ret_descend) {
	ContainerRef c;

	/* cs->ref is no monitor (match_container()): its monitor's cgroup is not it. */
	if (!container_from_cgroup_path(path + cs->root_len, &c) || !container_ref_equal(&c, cs->ref))
		return false;
	*ret_descend = false;
	return true;
}

typedef struct ContainerMatch {
	const char *name;
	size_t n;
	ContainerRef ref;
} ContainerMatch;

/* ContainerVisitFn: the containers `name` names (filter_container_named()), their monitors aside. */
static void match_container(void *userdata, const Container *c) {
	ContainerMatch *m = userdata;
	const ContainerRef *ref = container_ref(c);

	if (ref->monitor || !filter_container_named(m->name, c))
		return;
	if (m->n == 0 || !container_ref_equal(&m->ref, ref))
		m->n++;
	m->ref = *ref;
}

/* The cgroup of the one container `name` names among those the daemon has seen. */
static int capture_container_path(
	Manager *m, const char *name, const char *root, char path[static PATH_MAX], char **ret_error) {
	ContainerMatch match = { .name = name };
	CgroupSearch cs;
	int r;

	if (!manager_containers(m))
		return error_textf(ret_error, -EOPNOTSUPP, "containers are off (Containers=no)");
	container_table_visit(manager_containers(m), match_container, &match);
	if (match.n == 0)
		return error_textf(
			ret_error,
			-ENOENT,
			"no container the daemon has seen is named \"%s\" (its name, image, or id of 12 hex digits "
			"or more; a container is seen once a process of it runs)",
			name);
	if (match.n > 1)
		return error_textf(
			ret_error, -EINVAL, "\"%s\" names %zu containers: give the id", name, match.n);
	cs = (CgroupSearch){
		.match = match_container_dir,
		.ref = &match.ref,
		.root_len = strlen(root),
		.into_delegated = match.ref.owner != (uid_t) -1,
		.budget = FIND_DIRS_MAX,
	};
	r = find_cgroups(root, 0, &cs);
	if (r == -E2BIG)
		return error_textf(ret_error, r, "more than %u cgroups under %s", FIND_DIRS_MAX, root);
	if (cs.n_found != 1)
		return error_textf(
			ret_error,
			-ENOENT,
			"container %s (%s) has %zu cgroups under %s: is it running?",
			match.ref.id,
			container_runtime_to_string(match.ref.runtime),
			cs.n_found,
			root);
	snprintf(path, PATH_MAX, "%s", cs.found[0]);
	return 0;
}

/* The one cgroup of `unit` below root, outside delegated subtrees (find_cgroups()). */
static int capture_unit_path(const char *unit, const char *root, char path[static PATH_MAX], char **ret_error) {
	CgroupSearch us;
	int r;

	if (!unit_name_is_attributable(unit, strlen(unit)))
		return error_textf(ret_error, -EINVAL, "\"%s\" is not a unit name processes run in", unit);
	us = (CgroupSearch){ .match = match_unit, .unit = unit, .budget = FIND_DIRS_MAX };
	r = find_cgroups(root, 0, &us);
	if (r == -E2BIG)
		return error_textf(
			ret_error,
			r,
			"the cgroup tree under %s has more than %u directories",
			root,
			FIND_DIRS_MAX);
	if (us.n_found == 0)
		return error_textf(
			ret_error,
			-ENOENT,
			"unit %s has no cgroup under %s outside delegated subtrees (is it running?)",
			unit,
			root);
	if (us.n_found > 1)
		return error_textf(
			ret_error,
			-EINVAL,
			"unit %s names %zu cgroups (%s, %s%s%s%s%s): give the one to capture as \"cgroup\"",
			unit,
			us.n_found,
			us.found[0] + strlen(root),
			us.found[1] + strlen(root),
			us.n_found > 2 ? ", " : "",
			us.n_found > 2 ? us.found[2] + strlen(root) : "",
			us.n_found > 3 ? ", " : "",
			us.n_found > 3 ? us.found[3] + strlen(root) : "");
	snprintf(path, PATH_MAX, "%s", us.found[0]);
	return 0;
}

/* The path of what the request captures: an interface's name, or a cgroup's directory under
 * root (systemd's answer for a unit, else the unit found in the tree, or the cgroup given). */
static int capture_target_path(
	Manager *m, const CaptureRequest *req, const char *root, char path[static PATH_MAX], char **ret_error) {
	if (req->container)
		return capture_container_path(m, req->container, root, path, ret_error);
	if (req->ifindex) {
		char name[IF_NAMESIZE];

		if (!if_indextoname(req->ifindex, name))
			return error_textf(
				ret_error,
				-EINVAL,
				"no interface with index %u in perfrelayd's network namespace (the shipped unit has "
				"PrivateNetwork=yes)",
				req->ifindex);
		snprintf(path, PATH_MAX, "%s", name);
	} else if (req->unit && req->unit_cgroup) {
		/* systemd said where the unit runs (its ControlGroup property). */
		if (req->unit_cgroup[0] != '/' || strstr(req->unit_cgroup, "/.") ||
		    snprintf(path, PATH_MAX, "%s%s", root, streq(req->unit_cgroup, "/") ? "" : req->unit_cgroup) >=
			    (int) PATH_MAX)
			return error_textf(
				ret_error,
				-EINVAL,
				"systemd's ControlGroup of %s, \"%s\", is not a cgroup path",
				req->unit,
				req->unit_cgroup);
	} else if (req->unit) {
		int r = capture_unit_path(req->unit, root, path, ret_error);

		if (r < 0)
			return r;
	} else {
		/* No "." component and no trailing slash: "/" is the only way to say the root. */
		if (req->cgroup[0] != '/' || strstr(req->cgroup, "/.") || strstr(req->cgroup, "//") ||
		    (req->cgroup[1] && endswith(req->cgroup, "/")))
			return error_textf(
				ret_error,
				-EINVAL,
				"cgroup \"%s\": a path below the cgroup2 root, starting with /",
				req->cgroup);
		if (snprintf(path, PATH_MAX, "%s%s", root, streq(req->cgroup, "/") ? "" : req->cgroup) >=
		    (int) PATH_MAX)
			return error_textf(ret_error, -ENAMETOOLONG, "cgroup path too long");
	}
	return 0;
}

static int capture_start_one(CaptureFeature *cf, const CaptureRequest *req, uint32_t *ret_id, char **ret_error) {
	Manager *m = cf->feature.manager;
	const CaptureConfig *c = capture_cfg(m);
	CaptureSummary info = {};
	Capture *capture = NULL;
	char path[PATH_MAX];
	const char *root;
	int dir, r;

	if (!cf->captures || !manager_cgroups(m))
		return error_textf(ret_error, -EOPNOTSUPP, "packet capture needs a cgroup2 mount");
	root = cgroup_fs_path(manager_cgroups(m));
	if (captures_full(cf->captures)) {
		captures_count_refused(cf->captures);
		return error_textf(
			ret_error, -EBUSY, "%u captures run already (MaxCaptures=)", c->max_captures);
	}
	if (!!req->unit + !!req->cgroup + !!req->ifindex + !!req->container != 1)
		return error_textf(
			ret_error,
			-EINVAL,
			"give one of the options \"unit\", \"cgroup\", \"container\" and \"ifindex\"");
	r = capture_target_path(m, req, root, path, ret_error);
	if (r < 0)
		return r;
	/* Every packet of the host, or of many units or sessions at once: root's decision, or the
	 * admin's by AllowHostCaptures=. */
	if ((req->ifindex || cgroup_is_host_wide(path, root)) && !req->may_capture_host)
		return error_textf(
			ret_error,
			-EPERM,
			"capturing %s takes the packets of the host or of many units: it needs root (or "
			"AllowHostCaptures=yes for ControlGroups= members)",
			req->ifindex              ? "an interface" :
				streq(path, root) ? "the root cgroup" :
						    "a slice");
	dir = req->direction ? capture_direction_from_string(req->direction) : CAPTURE_BOTH;
	if (dir < 0)
		return error_textf(
			ret_error, -EINVAL, "direction \"%s\": ingress, egress or both", req->direction);
	info.bytes = req->bytes ?: c->bytes;
	if (info.bytes > c->bytes)
		return error_textf(ret_error, -EINVAL, "bytes %u: above CaptureBytes=%u", info.bytes, c->bytes);
	info.packets_per_second = c->packets_per_second;
	if (req->packets_per_second > 0 &&
	    (info.packets_per_second == 0 || req->packets_per_second < info.packets_per_second))
		info.packets_per_second = req->packets_per_second;
	info.direction = (CaptureDirection) dir;
	info.id = captures_next_id(cf->captures);
	info.ifindex = req->ifindex;
	snprintf(info.unit, sizeof(info.unit), "%s", req->unit ?: "");
	if (!req->ifindex)
		snprintf(info.cgroup, sizeof(info.cgroup), "%s", path + strlen(root));

	r = capture_new(
		&(CaptureOptions){
			.id = info.id,
			.pin_path = manager_pin_path(m),
			.n_possible_cpus = probes_possible_cpus(manager_probes(m)),
			.cgroup_path = req->ifindex ? NULL : path,
			.ifindex = (int) req->ifindex,
			.direction = info.direction,
			.bytes = info.bytes,
			.packets_per_second = info.packets_per_second,
			.compat = kernel_features_need_compat(manager_kernel(m)),
		},
		&capture,
		&info.cgroup_id);
	if (r == -EPERM && req->ifindex)
		return error_textf(
			ret_error,
			r,
			"failed to attach a capture to interface %s: %s (tc needs CAP_NET_ADMIN, which the "
			"shipped unit does not grant)",
			path,
			strerror(-r));
	if (r < 0)
		return error_textf(ret_error, r, "failed to attach a capture to %s: %s", path, strerror(-r));
	r = captures_add(cf->captures, capture, &info);
	if (r < 0)
		return error_textf(ret_error, r, "failed to keep the capture");
	log_info(
		"Capture %u started: %s (%s, %s, %u bytes, %u packets/s)",
		info.id,
		info.unit[0]         ? info.unit :
			info.ifindex ? "interface" :
				       info.cgroup,
		path,
		capture_direction_to_string(info.direction),
		info.bytes,
		info.packets_per_second);
	*ret_id = info.id;
	return 0;
}

static int capture_stop_one(CaptureFeature *cf, uint32_t id) {
	CaptureSummary s;
	int r;

	if (!cf->captures)
		return -ENOENT;
	r = captures_stop(cf->captures, id);
	if (r < 0)
		return r;
	if (captures_get(cf->captures, id, &s) >= 0)
		log_info(
			"Capture %u stopped: %" PRIu64 " packets seen, %" PRIu64 " captured, %" PRIu64
			" over the rate, %" PRIu64 " failed",
			id,
			s.stats.seen,
			s.stats.captured,
			s.stats.rate_dropped,
			s.stats.failed);
	return 0;
}

static int capture_feature_start(Feature *f) {
	CaptureFeature *cf = (CaptureFeature *) f;
	int r = captures_new(capture_cfg(f->manager)->max_captures, &cf->captures);

	if (r < 0)
		log_warning_errno(r, "Failed to set up packet captures: %m; StartCapture() will refuse");
	return 0;
}

/* On the bus: StartCapture(), StopCapture() and the capture objects --------------------------- */

struct BusCapture {
	CaptureFeature *feature;
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
	LIST_REMOVE(captures, c->feature->objects, c);
	sd_bus_slot_unref(c->slot);
	sd_bus_track_unref(c->track);
	free(c);
	return NULL;
}

static void bus_capture_end(BusCapture *c) {
	(void) capture_stop_one(c->feature, c->id);
	bus_capture_free(c);
}

static int on_requester_gone(sd_bus_track *track, void *userdata) {
	BusCapture *c = userdata;

	log_info("The requester of capture %u left the bus: capture stopped", c->id);
	bus_capture_end(c);
	return 0;
}

/* Whether the caller of the method being answered sees every event (root, AllowGroups=,
 * ControlGroups=): a capture's packet counters, polled, are a live rate of a unit's network
 * activity, and its packets go to no one else either. No caller: no. */
static bool caller_sees_all(CaptureFeature *cf, sd_bus *bus) {
	sd_bus_message *call = sd_bus_get_current_message(bus);
	sd_bus_error error = SD_BUS_ERROR_NULL;
	SubscriptionAccess access;
	uid_t uid;
	int r;

	if (!call)
		return false;
	r = bus_sender_access(manager_bus(cf->feature.manager), call, &uid, &access, &error);
	sd_bus_error_free(&error);
	return r >= 0 && access == SUBSCRIPTION_ACCESS_ALL;
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

	r = c->feature->captures ? captures_get(c->feature->captures, c->id, &s) : -ENOENT;
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
	if (!caller_sees_all(c->feature, bus))
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"The packet counters of capture %u are for root, AllowGroups= and ControlGroups=",
			c->id);
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
		else if (streq(key, "container"))
			s = &req->container;
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
				"unknown option \"%.64s\" (known: unit, cgroup, container, ifindex, direction, "
				"bytes, packets_per_second)",
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
	CaptureFeature *feature;
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
	CaptureFeature *cf, sd_bus_message *message, const CaptureRequest *req, uid_t uid, sd_bus_error *error) {
	_cleanup_free_ char *why = NULL;
	sd_bus *bus = sd_bus_message_get_bus(message);
	BusCapture *c;
	uint32_t id;
	int r;

	r = capture_start_one(cf, req, &id, &why);
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
		(void) capture_stop_one(cf, id);
		return -ENOMEM;
	}
	c->feature = cf;
	c->id = id;
	c->requester_uid = uid;
	snprintf(c->path, sizeof(c->path), "%s/%" PRIu32, BUS_CAPTURE_PATH_PREFIX, id);
	LIST_PREPEND(captures, cf->objects, c);
	r = sd_bus_add_object_vtable(bus, &c->slot, c->path, BUS_INTERFACE_CAPTURE, capture_vtable, c);
	if (r >= 0)
		r = sd_bus_track_new(bus, &c->track, on_requester_gone, c);
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
		r = capture_start(p->feature, p->message, &p->req, p->uid, &error);
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
			r = capture_start(p->feature, p->message, &p->req, p->uid, &error);
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
static int ask_systemd_for_cgroup(
	CaptureFeature *cf, sd_bus_message *message, const CaptureRequest *req, uid_t uid) {
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
	*p = (PendingCapture){ .feature = cf, .message = sd_bus_message_ref(message), .req = *req, .uid = uid };
	r = sd_bus_call_method_async(
		sd_bus_message_get_bus(message),
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

static int method_start_capture(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	CaptureRequest req = {};
	CaptureFeature *cf = userdata;
	Bus *b = manager_bus(cf->feature.manager);
	uid_t uid;
	int r;

	r = bus_require_control(b, message, "StartCapture", &uid, error);
	if (r < 0)
		return r;
	r = read_options(message, &req, error);
	if (r < 0)
		return r;
	req.may_capture_host = uid == 0 || capture_cfg(cf->feature.manager)->allow_host_captures;
	if (req.unit && sd_booted() > 0) {
		r = ask_systemd_for_cgroup(cf, message, &req, uid);
		if (r != 0)
			return r;
	}
	return capture_start(cf, message, &req, uid, error);
}

/* Only the requester (by uid) or root ends a capture early: a ControlGroups= member cannot stop
 * another admin's capture. */
static int method_stop_capture(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	CaptureFeature *cf = userdata;
	Bus *b = manager_bus(cf->feature.manager);
	const char *path;
	uid_t uid;
	int r;

	r = bus_require_control(b, message, "StopCapture", &uid, error);
	if (r < 0)
		return r;
	r = sd_bus_message_read(message, "o", &path);
	if (r < 0)
		return r;
	LIST_FOREACH(captures, c, cf->objects)
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

/* The bus is gone or closing: no requester can stop its capture any more, so each ends. */
static void capture_bus_gone(Feature *f) {
	CaptureFeature *cf = (CaptureFeature *) f;

	while (cf->objects)
		bus_capture_end(cf->objects);
}

static void capture_done(Feature *f) {
	CaptureFeature *cf = (CaptureFeature *) f;

	while (cf->objects)
		bus_capture_free(cf->objects);
	cf->captures = captures_free(cf->captures); /* detaches the active ones */
}

static int append_capture(sd_bus_message *m, const CaptureSummary *c) {
	int r = sd_bus_message_append(
		m,
		"{sv}{sv}{sv}{sv}{sv}{sv}",
		"id",
		"u",
		c->id,
		"unit",
		"s",
		c->unit,
		"cgroup",
		"s",
		c->cgroup,
		"direction",
		"s",
		capture_direction_to_string(c->direction),
		"active",
		"b",
		(int) c->active,
		"bytes",
		"u",
		c->bytes);

	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "cgroup_id", c->cgroup_id },
			{ "ifindex", c->ifindex },
			{ "packets_per_second", c->packets_per_second },
			{ "seen", c->stats.seen },
			{ "captured", c->stats.captured },
			{ "rate_dropped", c->stats.rate_dropped },
			{ "failed", c->stats.failed });
	return r;
}

/* "capture": the limits, the totals and each active or recently ended capture. */
static int capture_stats_append(Feature *f, sd_bus_message *m) {
	CaptureFeature *cf = (CaptureFeature *) f;
	_cleanup_free_ CaptureSummary *list = NULL;
	CaptureTotals t = {};
	size_t n = 0;
	int r;

	if (cf->captures) {
		r = captures_snapshot(cf->captures, &list, &n, &t);
		if (r < 0)
			return r;
	}
	r = open_section(m, "capture");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "max_captures", capture_cfg(f->manager)->max_captures },
			{ "started", t.started },
			{ "stopped", t.stopped },
			{ "refused", t.refused },
			{ "seen", t.stats.seen },
			{ "captured", t.stats.captured },
			{ "rate_dropped", t.stats.rate_dropped },
			{ "failed", t.stats.failed });
	/* GetStats() answers everyone the totals; each capture, only those who see its packets. */
	if (cf->captures && !caller_sees_all(cf, sd_bus_message_get_bus(m)))
		n = 0;
	if (r >= 0)
		r = open_entry(m, "captures", "aa{sv}", 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = append_capture(m, &list[i]);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = close_entry(m);
	return r < 0 ? r : close_entry(m);
}

/* clang-format off */
static const sd_bus_vtable capture_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("StartCapture",
	                         "a{sv}", SD_BUS_PARAM(options),
	                         "o", SD_BUS_PARAM(capture),
	                         method_start_capture, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("StopCapture",
	                         "o", SD_BUS_PARAM(capture),
	                         NULL, "",
	                         method_stop_capture, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

const FeatureVtable capture_feature = {
	.name = "capture",
	.object_size = sizeof(CaptureFeature),
	.config = &capture_config,
	.start = capture_feature_start,
	.done = capture_done,
	.bus_vtable = capture_bus_vtable,
	.bus_gone = capture_bus_gone,
	.stats_append = capture_stats_append,
};
