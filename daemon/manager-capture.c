/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Packet captures in the manager (docs/capture.md): StartCapture() finds the unit's cgroup,
 * bounds the request by [Capture], and attaches a capture; StopCapture() and the requester's
 * departure (bus-capture.c) end it. */
#include "perfrelay-config.h"

#include <dirent.h>
#include <net/if.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "error-util.h"
#include "log.h"
#include "manager-internal.h"
#include "unitname.h"

/* A unit's cgroup without systemd to ask (bus-capture.c asks it when it runs): systemd names a
 * unit's cgroup after the unit, below its slices. Only directories root made are trusted: the walk
 * never descends into a delegated subtree (a user's manager, user@UID.service, or a cgroup whose
 * cgroup.subtree_control belongs to someone else), where any user could make a directory named
 * after a system unit. A name found twice is refused, naming the candidates. */
#define FIND_DEPTH_MAX      8
#define FIND_DIRS_MAX       65536u
#define FIND_CANDIDATES_MAX 4

typedef struct UnitSearch {
	const char *unit;
	unsigned budget;
	size_t n_found;
	char found[FIND_CANDIDATES_MAX][PATH_MAX];
} UnitSearch;

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

static int find_unit_cgroup(const char *dir, unsigned depth, UnitSearch *us) {
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

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (us->budget == 0) {
			r = -E2BIG;
			break;
		}
		us->budget--;
		if (snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) >= (int) sizeof(sub))
			continue;
		if (streq(de->d_name, us->unit)) {
			if (us->n_found < FIND_CANDIDATES_MAX)
				snprintf(us->found[us->n_found], sizeof(us->found[0]), "%s", sub);
			us->n_found++;
		}
		if (!cgroup_is_delegated(sub, de->d_name))
			r = find_unit_cgroup(sub, depth + 1, us);
	}
	closedir(d);
	return r;
}

