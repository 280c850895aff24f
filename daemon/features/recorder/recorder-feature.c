/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The flight recorder (docs/recorder.md): its rings from start to stop, snapshots for D-Bus
 * Snapshot() (root and ControlGroups= members only: a snapshot shows every user's events, and
 * taking one is an act, which AllowGroups= does not grant; docs/security.md), and GetStats()'
 * "recorder" section. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>

#include "perfrelay-config.h"

#include "api/bus-figures.h"
#include "features/feature-table.h"
#include "core/manager.h"
#include "base/log.h"
#include "features/recorder/recorder-config.h"
#include "features/recorder/recorder.h"
#include "features/recorder/snapshot.h"
#include "json-util.h"
#include "time-util.h"

/* A Snapshot() memfd's pages are the daemon's (its memory cgroup pays for what it wrote), for as
 * long as the caller keeps the descriptor. The daemon keeps a descriptor of its own and empties
 * the file (ftruncate frees the pages whoever holds it) once the caller has taken
 * SNAPSHOTS_HELD_PER_UID newer ones, or SNAPSHOT_HOLD_USEC has passed; a call while
 * SNAPSHOTS_HELD_MAX are held is refused. So snapshots hold at most SNAPSHOTS_HELD_MAX times a
 * snapshot's size (docs/security.md). */
#define SNAPSHOTS_HELD_MAX     16
#define SNAPSHOTS_HELD_PER_UID 4
#define SNAPSHOT_HOLD_USEC     (300 * USEC_PER_SEC)

typedef struct HeldSnapshot {
	int fd;
	uid_t uid;
	uint64_t taken_usec; /* CLOCK_MONOTONIC */
} HeldSnapshot;

typedef struct RecorderFeature {
	Feature feature;
	Recorder *recorder;             /* NULL when off */
	sd_event_source *window_source; /* samples how far back it reaches, for the cgroup watch */
	HeldSnapshot held[SNAPSHOTS_HELD_MAX];
	size_t n_held;
	uint64_t snapshots_emptied; /* held snapshots emptied: superseded or too old */
	uint64_t snapshots_refused; /* calls refused while SNAPSHOTS_HELD_MAX were held */
} RecorderFeature;

static void held_empty(RecorderFeature *rf, size_t i) {
	(void) ftruncate(rf->held[i].fd, 0);
	safe_close(rf->held[i].fd);
	rf->held[i] = rf->held[--rf->n_held];
	rf->snapshots_emptied++;
}

/* Before a new snapshot of uid: empties what is too old and uid's oldest beyond its share; false
 * when the table is full of other callers' recent snapshots. */
static bool held_make_room(RecorderFeature *rf, uid_t uid, uint64_t now) {
	size_t mine = 0, oldest = SIZE_MAX;

	for (size_t i = rf->n_held; i-- > 0;)
		if (now - rf->held[i].taken_usec >= SNAPSHOT_HOLD_USEC)
			held_empty(rf, i);
	for (size_t i = 0; i < rf->n_held; i++)
		if (rf->held[i].uid == uid) {
			mine++;
			if (oldest == SIZE_MAX || rf->held[i].taken_usec < rf->held[oldest].taken_usec)
				oldest = i;
		}
	if (mine >= SNAPSHOTS_HELD_PER_UID)
		held_empty(rf, oldest);
	return rf->n_held < SNAPSHOTS_HELD_MAX;
}

/* How far back the recorder reaches, for the cgroup watch: it keeps the units of removed cgroups
 * at least that long (cgroupwatch.h). */
