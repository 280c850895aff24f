/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bpffs checks, pinned map compatibility, and cleanup of perfrelay's pins. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/magic.h>

#include "base/log.h"
#include "kernel/pins.h"

/* Maps perfrelay creates under the pin root (the probes object's maps, pinned by name). */
static const char *const owned_maps[] = { "events",
					  "critical",
					  "counters",
					  "open_args",
					  "connect_args",
					  "probes_scratch",
					  "path_scratch",
					  "received",
					  "idle",
					  "recorder",
					  "recorder_on",
					  "recorder_stats",
					  "counters_config",
					  "counters_stats",
					  "counters_last",
					  "counters_procs",
					  "counters_cgroups",
					  "exit_pending",
					  "counters_cgroups_users",
					  "counters_users_cgroup_ids",
					  "demand",
					  "filtered",
					  "unit_counts",
					  "unit_counts_full",
					  "throttle" };

static int mkdir_bpffs(const char *path) {
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return log_error_errno(-errno, "Failed to create pin directory %s: %m", path);
	return 0;
}

int pins_prepare(const char *pin_path) {
	_cleanup_free_ char *parent = strdup(pin_path), *links = NULL;
	struct statfs fs;
	char *slash;

	if (!parent)
		return -ENOMEM;
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	else
		strcpy(parent, "/");

	if (statfs(parent, &fs) < 0)
		return log_error_errno(
			-errno,
			"PinPath=%s: cannot access %s: %m (is bpffs mounted? "
			"mount -t bpf bpf /sys/fs/bpf)",
			pin_path,
			parent);
	if (fs.f_type != BPF_FS_MAGIC)
		return log_error_errno(
			-ENOTSUP,
			"PinPath=%s: %s is not a bpffs mount "
			"(mount -t bpf bpf /sys/fs/bpf)",
			pin_path,
			parent);
	if (mkdir_bpffs(pin_path) < 0)
		return -errno;
	if (asprintf(&links, "%s/links", pin_path) < 0)
		return -ENOMEM;
	if (mkdir_bpffs(links) < 0)
		return -errno;
	free(links);
	/* The counter arrays (docs/counters.md). */
	if (asprintf(&links, "%s/perf-counters", pin_path) < 0)
		return -ENOMEM;
	return mkdir_bpffs(links);
}

int pins_lock(const char *pin_path) {
	_cleanup_close_ int fd = open(pin_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return negative_errno();
	/* flock(), not a lock file: it lives on the directory every user of the pin root names,
	 * and the kernel drops it with the last descriptor, so a crashed daemon leaves none. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return negative_errno();
	return TAKE_FD(fd);
}

int pins_clear_slots(int events_fd, unsigned n_slots, const CpuSet *keep) {
	int r = 0;

	for (unsigned cpu = 0; cpu < n_slots; cpu++) {
		uint32_t key = cpu;

		if (keep && cpuset_contains(keep, cpu))
			continue;
		/* ENOENT: the slot is empty already. */
		if (bpf_map_delete_elem(events_fd, &key) < 0 && errno != ENOENT)
			r = negative_errno();
	}
	return r;
}

/* Empties every slot of <pin_path>/<name> (a perf event array: "events", "critical"), if it is
 * pinned: the perf events a daemon left there (a crashed one leaves all of them;
 * BPF_F_PRESERVE_ELEMS keeps them) are released even while attached producers or another
 * holder of the map keep the array itself alive. */
static int pins_clear_array(const char *pin_path, const char *name) {
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	char path[PATH_MAX];
	_cleanup_close_ int fd = -EBADF;
	int r;

	snprintf(path, sizeof(path), "%s/%s", pin_path, name);
	fd = bpf_obj_get(path);
	if (fd < 0)
		return errno == ENOENT ? 0 : log_error_errno(-errno, "Failed to open pin %s: %m", path);
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return log_error_errno(-errno, "Pin %s is not a BPF map (%m)", path);
	if (info.type != BPF_MAP_TYPE_PERF_EVENT_ARRAY)
		return log_error_errno(-EINVAL, "Pin %s is not a perf event array", path);
	r = pins_clear_slots(fd, info.max_entries, NULL);
	if (r < 0)
		return log_error_errno(r, "Failed to clear the slots of %s: %m", path);
	return 0;
}

