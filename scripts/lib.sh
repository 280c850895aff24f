# SPDX-License-Identifier: LGPL-2.1-or-later
# shellcheck shell=bash
# Helpers shared by scripts/run and scripts/test: install what is missing, build, mount bpffs/tracefs.
# Source this file; it does not change shell options of its caller (callers use set -euo pipefail).

# The repository root, resolved from this file's own location so the scripts work from any cwd.
PERFRELAY_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
export PERFRELAY_ROOT

# What building and running perfrelayd needs on Debian 12 and 13 (scripts/run): the compilers and the
# libraries of the daemon and perfrelayctl. libc6-dev is listed explicitly because gcc only
# recommends it, and images that disable recommends would otherwise lack the C headers.
PERFRELAY_RUN_PACKAGES=(
	libbpf-dev bpftool clang llvm libsystemd-dev libjson-c-dev libelf-dev zlib1g-dev libzstd-dev
	meson ninja-build pkg-config python3 gcc libc6-dev
)
# What the tests, the benchmark and the packages add (scripts/test, bench/run, scripts/build-debs).
# libclang-rt-N-dev is the libFuzzer and sanitizer runtime of the fuzz suite (clang only
# recommends it; N is the release's default clang, see perfrelay_clang_rt below); libdbus-1-dev gives dbus-1.pc (where the bus policy goes), dbus the private
# buses of the tests; systemd-container (systemd-nspawn) and debootstrap run the system suite
# under a real systemd. libnats-dev builds perfrelay-export; nats-server and prometheus (with
# promtool) run in the export/metrics tests; qemu-system-x86 and busybox-static boot Debian's
# kernel packages for the kernels suite (tests/kernels); clang-format (and git, for the file
# list) checks the formatting (tests/style); tshark and tcpdump read the pcapng files of the
# capture test, iproute2 (ip) makes its network namespace. libcurl4-openssl-dev,
# libprotobuf-c-dev and protobuf-c-compiler build perfrelay-export's OTLP target; openssl makes
# the CA and certificates of the export TLS test; nodejs and npm run the OTLP test's receiver
# (npm's OpenTelemetry packages; test_otlp installs them) and are added only where no node/npm
# is on PATH (a machine may carry another build of Node.js that provides both). scdoc builds the
# manual pages and man-db renders them in their test; debhelper, dpkg-dev, fakeroot and lintian
# build and check the Debian packages (scripts/build-debs, tests/system/test_package.py);
# bash-completion (its completionsdir, and the completion test), zsh and fish check the
# completions. python3-pytest runs the python suites (tests/pytest.ini). e2fsprogs (mkfs.ext4)
# makes the history test's small full filesystem (a minimal install lacks it).

# The Debian release's codename (bookworm, trixie), or empty where /etc/os-release says none.
PERFRELAY_CODENAME="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"

# The runtime package of the release's default clang: that of the installed clang, else Debian 12's
# (clang 14) or 13's (clang 19) by the release's codename. Package names that differ between the
# releases are chosen here, once.
perfrelay_clang_rt() {
	local v=""

	# /usr/bin/clang -> clang-N -> /usr/lib/llvm-N/bin/clang
	if [[ "$(readlink -f /usr/bin/clang 2>/dev/null)" =~ llvm-([0-9]+)/ ]]; then
		v="${BASH_REMATCH[1]}"
	else
		case "$PERFRELAY_CODENAME" in
		trixie) v=19 ;;
		*) v=14 ;;
		esac
	fi
	echo "libclang-rt-$v-dev"
}

PERFRELAY_TEST_PACKAGES=(
	dbus python3-pytest
	"$(perfrelay_clang_rt)" libdbus-1-dev systemd-container debootstrap
	libnats-dev nats-server prometheus
	qemu-system-x86 busybox-static podman runc docker.io
	clang-format git
	tshark tcpdump iproute2
	libcurl4-openssl-dev libprotobuf-c-dev protobuf-c-compiler openssl
	scdoc man-db debhelper dpkg-dev fakeroot lintian bash-completion zsh fish e2fsprogs
)
# systemd.pc, which names the unit directory the package installs into, is systemd's own on
# Debian 12 and systemd-dev's from Debian 13 on (without it the build falls back to /lib, which
# Debian 13's packages no longer use).
[[ "$PERFRELAY_CODENAME" == bookworm ]] ||
	PERFRELAY_TEST_PACKAGES+=(systemd-dev)
command -v node >/dev/null 2>&1 || PERFRELAY_TEST_PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PERFRELAY_TEST_PACKAGES+=(npm)

log() {
	printf '%s: %s\n' "${0##*/}" "$*" >&2
}

die() {
	log "error: $*"
	exit 1
}

is_root() {
	[[ "$(id -u)" -eq 0 ]]
}

package_installed() {
	local status
	status="$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" || return 1
	[[ "$status" == "install ok installed" ]]
}