static int on_window_timer(sd_event_source *s, uint64_t usec, void *userdata) {
	RecorderFeature *rf = userdata;

	cgroup_watch_set_window(
		manager_cgroup_watch(rf->feature.manager),
		recorder_window_start(rf->recorder, now_nsec(CLOCK_MONOTONIC)));
	(void) sd_event_source_set_time(s, usec + RECORDER_WINDOW_PERIOD_USEC);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

/* recorder_on for RecorderTypes=: its built-in types, and every third-party type. */
static uint32_t recorder_on_mask(const RecorderConfig *rc) {
	return (uint32_t) probes_type_mask(rc->types) | PERFRELAY_RECORDER_OTHERS;
}

/* The built-in types it records must be made (RecorderTypes=). */
static uint64_t recorder_demand(Feature *f) {
	RecorderFeature *rf = (RecorderFeature *) f;

	if (!rf->recorder)
		return 0;
	return probes_type_mask(
		((const RecorderConfig *) config_part(manager_config(f->manager), &recorder_config))->types);
}

static int recorder_reload(Feature *f) {
	RecorderFeature *rf = (RecorderFeature *) f;
	const RecorderConfig *rc = config_part(manager_config(f->manager), &recorder_config);
	int r;

	if (!rf->recorder)
		return 0;
	r = recorder_set_types(rf->recorder, recorder_on_mask(rc));
	if (r < 0)
		return log_error_errno(r, "Failed to apply RecorderTypes=: %m");
	manager_demand_changed(f->manager);
	return 0;
}

static int recorder_setup(Feature *f) {
	RecorderFeature *rf = (RecorderFeature *) f;
	Manager *m = f->manager;
	const Config *c = manager_config(m);
	const RecorderConfig *rc = config_part(c, &recorder_config);
	Probes *p = manager_probes(m);
	CpuSet cpus = *manager_cpus(m);
	int r;

	/* Without a recorder no snapshot can ask for a removed cgroup's unit: the cgroup watch
	 * keeps only its bound. */
	cgroup_watch_set_window(manager_cgroup_watch(m), UINT64_MAX);

	/* A daemon killed with its recorder on left it on, its rings in the slots of every CPU
	 * (those we give none, offline ones, too): from a clean state whether we record or not. */
	recorder_clear(probes_recorder_fd(p), probes_recorder_on_fd(p), probes_possible_cpus(p));
	if (!rc->recorder)
		return 0;
	/* Offline CPUs get no ring (a perf event cannot be opened there); their records were
	 * never going to be made anyway until they come online. */
	FOREACH_CPU(cpu, manager_cpus_parked(m))
		cpuset_remove(&cpus, (unsigned) cpu);
	r = recorder_new(
		&cpus,
		rc->pages_per_cpu,
		recorder_on_mask(rc),
		probes_recorder_fd(p),
		probes_recorder_on_fd(p),
		probes_recorder_stats_fd(p),
		&rf->recorder);
	if (r < 0) {
		log_warning_errno(
			r,
			"Failed to set up the flight recorder (%u pages per CPU, RecorderPagesPerCpu=): %m; "
			"running without it",
			rc->pages_per_cpu);
		return 0;
	}
	cgroup_watch_set_window(manager_cgroup_watch(m), 0);
	r = sd_event_add_time_relative(
		manager_event(m), &rf->window_source, CLOCK_MONOTONIC, 0, USEC_PER_SEC, on_window_timer, rf);
	if (r < 0)
		log_warning_errno(
			r,
			"Failed to start the recorder's window timer: %m; the units of removed cgroups are "
			"kept up to their most (%u)",
			CGROUP_WATCH_REMEMBER_MAX);
	log_info(
		"Flight recorder on: %u pages per CPU on %u CPUs (%s/recorder)",
		rc->pages_per_cpu,
		cpuset_count(&cpus),
		c->pin_path);
	return 0;
}

/* What a snapshot's callbacks need (SnapshotOptions.userdata). */
typedef struct SnapshotCtx {
	Manager *m;
	const Subscription *filter;
	unsigned history_sec;
} SnapshotCtx;

static const char *snapshot_unit(uint64_t cgroup_id, void *userdata) {
	static char unit[256];
	SnapshotCtx *ctx = userdata;

	return manager_cgroup_unit(ctx->m, cgroup_id, unit, sizeof(unit), NULL, NULL);
}

static const ProducerType *snapshot_decoder(uint16_t type, void *userdata) {
	SnapshotCtx *ctx = userdata;
	const ProducerScan *scan = decoders_current(manager_decoders(ctx->m));

	return scan ? producers_scan_find(scan, type) : NULL;
}

/* The events of the history's lines in buf (n bytes of whole lines), added to *seen. */
static int note_seen(const char *buf, size_t n, SnapshotSeen **seen, size_t *n_seen, size_t *n_alloc) {
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new();

	if (!tok)
		return -ENOMEM;
	for (const char *p = buf, *end; p < buf + n; p = end + 1) {
		_cleanup_(json_object_putp) json_object *o = NULL;
		json_object *producer, *cpu, *seq;

		end = memchr(p, '\n', (size_t) (buf + n - p));
		if (!end)
			break;
		json_tokener_reset(tok);
		o = json_tokener_parse_ex(tok, p, (int) (end - p));
		if (!o || !json_object_object_get_ex(o, "producer", &producer) ||
		    !json_object_object_get_ex(o, "cpu", &cpu) || !json_object_object_get_ex(o, "seq", &seq))
			continue; /* a gap line */
		if (*n_seen == *n_alloc) {
			size_t a = MAX(*n_alloc * 2, (size_t) 256);
			SnapshotSeen *x = reallocarray(*seen, a, sizeof(*x));

			if (!x)
				return -ENOMEM;
			*seen = x;
			*n_alloc = a;
		}
		(*seen)[(*n_seen)++] = (SnapshotSeen){
			.producer = (uint32_t) json_object_get_uint64(producer),
			.cpu = (uint32_t) json_object_get_uint64(cpu),
			.seq = json_object_get_uint64(seq),
		};
	}
	return 0;
}

/* The history's part of a unit's snapshot (SnapshotOptions.history): its lines of the unit from
 * SnapshotHistorySec= ago until until_ts (CLOCK_BOOTTIME ns, excluded; UINT64_MAX: now), read
 * here on the main thread (the unit's blocks only: docs/history.md, "Format"). */
static int64_t snapshot_history(
	FILE *f, uint64_t until_ts, void *userdata, SnapshotSeen **ret_seen, size_t *ret_n_seen) {
	SnapshotCtx *ctx = userdata;
	_cleanup_(subscription_freep) Subscription *sub = NULL;
	_cleanup_free_ char *buf = malloc(SERVER_HISTORY_BUFFER);
	uint64_t rt_now = now_nsec(CLOCK_REALTIME), offset = rt_now - now_nsec(CLOCK_BOOTTIME);
	SnapshotSeen *seen = NULL;
	size_t n_seen = 0, n_alloc = 0;
	const ServerHistoryOps *ops;
	void *hu, *stream = NULL;
	char err[REQUEST_MESSAGE_MAX];
	int64_t lines = 0;
	uint64_t events;
	ssize_t n;
	int r;

	ops = manager_history(ctx->m, &hu);
	if (!ops)
		return 0;
	if (!buf)
		return -ENOMEM;
	r = subscription_dup(ctx->filter, &sub);
	if (r < 0)
		return r;
	sub->access = SUBSCRIPTION_ACCESS_ALL;
	sub->history = true;
	sub->follow = false;
	sub->cursors = false;
	sub->has_since = true;
	sub->since_ns = rt_now - MIN(rt_now, (uint64_t) ctx->history_sec * NSEC_PER_SEC);
	if (until_ts != UINT64_MAX) {
		if (until_ts + offset == 0)
			return 0;
		sub->has_until = true;
		sub->until_ns = until_ts + offset - 1;
	}
	r = ops->open(hu, sub, &stream, err, sizeof(err));
	if (r < 0)
		return log_warning_errno(r, "Snapshot: cannot read the history (%s): %m", err);
	while ((n = ops->read(stream, buf, SERVER_HISTORY_BUFFER)) != 0) {
		if (n == -EINPROGRESS)
			continue;
		if (n < 0) {
			r = (int) n;
			break;
		}
		fwrite(buf, 1, (size_t) n, f);
		for (ssize_t i = 0; i < n; i++)
			lines += buf[i] == '\n';
		r = note_seen(buf, (size_t) n, &seen, &n_seen, &n_alloc);
		if (r < 0)
			break;
	}
	ops->close(stream, &events);
	if (r < 0) {
		free(seen);
		return r;
	}
	*ret_seen = seen;
	*ret_n_seen = n_seen;
	return lines;
}

/* The recorder's window, filtered, as JSON lines in a new file (*ret_fd, at offset 0); -ENODEV
 * when the recorder is off. */
static int recorder_take_snapshot(
	RecorderFeature *rf, uint64_t since_ns, uint64_t until_ns, const Subscription *filter, int *ret_fd) {
	Manager *m = rf->feature.manager;
	_cleanup_close_ int fd = -EBADF;
	RecorderCopy *copies = NULL;
	const RecorderConfig *rc = config_part(manager_config(m), &recorder_config);
	SnapshotCtx ctx = { .m = m, .filter = filter, .history_sec = rc->snapshot_history_sec };
	SnapshotOptions o = {
		.since_ns = since_ns,
		.until_ns = until_ns,
		.filter = filter,
		.unit = snapshot_unit,
		.procs = hub_procs(manager_hub(m)),
		.decoder = snapshot_decoder,
		.userdata = &ctx,
	};
	void *hu;

	/* A unit's snapshot reaches back into the history (docs/recorder.md, "History"), unless
	 * the caller bounded its time itself. */
	if (filter && filter->n_units > 0 && ctx.history_sec > 0 && !since_ns && !until_ns &&
	    manager_history(m, &hu)) {
		o.history = snapshot_history;
	}
	SnapshotSummary sum;
	size_t n = 0;
	FILE *f;
	int r, dup_fd;

	if (!rf->recorder)
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
	r = recorder_snapshot(rf->recorder, &copies, &n);
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

/* Snapshot() ------------------------------------------------------------------------------ */

typedef struct SnapshotBounds {
	uint64_t since_ns, until_ns;
} SnapshotBounds;

/* since_ns and until_ns (t): the options a filter does not have. */
static int read_bound(sd_bus_message *message, const char *key, void *userdata, sd_bus_error *error) {
	SnapshotBounds *b = userdata;
	uint64_t *v;
	int r;

	if (streq(key, "since_ns"))
		v = &b->since_ns;
	else if (streq(key, "until_ns"))
		v = &b->until_ns;
	else
		return 0;
	r = sd_bus_message_read(message, "v", "t", v);
	if (r < 0)
		return sd_bus_error_setf(
			error, SD_BUS_ERROR_INVALID_ARGS, "option \"%s\": expected a variant of type t", key);
	return 1;
}

static int method_snapshot(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(subscription_freep) Subscription *sub = NULL;
	_cleanup_close_ int fd = -EBADF;
	SnapshotBounds bounds = {};
	RecorderFeature *rf = userdata;
	Bus *b = manager_bus(rf->feature.manager);
	uint64_t now = now_usec(CLOCK_MONOTONIC);
	uid_t uid;
	int held_fd, r;

	r = bus_require_control(b, message, "Snapshot", &uid, error);
	if (r < 0)
		return r;
	r = bus_read_filter(b, message, read_bound, &bounds, &sub, error);
	if (r < 0)
		return r;
	sub->access = SUBSCRIPTION_ACCESS_ALL;
	if (rf->recorder && !held_make_room(rf, uid, now)) {
		rf->snapshots_refused++;
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_LIMITS_EXCEEDED,
			"%u snapshots of other callers are held; the oldest is emptied within %u s",
			SNAPSHOTS_HELD_MAX,
			(unsigned) (SNAPSHOT_HOLD_USEC / USEC_PER_SEC));
	}
	r = recorder_take_snapshot(rf, bounds.since_ns, bounds.until_ns, sub, &fd);
	if (r == -ENODEV)
		return sd_bus_error_set(
			error, SD_BUS_ERROR_NOT_SUPPORTED, "The flight recorder is off (Recorder=no)");
	if (r < 0)
		return sd_bus_error_set_errnof(error, r, "Failed to take a snapshot: %m");
	held_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (held_fd < 0)
		return sd_bus_error_set_errnof(error, errno, "Failed to keep the snapshot: %m");
	rf->held[rf->n_held++] = (HeldSnapshot){ .fd = held_fd, .uid = uid, .taken_usec = now };
	return sd_bus_reply_method_return(message, "h", fd);
}

static void recorder_quiesce(Feature *f) {
	/* Its writes in flight are waited out with the others'. */
	recorder_stop(((RecorderFeature *) f)->recorder);
}

static void recorder_cpu_prepare(Feature *f, unsigned cpu) {
	int r = recorder_cpu_online(((RecorderFeature *) f)->recorder, cpu);

	if (r < 0)
		log_warning_errno(
			r,
			"CPU %u came online; failed to give it a flight recorder ring: %m (its records are not kept)",
			cpu);
}

static void recorder_done(Feature *f) {
	RecorderFeature *rf = (RecorderFeature *) f;

	rf->window_source = sd_event_source_disable_unref(rf->window_source);
	rf->recorder = recorder_free(rf->recorder);
	while (rf->n_held > 0)
		held_empty(rf, rf->n_held - 1);
}

/* "recorder": on, pages per CPU, its counters, and the cgroup watch's, which it keeps units of
 * removed cgroups for. */
static int recorder_stats_append(Feature *f, sd_bus_message *m) {
	RecorderFeature *rf = (RecorderFeature *) f;
	RecorderStats rs = {};
	CgroupWatchStats cw = {};
	int r;

	if (rf->recorder) {
		recorder_get_stats(rf->recorder, &rs);
		cgroup_watch_get_stats(manager_cgroup_watch(f->manager), &cw);
	}
	r = open_section(m, "recorder");
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}", "on", "b", (int) !!rf->recorder);
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "pages_per_cpu", rf->recorder ? recorder_pages(rf->recorder) : 0 },
			{ "written", rs.written },
			{ "paused", rs.paused },
			{ "failed", rs.failed },
			{ "snapshots", rs.snapshots },
			{ "snapshots_held", rf->n_held },
			{ "snapshots_emptied", rf->snapshots_emptied },
			{ "snapshots_refused", rf->snapshots_refused },
			{ "pause_max_ns", rs.pause_max_ns },
			{ "cgroups_remembered", cw.remembered },
			{ "cgroups_evicted", cw.evicted },
			{ "cgroups_evicted_users", cw.evicted_users },
			{ "cgroups_evicted_young", cw.evicted_young },
			{ "cgroups_kept", cw.kept },
			{ "cgroups_watched", cw.watched },
			{ "cgroups_missed", cw.missed },
			{ "cgroups_unwatched", cw.unwatched },
			{ "cgroups_unwatched_users", cw.unwatched_users },
			{ "cgroups_overflows", cw.overflows },
			{ "cgroups_rescans", cw.rescans });
	return r < 0 ? r : close_entry(m);
}

/* clang-format off */
static const sd_bus_vtable recorder_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("Snapshot",
	                         "a{sv}", SD_BUS_PARAM(options),
	                         "h", SD_BUS_PARAM(events),
	                         method_snapshot, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

const FeatureVtable recorder_feature = {
	.name = "recorder",
	.object_size = sizeof(RecorderFeature),
	.config = &recorder_config,
	.setup = recorder_setup,
	.quiesce = recorder_quiesce,
	.cpu_prepare = recorder_cpu_prepare,
	.reload = recorder_reload,
	.demand = recorder_demand,
	.done = recorder_done,
	.bus_vtable = recorder_bus_vtable,
	.stats_append = recorder_stats_append,
};
