/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bpffs checks, pinned map compatibility, and cleanup of perfrelay's pins. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/magic.h>

#include "log.h"
#include "pins.h"

/* Maps perfrelay creates under the pin root (the probes object's maps, pinned by name). */
static const char *const owned_maps[] = { "events", "counters", "open_args", "connect_args", "probes_scratch",
                                          "received", "idle" };

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
		return log_error_errno(-errno, "PinPath=%s: cannot access %s: %m (is bpffs mounted? "
		                       "mount -t bpf bpf /sys/fs/bpf)", pin_path, parent);
	if (fs.f_type != BPF_FS_MAGIC)
		return log_error_errno(-ENOTSUP, "PinPath=%s: %s is not a bpffs mount "
		                       "(mount -t bpf bpf /sys/fs/bpf)", pin_path, parent);
	if (mkdir_bpffs(pin_path) < 0)
		return -errno;
	if (asprintf(&links, "%s/links", pin_path) < 0)
		return -ENOMEM;
	return mkdir_bpffs(links);
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

#define CHECK(field, want)                                                                          \
	if ((uint64_t)info.field != (uint64_t)(want))                                               \
		n += snprintf(diff + n, sizeof(diff) - MIN(n, sizeof(diff)), "%s%s is %llu, expected %llu", \
		              n ? ", " : "", #field, (unsigned long long)info.field,                        \
		              (unsigned long long)(want));
	CHECK(type, bpf_map__type(expected));
	CHECK(key_size, bpf_map__key_size(expected));
	CHECK(value_size, bpf_map__value_size(expected));
	CHECK(max_entries, bpf_map__max_entries(expected));
	CHECK(map_flags, bpf_map__map_flags(expected));
#undef CHECK
	if (n == 0)
		return 0;

	if (!replace)
		return log_error_errno(-EEXIST, "Pinned map %s is incompatible: %s. Remove it (perfrelayd "
		                       "--cleanup) or set ReplaceIncompatiblePins=yes", path, diff);
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

int pins_cleanup(const char *pin_path) {
	char links[PATH_MAX];
	unsigned removed = 0;
	DIR *d;
	int r = 0;

	snprintf(links, sizeof(links), "%s/links", pin_path);
	d = opendir(links);
	if (d) {
		struct dirent *de;

		/* Every pin under links/ is a probe link perfrelay made: that directory is ours. */
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				r = unlink_pin(links, de->d_name, &removed) ?: r;
		closedir(d);
		if (rmdir(links) < 0 && errno != ENOENT)
			r = log_error_errno(-errno, "Failed to remove %s: %m", links);
	}
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
