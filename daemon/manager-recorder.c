/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The flight recorder in the manager (docs/recorder.md): its rings from start to stop, and
 * snapshots for D-Bus Snapshot(). */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "perfrelay-config.h"

#include "log.h"
#include "manager-internal.h"
#include "cgroupwatch.h"
#include "snapshot.h"

/* How far back the recorder reaches, for the cgroup watch: it keeps the units of removed cgroups
 * at least that long (cgroupwatch.h). */
static int on_window_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	Manager *m = userdata;

	cgroup_watch_set_window(m->cgroup_watch, recorder_window_start(m->recorder, now_nsec(CLOCK_MONOTONIC)));
	(void) sd_event_source_set_time(s, usec + RECORDER_WINDOW_PERIOD_USEC);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

void manager_setup_recorder(Manager *m) {
	CpuSet cpus = m->cpus;
	int r;

	/* Without a recorder no snapshot can ask for a removed cgroup's unit: the cgroup watch
	 * keeps only its bound. */
	cgroup_watch_set_window(m->cgroup_watch, UINT64_MAX);

	/* A daemon killed with its recorder on left it on, its rings in the slots of every CPU
	 * (those we give none, offline ones, too): from a clean state whether we record or not. */
	recorder_clear(
		probes_recorder_fd(m->probes),
		probes_recorder_on_fd(m->probes),
		probes_possible_cpus(m->probes));
	if (!m->config->recorder)
		return;
	/* Offline CPUs get no ring (a perf event cannot be opened there); their records were
	 * never going to be made anyway until they come online. */
	FOREACH_CPU(cpu, &m->cpus_parked)
		cpuset_remove(&cpus, (unsigned) cpu);
	r = recorder_new(
		&cpus,
		m->config->recorder_pages_per_cpu,
		probes_recorder_fd(m->probes),
		probes_recorder_on_fd(m->probes),
		probes_recorder_stats_fd(m->probes),
		&m->recorder);
	if (r < 0) {
		log_warning_errno(
			r,
			"Failed to set up the flight recorder (%u pages per CPU, RecorderPagesPerCpu=): %m; "
			"running without it",
			m->config->recorder_pages_per_cpu);
		return;
	}
	cgroup_watch_set_window(m->cgroup_watch, 0);
	r = sd_event_add_time_relative(
		m->event, &m->recorder_window_source, CLOCK_MONOTONIC, 0, USEC_PER_SEC, on_window_timer, m);
	if (r < 0)
		log_warning_errno(
			r,
			"Failed to start the recorder's window timer: %m; the units of removed cgroups are "
			"kept up to their most (%u)",
			CGROUP_WATCH_REMEMBER_MAX);
	log_info(
		"Flight recorder on: %u pages per CPU on %u CPUs (%s/recorder)",
		m->config->recorder_pages_per_cpu,
		cpuset_count(&cpus),
		m->config->pin_path);
}

static const char *snapshot_unit(uint64_t cgroup_id, void *userdata) {
	static char unit[256];

	return manager_cgroup_unit(userdata, cgroup_id, unit, sizeof(unit), NULL, NULL);
}

static const ProducerType *snapshot_decoder(uint16_t type, void *userdata) {
	Manager *m = userdata;
	const ProducerScan *scan = m->decoders ? decoders_current(m->decoders) : NULL;

	return scan ? producers_scan_find(scan, type) : NULL;
}

int manager_snapshot(Manager *m, uint64_t since_ns, uint64_t until_ns, const Subscription *filter, int *ret_fd) {
	_cleanup_close_ int fd = -EBADF;
	RecorderCopy *copies = NULL;
	SnapshotOptions o = {
		.since_ns = since_ns,
		.until_ns = until_ns,
		.filter = filter,
		.unit = snapshot_unit,
		.decoder = snapshot_decoder,
		.userdata = m,
	};
	SnapshotSummary sum;
	size_t n = 0;
	FILE *f;
	int r, dup_fd;

	if (!m->recorder)
		return -ENODEV;
	fd = memfd_create("perfrelay-snapshot", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return -errno;
	f = fdopen(dup_fd, "w");
	if (!f) {
		safe_close(dup_fd);
		return -errno;
	}
	r = recorder_snapshot(m->recorder, &copies, &n);
	if (r >= 0)
		r = snapshot_write(copies, n, &o, f, &sum);
	recorder_copies_free(copies, n);
	if (fclose(f) != 0 && r >= 0)
		r = -errno;
	if (r < 0)
		return log_warning_errno(r, "Failed to take a flight recorder snapshot: %m");
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	log_info("Flight recorder snapshot: %" PRIu64 " events of %" PRIu64 " records", sum.events, sum.records);
	*ret_fd = TAKE_FD(fd);
	return 0;
}