int pins_get_map_id(const char *path, uint32_t *ret) {
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	_cleanup_close_ int fd = bpf_obj_get(path);

	if (fd < 0)
		return negative_errno();
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return negative_errno();
	*ret = info.id;
	return 0;
}

int pins_check_map(const char *path, const struct bpf_map *expected, bool replace) {
	struct bpf_map_info info = {};
	uint32_t len = sizeof(info);
	char diff[512] = "";
	size_t n = 0;
	_cleanup_close_ int fd = bpf_obj_get(path);

	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return log_error_errno(-errno, "Failed to open pin %s: %m", path);
	}
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return log_error_errno(-errno, "Pin %s is not a BPF map (%m)", path);

#define CHECK(field, want)                                   \
	if ((uint64_t) info.field != (uint64_t) (want))      \
		n += snprintf(                               \
			diff + n,                            \
			sizeof(diff) - MIN(n, sizeof(diff)), \
			"%s%s is %llu, expected %llu",       \
			n ? ", " : "",                       \
			#field,                              \
			(unsigned long long) info.field,     \
			(unsigned long long) (want));
	CHECK(type, bpf_map__type(expected));
	CHECK(key_size, bpf_map__key_size(expected));
	CHECK(value_size, bpf_map__value_size(expected));
	CHECK(max_entries, bpf_map__max_entries(expected));
	CHECK(map_flags, bpf_map__map_flags(expected));
#undef CHECK
	if (n == 0)
		return 0;

	if (!replace)
		return log_error_errno(
			-EEXIST,
			"Pinned map %s is incompatible: %s. Remove it (perfrelayd "
			"--cleanup) or set ReplaceIncompatiblePins=yes",
			path,
			diff);
	log_warning("Replacing incompatible pinned map %s: %s", path, diff);
	if (unlink(path) < 0)
		return log_error_errno(-errno, "Failed to remove pin %s: %m", path);
	return 0;
}

static int unlink_pin(const char *dir, const char *name, unsigned *removed) {
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (unlink(path) < 0) {
		if (errno == ENOENT)
			return 0;
		return log_error_errno(-errno, "Failed to remove pin %s: %m", path);
	}
	(*removed)++;
	return 0;
}

/* Unlinks every pin in pin_path/sub and the directory itself. */
static int unlink_dir_pins(const char *pin_path, const char *sub, unsigned *removed) {
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int r = 0;

	snprintf(dir, sizeof(dir), "%s/%s", pin_path, sub);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			r = unlink_pin(dir, de->d_name, removed) ?: r;
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		r = log_error_errno(-errno, "Failed to remove %s: %m", dir);
	return r;
}

int pins_cleanup(const char *pin_path) {
	unsigned removed = 0;
	_cleanup_close_ int lock = -EBADF;
	int r = 0;

	lock = pins_lock(pin_path);
	if (lock == -ENOENT) {
		log_info("Nothing to clean up: %s does not exist", pin_path);
		return 0;
	}
	if (lock == -EWOULDBLOCK)
		return log_error_errno(lock, "A perfrelayd serves %s: stop it before --cleanup", pin_path);
	if (lock < 0)
		return log_error_errno(lock, "Failed to lock %s: %m", pin_path);

	/* Slots first: once the pins are gone nobody could clear a ring left in the array, and
	 * producers still attached would keep writing records into it that nobody reads. */
	r = pins_clear_array(pin_path, "events") ?: pins_clear_array(pin_path, "critical");
	if (r < 0)
		return r;

	/* Every pin under links/ is a probe link perfrelay made, every pin under perf-counters/
	 * a counter array: those directories are ours. */
	r = unlink_dir_pins(pin_path, "links", &removed) ?: r;
	r = unlink_dir_pins(pin_path, "perf-counters", &removed) ?: r;
	for (size_t i = 0; i < ELEMENTSOF(owned_maps); i++)
		r = unlink_pin(pin_path, owned_maps[i], &removed) ?: r;
	if (rmdir(pin_path) < 0 && errno != ENOENT) {
		if (errno == ENOTEMPTY)
			log_warning("Left %s in place: it holds pins perfrelay did not create", pin_path);
		else
			r = log_error_errno(-errno, "Failed to remove %s: %m", pin_path);
	}
	log_info("Removed %u pins under %s", removed, pin_path);
	return r;
}