int manager_start_capture(Manager *m, const CaptureRequest *req, uint32_t *ret_id, char **ret_error) {
	const Config *c = m->config;
	CaptureSummary info = {};
	Capture *capture = NULL;
	char path[PATH_MAX];
	const char *root;
	UnitSearch us;
	int dir, r;

	if (!m->captures || !m->cgroups)
		return error_textf(ret_error, -EOPNOTSUPP, "packet capture needs a cgroup2 mount");
	root = cgroup_fs_path(m->cgroups);
	if (captures_full(m->captures)) {
		captures_count_refused(m->captures);
		return error_textf(
			ret_error, -EBUSY, "%u captures run already (MaxCaptures=)", c->max_captures);
	}
	if (!!req->unit + !!req->cgroup + !!req->ifindex != 1)
		return error_textf(
			ret_error, -EINVAL, "give one of the options \"unit\", \"cgroup\" and \"ifindex\"");
	if (req->ifindex) {
		char name[IF_NAMESIZE];

		if (!if_indextoname(req->ifindex, name))
			return error_textf(
				ret_error,
				-EINVAL,
				"no interface with index %u in perfrelayd's network namespace (the shipped unit has "
				"PrivateNetwork=yes)",
				req->ifindex);
		snprintf(path, sizeof(path), "%s", name);
	} else if (req->unit && req->unit_cgroup) {
		/* systemd said where the unit runs (bus-capture.c). */
		if (req->unit_cgroup[0] != '/' || strstr(req->unit_cgroup, "/.") ||
		    snprintf(path, sizeof(path), "%s%s", root, streq(req->unit_cgroup, "/") ? "" : req->unit_cgroup) >=
			    (int) sizeof(path))
			return error_textf(
				ret_error,
				-EINVAL,
				"systemd's ControlGroup of %s, \"%s\", is not a cgroup path",
				req->unit,
				req->unit_cgroup);
	} else if (req->unit) {
		if (!unit_name_is_attributable(req->unit, strlen(req->unit)))
			return error_textf(
				ret_error, -EINVAL, "\"%s\" is not a unit name processes run in", req->unit);
		us = (UnitSearch){ .unit = req->unit, .budget = FIND_DIRS_MAX };
		r = find_unit_cgroup(root, 0, &us);
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
				req->unit,
				root);
		if (us.n_found > 1)
			return error_textf(
				ret_error,
				-EINVAL,
				"unit %s names %zu cgroups (%s, %s%s%s%s%s): give the one to capture as \"cgroup\"",
				req->unit,
				us.n_found,
				us.found[0] + strlen(root),
				us.found[1] + strlen(root),
				us.n_found > 2 ? ", " : "",
				us.n_found > 2 ? us.found[2] + strlen(root) : "",
				us.n_found > 3 ? ", " : "",
				us.n_found > 3 ? us.found[3] + strlen(root) : "");
		snprintf(path, sizeof(path), "%s", us.found[0]);
	} else {
		/* No "." component and no trailing slash: "/" is the only way to say the root. */
		if (req->cgroup[0] != '/' || strstr(req->cgroup, "/.") || strstr(req->cgroup, "//") ||
		    (req->cgroup[1] && endswith(req->cgroup, "/")))
			return error_textf(
				ret_error,
				-EINVAL,
				"cgroup \"%s\": a path below the cgroup2 root, starting with /",
				req->cgroup);
		if (snprintf(path, sizeof(path), "%s%s", root, streq(req->cgroup, "/") ? "" : req->cgroup) >=
		    (int) sizeof(path))
			return error_textf(ret_error, -ENAMETOOLONG, "cgroup path too long");
	}
	/* Every packet of the host: root's decision, or the admin's by AllowHostCaptures=. */
	if ((req->ifindex || streq(path, root)) && !req->may_capture_host)
		return error_textf(
			ret_error,
			-EPERM,
			"capturing %s takes every packet of the host: it needs root (or AllowHostCaptures=yes "
			"for ControlGroups= members)",
			req->ifindex ? "an interface" : "the root cgroup");
	dir = req->direction ? capture_direction_from_string(req->direction) : CAPTURE_BOTH;
	if (dir < 0)
		return error_textf(
			ret_error, -EINVAL, "direction \"%s\": ingress, egress or both", req->direction);
	info.bytes = req->bytes ?: c->capture_bytes;
	if (info.bytes > c->capture_bytes)
		return error_textf(
			ret_error, -EINVAL, "bytes %u: above CaptureBytes=%u", info.bytes, c->capture_bytes);
	info.packets_per_second = c->capture_packets_per_second;
	if (req->packets_per_second > 0 &&
	    (info.packets_per_second == 0 || req->packets_per_second < info.packets_per_second))
		info.packets_per_second = req->packets_per_second;
	info.direction = (CaptureDirection) dir;
	info.id = captures_next_id(m->captures);
	info.ifindex = req->ifindex;
	snprintf(info.unit, sizeof(info.unit), "%s", req->unit ?: "");
	if (!req->ifindex)
		snprintf(info.cgroup, sizeof(info.cgroup), "%s", path + strlen(root));

	r = capture_new(
		&(CaptureOptions){
			.id = info.id,
			.pin_path = c->pin_path,
			.n_possible_cpus = probes_possible_cpus(m->probes),
			.cgroup_path = req->ifindex ? NULL : path,
			.ifindex = (int) req->ifindex,
			.direction = info.direction,
			.bytes = info.bytes,
			.packets_per_second = info.packets_per_second,
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
	r = captures_add(m->captures, capture, &info);
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

int manager_stop_capture(Manager *m, uint32_t id) {
	CaptureSummary s;
	int r;

	if (!m->captures)
		return -ENOENT;
	r = captures_stop(m->captures, id);
	if (r < 0)
		return r;
	if (captures_get(m->captures, id, &s) >= 0)
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

void manager_setup_captures(Manager *m) {
	int r = captures_new(m->config->max_captures, &m->captures);

	if (r < 0)
		log_warning_errno(r, "Failed to set up packet captures: %m; StartCapture() will refuse");
}
