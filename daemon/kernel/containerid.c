/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Container cgroup names, as the runtimes make them. The runc-style runtimes name a container's
 * cgroup PREFIX<64 hex digits>[.scope]: with systemd's cgroup driver a scope under a slice
 * ("docker-ID.scope", "libpod-ID.scope", "cri-containerd-ID.scope", "crio-ID.scope"), with
 * cgroupfs a directory ("/docker/ID", "/libpod_parent/libpod-ID", "/kubepods/besteffort/podUID/ID",
 * "crio-ID"); containerd without its systemd driver names it "SLICE:cri-containerd:ID". Podman's
 * and CRI-O's monitors (conmon) have cgroups of their own beside the container's
 * ("libpod-conmon-ID.scope", "crio-conmon-ID.scope"). systemd-nspawn's machines are
 * "machine-NAME.scope" under machine.slice, NAME escaped as systemd escapes unit names. */
#include <string.h>

#include "macro.h"
#include "kernel/containerid.h"
#include "kernel/unitname.h"

#define HEX_ID_LEN 64u

static const char *const runtime_names[_CONTAINER_RUNTIME_MAX] = {
	[CONTAINER_DOCKER] = "docker",         [CONTAINER_PODMAN] = "podman",
	[CONTAINER_CONTAINERD] = "containerd", [CONTAINER_CRIO] = "cri-o",
	[CONTAINER_NSPAWN] = "systemd-nspawn",
};

const char *container_runtime_to_string(ContainerRuntime r) {
	if (r <= CONTAINER_NONE || r >= _CONTAINER_RUNTIME_MAX)
		return NULL;
	return runtime_names[r];
}

bool container_ref_equal(const ContainerRef *a, const ContainerRef *b) {
	return a->runtime == b->runtime && a->owner == b->owner && a->monitor == b->monitor &&
		streq(a->id, b->id);
}

/* A component PREFIX<id>SUFFIX of the runc-style runtimes. */
static const struct {
	const char *prefix;
	ContainerRuntime runtime;
	bool monitor;
} hex_layouts[] = {
	/* Longer prefixes first: "libpod-conmon-" before "libpod-". */
	{ "libpod-conmon-", CONTAINER_PODMAN, true }, { "libpod-", CONTAINER_PODMAN, false },
	{ "docker-", CONTAINER_DOCKER, false },       { "cri-containerd-", CONTAINER_CONTAINERD, false },
	{ "crio-conmon-", CONTAINER_CRIO, true },     { "crio-", CONTAINER_CRIO, false },
};

static bool is_hex_id(const char *s, size_t n) {
	if (n != HEX_ID_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool has_prefix(const char *s, size_t n, const char *prefix, size_t *ret_len) {
	size_t k = strlen(prefix);

	*ret_len = k;
	return n >= k && memcmp(s, prefix, k) == 0;
}

static bool strip_suffix(size_t *n, const char *s, const char *suffix) {
	size_t k = strlen(suffix);

	if (*n < k || memcmp(s + *n - k, suffix, k) != 0)
		return false;
	*n -= k;
	return true;
}

static void set_id(ContainerRef *ret, ContainerRuntime runtime, bool monitor, const char *id, size_t n) {
	ret->runtime = runtime;
	ret->monitor = monitor;
	memcpy(ret->id, id, n);
	ret->id[n] = '\0';
}

/* systemd's unit name unescaping of a machine name: "\xNN" is the byte NN. A name with another
 * backslash, a byte machined would not allow in a host name, or too long is no machine's. */
static bool set_machine(ContainerRef *ret, const char *s, size_t n) {
	char name[CONTAINER_ID_MAX];
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '\\') {
			static const char hex[] = "0123456789abcdef";
			const char *hi, *lo;

			/* memchr() over the 16 digits only: a NUL is none of them. */
			if (i + 3 >= n || s[i + 1] != 'x' || !(hi = memchr(hex, s[i + 2], 16)) ||
			    !(lo = memchr(hex, s[i + 3], 16)))
				return false;
			c = (char) ((hi - hex) << 4 | (lo - hex));
			i += 3;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
		if (k + 1 >= sizeof(name))
			return false;
		name[k++] = c;
	}
	if (k == 0)
		return false;
	set_id(ret, CONTAINER_NSPAWN, false, name, k);
	return true;
}

/* Whether the component s (n bytes), whose parent component is parent (pn bytes, 0 at the top),
 * names a container; fills *ret if so. */
static bool component_container(const char *s, size_t n, const char *parent, size_t pn, ContainerRef *ret) {
	size_t k, idn = n;
	const char *colon;

	/* "machine-NAME.scope", directly under machine.slice */
	if (pn == strlen("machine.slice") && memcmp(parent, "machine.slice", pn) == 0 &&
	    has_prefix(s, n, "machine-", &k) && strip_suffix(&idn, s, ".scope"))
		return set_machine(ret, s + k, idn - k);

	(void) strip_suffix(&idn, s, ".scope");
	for (size_t i = 0; i < ELEMENTSOF(hex_layouts); i++)
		if (has_prefix(s, idn, hex_layouts[i].prefix, &k) && is_hex_id(s + k, idn - k)) {
			set_id(ret, hex_layouts[i].runtime, hex_layouts[i].monitor, s + k, idn - k);
			return true;
		}

	/* containerd with cgroupfs under a systemd slice: "kubepods-...-podUID.slice:cri-containerd:ID" */
	colon = memchr(s, ':', n);
	if (colon) {
		static const char tag[] = ":cri-containerd:";
		const char *id = colon + strlen(tag);

		if ((size_t) (s + n - colon) > strlen(tag) && memcmp(colon, tag, strlen(tag)) == 0 &&
		    is_hex_id(id, (size_t) (s + n - id))) {
			set_id(ret, CONTAINER_CONTAINERD, false, id, HEX_ID_LEN);
			return true;
		}
		return false;
	}

	/* A bare id: Docker's cgroupfs layout ("/docker/ID"), or a CRI runtime's under kubepods
	 * ("/kubepods/[QOS/]podUID/ID", which cri-o and containerd both make: containerd is the
	 * one that leaves no trace of itself, so the id is attributed to it). */
	if (!is_hex_id(s, n) || pn == 0)
		return false;
	if (pn == strlen("docker") && memcmp(parent, "docker", pn) == 0) {
		set_id(ret, CONTAINER_DOCKER, false, s, n);
		return true;
	}
	if (pn > 3 && memcmp(parent, "pod", 3) == 0) {
		set_id(ret, CONTAINER_CONTAINERD, false, s, n);
		return true;
	}
	return false;
}

bool container_from_cgroup_path(const char *path, ContainerRef *ret) {
	const char *p = path, *parent = "";
	uid_t owner = cgroup_path_owner(path);
	size_t pn = 0;
	bool found = false;

	*ret = (ContainerRef){ .runtime = CONTAINER_NONE, .owner = owner };
	for (;;) {
		ContainerRef c;
		size_t n;

		p += strspn(p, "/");
		n = strcspn(p, "/");
		if (n == 0)
			return found;
		/* The deepest: a container inside a machine (podman in an nspawn container) is the
		 * container. */
		if (component_container(p, n, parent, pn, &c) &&
		    (owner == (uid_t) -1 || c.runtime == CONTAINER_PODMAN)) {
			c.owner = owner;
			*ret = c;
			found = true;
		}
		parent = p;
		pn = n;
		p += n;
	}
}
