/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for containerid.c: the container of a cgroup path, for each runtime's layouts (as
 * Docker, Podman rootful and rootless, containerd, CRI-O and systemd-nspawn make them, systemd
 * driver and cgroupfs), the nearest one where containers nest, and paths that name none. */

#include <stdio.h>
#include <string.h>

#include "kernel/containerid.h"
#include "kernel/unitname.h"

#include "unit-test.h"


#define ID  "3f9c0e1b2a4d5c6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e1"
#define ID2 "8a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e877"

static void test_layouts(void) {
	static const struct {
		const char *path;
		ContainerRuntime runtime;
		const char *id;
		bool monitor;
		uid_t owner; /* 0: the system's, (uid_t) -1 */
	} cases[] = {
		/* Docker: systemd driver, cgroupfs */
		{ "/system.slice/docker-" ID ".scope", CONTAINER_DOCKER, ID, false },
		{ "/docker/" ID, CONTAINER_DOCKER, ID, false },
		{ "/docker/" ID "/sub", CONTAINER_DOCKER, ID, false },
		/* Podman rootful: systemd driver (crun's "container" leaf too), cgroupfs (this
		 * machine's hybrid layout), its conmon */
		{ "/machine.slice/libpod-" ID ".scope", CONTAINER_PODMAN, ID, false },
		{ "/machine.slice/libpod-" ID ".scope/container", CONTAINER_PODMAN, ID, false },
		{ "/libpod_parent/libpod-" ID, CONTAINER_PODMAN, ID, false },
		{ "/machine.slice/libpod-conmon-" ID ".scope", CONTAINER_PODMAN, ID, true },
		/* Podman rootless, in a user's manager */
		{ "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" ID ".scope",
		  CONTAINER_PODMAN,
		  ID,
		  false,
		  1000 },
		{ "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-conmon-" ID ".scope",
		  CONTAINER_PODMAN,
		  ID,
		  true,
		  1000 },
		/* containerd (CRI): systemd driver, cgroupfs under kubepods, cgroupfs beside systemd */
		{ "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b.slice/cri-containerd-" ID
		  ".scope",
		  CONTAINER_CONTAINERD,
		  ID,
		  false },
		{ "/kubepods/besteffort/pod1a2b3c/" ID, CONTAINER_CONTAINERD, ID, false },
		{ "/kubepods/pod1a2b3c/" ID, CONTAINER_CONTAINERD, ID, false },
		{ "/system.slice/containerd.service/kubepods-burstable-pod1a2b.slice:cri-containerd:" ID,
		  CONTAINER_CONTAINERD,
		  ID,
		  false },
		/* CRI-O and its conmon */
		{ "/kubepods.slice/kubepods-pod1a2b.slice/crio-" ID ".scope", CONTAINER_CRIO, ID, false },
		{ "/kubepods.slice/kubepods-pod1a2b.slice/crio-conmon-" ID ".scope", CONTAINER_CRIO, ID, true },
		/* systemd-nspawn machines, their names unescaped */
		{ "/machine.slice/machine-web.scope", CONTAINER_NSPAWN, "web", false },
		{ "/machine.slice/machine-web.scope/system.slice/nginx.service", CONTAINER_NSPAWN, "web", false },
		{ "/machine.slice/machine-perfrelay\\x2dtest\\x2d42.scope/init.scope",
		  CONTAINER_NSPAWN,
		  "perfrelay-test-42",
		  false },
		/* Nested: podman inside a machine is podman's container */
		{ "/machine.slice/machine-web.scope/machine.slice/libpod-" ID2 ".scope",
		  CONTAINER_PODMAN,
		  ID2,
		  false },
		{ "/docker/" ID "/docker/" ID2, CONTAINER_DOCKER, ID2, false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ContainerRef c;

		CHECK(container_from_cgroup_path(cases[i].path, &c), "%s: no container", cases[i].path);
		CHECK(c.runtime == cases[i].runtime,
		      "%s: runtime %d, want %d",
		      cases[i].path,
		      c.runtime,
		      cases[i].runtime);
		CHECK(strcmp(c.id, cases[i].id) == 0, "%s: id %s", cases[i].path, c.id);
		CHECK(c.monitor == cases[i].monitor, "%s: monitor %d", cases[i].path, c.monitor);
		CHECK(c.owner == (cases[i].owner ? cases[i].owner : (uid_t) -1),
		      "%s: owner %d",
		      cases[i].path,
		      (int) c.owner);
	}
}

static void test_none(void) {
	static const char *const paths[] = {
		"",
		"/",
		"/system.slice/sshd.service",
		"/user.slice/user-1000.slice/session-3.scope",
		/* a unit that merely looks like one */
		"/system.slice/docker.service",
		"/system.slice/docker-" ID ".service/x/../y",
		"/system.slice/docker-3f9c.scope",    /* a short id */
		"/system.slice/docker-" ID "0.scope", /* 65 digits */
		"/system.slice/docker-3F9C0E1B2A4D5C6E7F8091A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3C4D5E1.scope", /* uppercase */
		"/" ID,               /* a bare id at the top: nobody's layout */
		"/system.slice/" ID,  /* nor under a slice */
		"/machine-web.scope", /* a machine scope outside machine.slice */
		"/machine.slice/machine-.scope",
		"/machine.slice/machine-a\\x2.scope", /* a broken escape */
		"/machine.slice/machine-a\\x2g.scope",
		"/machine.slice/machine-a\\\\b.scope",
		"/machine.slice/machine-a b.scope", /* a byte no host name has */
		"/machine.slice/machine-"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.scope", /* 65 characters */
		"/system.slice/containerd.service/x:cri-containerd:3f9c",
		/* a user's own cgroups named like a system runtime's containers */
		"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-" ID ".scope",
		"/user.slice/user-1000.slice/user@1000.service/docker/" ID,
		"/user.slice/user-1000.slice/user@1000.service/machine.slice/machine-web.scope",
		"/user.slice/user-1000.slice/session-2.scope/crio-" ID ".scope",
		"/system.slice/containerd.service/x:other:" ID,
	};

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		ContainerRef c = { .runtime = CONTAINER_DOCKER };

		CHECK(!container_from_cgroup_path(paths[i], &c),
		      "%s: container %s %s",
		      paths[i],
		      container_runtime_to_string(c.runtime) ?: "?",
		      c.id);
		CHECK(c.runtime == CONTAINER_NONE && c.id[0] == '\0' && c.owner == cgroup_path_owner(paths[i]),
		      "%s: *ret not cleared",
		      paths[i]);
	}
}

static void test_names(void) {
	CHECK(strcmp(container_runtime_to_string(CONTAINER_PODMAN), "podman") == 0, "podman");
	CHECK(strcmp(container_runtime_to_string(CONTAINER_NSPAWN), "systemd-nspawn") == 0, "nspawn");
	CHECK(container_runtime_to_string(CONTAINER_NONE) == NULL, "none");
	CHECK(container_runtime_to_string(_CONTAINER_RUNTIME_MAX) == NULL, "max");
}

int main(void) {
	test_layouts();
	test_none();
	test_names();
	return failures ? 1 : 0;
}
