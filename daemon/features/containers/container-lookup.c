/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading the runtimes' state files (container-lookup.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "features/containers/container-lookup.h"
#include "features/containers/container-state.h"

/* Podman's storage of a user: $XDG_DATA_HOME is the user's environment, which the daemon does
 * not know; the default is what it reads (docs/containers.md). */
#define ROOTLESS_STORAGE ".local/share/containers/storage"

/* Opens path below dir_fd following no symbolic link (openat2's RESOLVE_NO_SYMLINKS, Linux 5.6). */
static int open_nofollow(int dir_fd, const char *path, int flags) {
	struct open_how how = {
		.flags = (uint64_t) (flags | O_CLOEXEC | O_NOFOLLOW),
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	/* Below the daemon's floor (5.10) the call is missing: then nothing is read (fail closed),
	 * rather than a path a user could point elsewhere. */
	long fd = syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int) fd;
}

/* A root an administrator chose (PodmanRoot=, DockerRoot=): its path may pass through links
 * (/var/lib/docker moved to a data disk), but it must be root's; below it nothing is followed. */
static int open_root(const char *path) {
	struct stat st;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_uid != 0) {
		safe_close(fd);
		return -EPERM;
	}
	return fd;
}

/* Reads a state file: a regular file owned by `owner`, at most CONTAINER_STATE_MAX bytes, opened
 * without blocking (a FIFO put in its place is refused, never waited on). */
static int read_state(int dir_fd, const char *path, uid_t owner, char **ret, size_t *ret_len) {
	_cleanup_close_ int fd = open_nofollow(dir_fd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t n = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EBADFD;
	if (st.st_uid != owner)
		return -EPERM;
	if (st.st_size > (off_t) CONTAINER_STATE_MAX)
		return -EFBIG;
	buf = malloc((size_t) st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (n < (size_t) st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t) st.st_size - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break; /* cut short while we read: what there is */
		n += (size_t) k;
	}
	buf[n] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = n;
	return 0;
}

/* The storage root of a rootless user's Podman, opened: their home's (from the passwd
 * database), which must be theirs. */
static int open_user_storage(uid_t uid) {
	_cleanup_free_ char *buf = NULL;
	_cleanup_close_ int home = -EBADF;
	struct passwd pw, *found = NULL;
	struct stat st;
	long size = sysconf(_SC_GETPW_R_SIZE_MAX);
	int r, fd;

	if (size <= 0)
		size = 16384;
	buf = malloc((size_t) size);
	if (!buf)
		return -ENOMEM;
	r = getpwuid_r(uid, &pw, buf, (size_t) size, &found);
	if (r != 0)
		return -r;
	if (!found || !pw.pw_dir || pw.pw_dir[0] != '/')
		return -ENOENT;
	home = open(pw.pw_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (home < 0)
		return -errno;
	if (fstat(home, &st) < 0)
		return -errno;
	if (st.st_uid != uid)
		return -EPERM;
	/* Below the home, no link: what the user made there is all they can point us at. */
	fd = open_nofollow(home, ROOTLESS_STORAGE, O_RDONLY | O_DIRECTORY);
	return fd;
}

/* Podman: every "<driver>-containers/containers.json" of the storage (overlay, vfs, btrfs...). */
static int lookup_podman(const ContainerRef *ref, const ContainerRoots *roots, ContainerNames **ret) {
	_cleanup_close_ int root = -EBADF;
	uid_t owner = ref->owner == (uid_t) -1 ? 0 : ref->owner;
	DIR *d;
	struct dirent *de;
	int r = -ENOENT;

	root = ref->owner == (uid_t) -1 ? open_root(roots->podman) : open_user_storage(ref->owner);
	if (root < 0)
		return root;
	d = fdopendir(root);
	if (!d)
		return -errno;
	root = -EBADF; /* the DIR's now */
	while ((de = readdir(d))) {
		_cleanup_free_ char *text = NULL, *path = NULL;
		size_t len, n = strlen(de->d_name);
		int k;

		if (n <= strlen("-containers") ||
		    !streq(de->d_name + n - strlen("-containers"), "-containers"))
			continue;
		if (asprintf(&path, "%s/containers.json", de->d_name) < 0) {
			r = -ENOMEM;
			break;
		}
		k = read_state(dirfd(d), path, owner, &text, &len);
		if (k >= 0)
			k = container_state_podman(text, len, ref->id, ret);
		if (k == 1) {
			r = 1;
			break;
		}
		/* Not listed here: 0 unless every file failed. */
		if (k == 0 || r == -ENOENT)
			r = k;
	}
	closedir(d);
	return r;
}

static int lookup_docker(const ContainerRef *ref, const ContainerRoots *roots, ContainerNames **ret) {
	_cleanup_close_ int root = open_root(roots->docker);
	_cleanup_free_ char *text = NULL, *path = NULL;
	size_t len;
	int r;

	if (root < 0)
		return root;
	if (asprintf(&path, "containers/%s/config.v2.json", ref->id) < 0)
		return -ENOMEM;
	r = read_state(root, path, 0, &text, &len);
	if (r == -ENOENT)
		return 0; /* the Engine writes it as it creates the container */
	if (r < 0)
		return r;
	return container_state_docker(text, len, ref->id, ret);
}

int container_lookup(const ContainerRef *ref, const ContainerRoots *roots, ContainerNames **ret) {
	*ret = NULL;
	switch (ref->runtime) {
	case CONTAINER_PODMAN:
		return lookup_podman(ref, roots, ret);
	case CONTAINER_DOCKER:
		/* A rootless Docker's containers are not recognised (containerid.h). */
		return lookup_docker(ref, roots, ret);
	case CONTAINER_NSPAWN:
		/* The scope is named for the machine (machined's name): that is its name. */
		*ret = container_names_new(ref->id, NULL, NULL);
		return *ret ? 1 : -ENOMEM;
	default:
		return -EOPNOTSUPP;
	}
}