# ensure_packages [run|all]: install, with apt-get, only the packages that are not installed yet:
# what building and running need ("run"), or that and what the tests use ("all", the default).
# 'apt-get update' runs once, and only when something is missing.
ensure_packages() {
	local missing=() p wanted=("${PERFRELAY_RUN_PACKAGES[@]}")

	command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: these scripts expect Debian 12 or 13"

	[[ "${1:-all}" == run ]] || wanted+=("${PERFRELAY_TEST_PACKAGES[@]}")
	for p in "${wanted[@]}"; do
		package_installed "$p" || missing+=("$p")
	done

	if [[ ${#missing[@]} -eq 0 ]]; then
		return 0
	fi

	if ! is_root; then
		die "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
	fi

	log "installing missing packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# tshark asks whether non-root users may capture; perfrelay's tests run it as root on files.
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
	apt-get update -q
	apt-get install -y -q "${missing[@]}"
}

# The arm64 suite (tests/arm64): the cross compilers, qemu-user (its static build, which
# binfmt_misc can run inside any root) and binfmt-support, and through multiarch the arm64 builds
# of the libraries perfrelay links (ensure_arm64_packages adds the architecture to dpkg).
PERFRELAY_ARM64_PACKAGES=(crossbuild-essential-arm64 qemu-user-static binfmt-support)
PERFRELAY_ARM64_LIBRARIES=(
	libc6-dev libbpf-dev libsystemd-dev libjson-c-dev libelf-dev zlib1g-dev libzstd-dev
	libnats-dev libcurl4-openssl-dev libprotobuf-c-dev libdbus-1-dev
)

ensure_arm64_packages() {
	local missing=() p

	for p in "${PERFRELAY_ARM64_PACKAGES[@]}"; do
		package_installed "$p" || missing+=("$p")
	done
	for p in "${PERFRELAY_ARM64_LIBRARIES[@]}"; do
		package_installed "$p:arm64" || missing+=("$p:arm64")
	done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	is_root || die "missing packages: ${missing[*]} (run as root)"
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		log "adding the arm64 architecture to dpkg (multiarch)"
		dpkg --add-architecture arm64
	fi
	log "installing missing packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q "${missing[@]}"
}

# mount_fs TYPE DIR: mount a pseudo filesystem of TYPE at DIR unless DIR already is a mount point.
mount_fs() {
	local type="$1" dir="$2"

	if mountpoint -q -- "$dir" 2>/dev/null; then
		return 0
	fi
	if ! is_root; then
		log "$type is not mounted at $dir and mounting it needs root"
		return 1
	fi
	if [[ ! -d "$dir" ]]; then
		log "$dir does not exist: the kernel lacks $type support or /sys is not mounted"
		return 1
	fi
	log "mounting $type at $dir"
	if ! mount -t "$type" "$type" "$dir"; then
		log "failed to mount $type at $dir (in a container: needs a privileged container or a bind mount from the host)"
		return 1
	fi
}

# Mount bpffs (pins) and tracefs (tracepoints) if they are not mounted yet.
# Returns non-zero if either is still missing; the caller decides whether that is fatal.
ensure_mounts() {
	local r=0

	mount_fs bpf /sys/fs/bpf || r=1
	mount_fs tracefs /sys/kernel/tracing || r=1
	return "$r"
}

# Where a system bus runs, install perfrelayd's bus policy (config/org.perfrelay1.conf) unless the
# same file is there, and have the bus reload its configuration, so that the daemon may own
# org.perfrelay1 and perfrelayctl status, top and tree work. The package installs it under
# /usr/share/dbus-1/system.d; an administrator's copy in /etc wins, as dbus-daemon reads both.
ensure_bus_policy() {
	local policy="$PERFRELAY_ROOT/config/org.perfrelay1.conf" dest=/etc/dbus-1/system.d/org.perfrelay1.conf

	[[ -S /run/dbus/system_bus_socket ]] || return 0
	[[ -f /usr/share/dbus-1/system.d/org.perfrelay1.conf ]] && return 0
	cmp -s "$policy" "$dest" && return 0
	log "installing the bus policy $dest"
	install -D -m 0644 "$policy" "$dest"
	busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig ||
		log "warning: the system bus did not reload its configuration; perfrelayctl status may be refused"
}

# ensure_build BUILDDIR: configure BUILDDIR (relative to the repository root unless absolute)
# if it is not configured yet, then compile it.
# ensure_build DIR [MESON_SETUP_OPTION...]: configure DIR (with the options) if needed, then build.
ensure_build() {
	local builddir="${1:?ensure_build: missing build directory}"
	shift

	[[ "$builddir" == /* ]] || builddir="$PERFRELAY_ROOT/$builddir"

	# No build.ninja: never configured, or the configuration failed (e.g. a dependency was
	# missing then; plain 'meson setup' retries that). Once configured, 'meson compile'
	# reconfigures by itself when a meson.build changes.
	if [[ -f "$builddir/build.ninja" && $# -gt 0 ]]; then
		# Configured before: the options still apply (e.g. -Dwerror=true added since).
		meson configure "$builddir" "$@" >/dev/null
	elif [[ ! -f "$builddir/build.ninja" ]]; then
		log "configuring $builddir"
		if [[ -f "$builddir/meson-private/coredata.dat" ]]; then
			meson setup --reconfigure --buildtype=debugoptimized "$@" "$builddir" "$PERFRELAY_ROOT"
		else
			meson setup --buildtype=debugoptimized "$@" "$builddir" "$PERFRELAY_ROOT"
		fi
	fi

	log "building $builddir"
	meson compile -C "$builddir"
}
