/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The event history (docs/history.md): a hub client of HistoryTypes= in the binary format, with
 * unit frames, written by the flush loop into a pipe that the writer thread reads into
 * compressed segment files under HistoryPath=; the socket's history streams read them back.
 * GetStats() "history": who may see it, everybody (figures only); the files are root's.
 *
 * Exact: offered = written + dropped_behind + dropped_disk + what is on its way (the hub queue,
 * the pipe, the block being filled: "pending"), and pending is 0 once the writer has cut its
 * block (HISTORY_CUT_USEC after the last event) and at exit. */
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "perfrelay-config.h"

#include "api/bus-figures.h"
#include "base/log.h"
#include "core/manager.h"
#include "decode/decode.h"
#include "features/feature-table.h"
#include "features/history/history-config.h"
#include "features/history/history-stream.h"
#include "features/history/history-writer.h"
#include "time-util.h"

/* The history client's queues, split between the readers: the writer is behind when they fill. */
#define HISTORY_QUEUE_BYTES (16u * 1024u * 1024u)
#define HISTORY_PIPE_BYTES  (1024 * 1024)

typedef struct HistoryFeature {
	Feature feature;
	HistoryStore *store;
	HistoryWriter *writer;
	HubClient *client;
	uint64_t types; /* record types it takes (bit t: type t) */
	int pipe_fd;    /* the pipe's write end, the client's fd */
	int notify_fd;  /* the writer's eventfd */
	sd_event_source *pipe_source, *notify_source;
	HubClientStats gone; /* the client's figures once it is gone */
	const char *off;     /* why it is off, for GetStats() (NULL: on, or History=no) */
} HistoryFeature;

static const HistoryConfig *history_cfg(const Feature *f) {
	return config_part(manager_config(f->manager), &history_config);
}

static HistoryLimits limits_of(const HistoryConfig *hc) {
	return (HistoryLimits){
		.max_use = hc->max_use,
		.max_age_sec = hc->max_age_sec,
		.sync_interval_usec = (uint64_t) hc->sync_interval_sec * USEC_PER_SEC,
	};
}

static bool history_match(const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	const HistoryFeature *hf = filter;

	return ev->hdr.type < 64 && (hf->types & (UINT64_C(1) << ev->hdr.type));
}

static void history_drop_client(HistoryFeature *hf) {
	if (!hf->client)
		return;
	hub_client_detach(manager_hub(hf->feature.manager), hf->client);
	hub_client_discard(hf->client);
	hub_client_get_stats(hf->client, &hf->gone);
	hf->client = hub_client_free(hf->client);
	hf->pipe_source = sd_event_source_disable_unref(hf->pipe_source);
}

/* The client's consumer (HubClientOptions.flush): into the pipe, as far as it takes. */
static void history_flush(HubClient *c, void *userdata) {
	HistoryFeature *hf = userdata;
	int r = hub_client_flush(c);

	if (r < 0) {
		log_error_errno(r, "History: the writer's pipe failed (%m); no longer recording");
		hf->off = "the writer's pipe failed";
		history_drop_client(hf);
		return;
	}
	sd_event_source_set_enabled(hf->pipe_source, r == 0 ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
}

static int on_pipe_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	HistoryFeature *hf = userdata;

	if (hf->client)
		hub_client_run_flush(hf->client);
	manager_flush(hf->feature.manager);
	return 0;
}

static int on_written(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	HistoryFeature *hf = userdata;
	uint64_t n;

	(void) !read(fd, &n, sizeof(n));
	manager_history_wake(hf->feature.manager);
	return 0;
}

/* ServerHistoryOps */
static int ops_open(void *userdata, const Subscription *sub, void **ret, char *err, size_t err_size) {
	HistoryFeature *hf = userdata;
	HistoryStream *h;
	int r;

	if (!hf->store) {
		snprintf(err, err_size, "the history is off: %s", hf->off ?: "History=no");
		return -EINVAL;
	}
	/* A type it does not record would make a stream that is silently empty of it. */
	if ((sub->type_mask & ~hf->types) || sub->n_types > 0 || sub->n_type_names > 0) {
		uint64_t other = sub->type_mask & ~hf->types;
		const char *name = other ? event_type_to_string((uint16_t) __builtin_ctzll(other)) : NULL;

		snprintf(
			err,
			err_size,
			"the history does not record %s%s%s (HistoryTypes=)",
			name ? "\"" : "",
			name ?: "third-party types",
			name ? "\"" : "");
		return -EINVAL;
	}
	r = history_stream_open(hf->store, sub, &h, err, err_size);
	if (r < 0)
		return r;
	*ret = h;
	return 0;
}

static ssize_t ops_read(void *stream, char *buf, size_t size) {
	return history_stream_read(stream, buf, size);
}

static void ops_close(void *stream, uint64_t *ret_events) {
	*ret_events = history_stream_events(stream);
	history_stream_free(stream);
}

static ServerHistoryOps history_ops = {
	.open = ops_open,
	.read = ops_read,
	.close = ops_close,
};

static int history_setup(Feature *f) {
	HistoryFeature *hf = (HistoryFeature *) f;
	Manager *m = f->manager;
	const HistoryConfig *hc = history_cfg(f);
	HistoryLimits l = limits_of(hc);
	int p[2], r;

	hf->pipe_fd = hf->notify_fd = -EBADF;
	if (!hc->history)
		return 0;
	r = history_store_open(manager_config(m)->history_path, &hf->store);
	if (r < 0) {
		/* The daemon runs on without it: GetStats() says why. */
		hf->off = r == -EBUSY ? "HistoryPath= is in use by another perfrelayd" :
			r == -EPERM   ? "HistoryPath= is another user's or writable by others" :
					"HistoryPath= cannot be used";
		log_warning("History: off (%s)", hf->off);
		return 0;
	}
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return log_error_errno(-errno, "History: cannot make the writer's pipe: %m");
	hf->pipe_fd = p[1];
	(void) fcntl(p[1], F_SETPIPE_SZ, HISTORY_PIPE_BYTES);
	hf->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (hf->notify_fd < 0) {
		safe_close(p[0]);
		return log_error_errno(-errno, "History: cannot make an eventfd: %m");
	}
	r = history_writer_start(hf->store, p[0], hf->notify_fd, &l, &hf->writer);
	if (r < 0)
		return log_error_errno(r, "History: cannot start the writer thread: %m");
	r = sd_event_add_io(manager_event(m), &hf->notify_source, hf->notify_fd, EPOLLIN, on_written, hf);
	if (r >= 0)
		r = sd_event_add_io(
			manager_event(m), &hf->pipe_source, hf->pipe_fd, EPOLLOUT, on_pipe_writable, hf);
	if (r < 0)
		return log_error_errno(r, "History: cannot watch the writer: %m");
	sd_event_source_set_enabled(hf->pipe_source, SD_EVENT_OFF);

	hf->types = probes_type_mask(hc->types) | (hc->record_bench ? UINT64_C(1) << PERFRELAY_TYPE_BENCH : 0);
	{
		HubClientOptions o = {
			.format = HUB_FORMAT_BINARY,
			.overflow = HUB_OVERFLOW_DROP,
			.unit_frames = true,
			.queue_bytes = HISTORY_QUEUE_BYTES,
			.match = history_match,
			.filter = hf,
			.userdata = hf,
			.flush = history_flush,
			.demand = hf->types,
			.only_demand = true,
		};

		r = hub_client_new(manager_hub(m), hf->pipe_fd, &o, &hf->client);
		if (r < 0)
			return log_error_errno(r, "History: cannot make its hub client: %m");
	}
	r = hub_client_attach(manager_hub(m), hf->client);
	if (r < 0)
		return log_error_errno(r, "History: cannot attach its hub client: %m");
	log_info(
		"History: recording into %s (%" PRIu64 " segments, %" PRIu64 " events held)",
		hf->store->path,
		hf->store->stats.segments,
		hf->store->stats.events);
	return 0;
}

static int history_start(Feature *f) {
	history_ops.stream_bytes = history_stream_bytes();
	history_ops.types = ((HistoryFeature *) f)->types;
	manager_set_history(f->manager, &history_ops, f);
	return 0;
}

static int history_reload(Feature *f) {
	HistoryFeature *hf = (HistoryFeature *) f;
	HistoryLimits l = limits_of(history_cfg(f));

	if (hf->writer)
		history_writer_set_limits(hf->writer, &l);
	return 0;
}

/* At exit the writer gets everything it was offered, unless it does not take it within 10 s. */
static void history_finish(Feature *f) {
	HistoryFeature *hf = (HistoryFeature *) f;
	usec_t deadline = now_usec(CLOCK_MONOTONIC) + 10 * USEC_PER_SEC;
	int r;

	manager_set_history(f->manager, NULL, NULL);
	if (!hf->client)
		return;
	while ((r = hub_client_flush(hf->client)) == 0) {
		struct pollfd p = { .fd = hf->pipe_fd, .events = POLLOUT };
		usec_t t = now_usec(CLOCK_MONOTONIC);

		if (t >= deadline || poll(&p, 1, (int) ((deadline - t) / USEC_PER_MSEC) + 1) <= 0) {
			log_warning("History: the writer did not take the last events within 10s");
			break;
		}
	}
	history_drop_client(hf);
	hf->pipe_fd = safe_close(hf->pipe_fd); /* the writer reads to the end, then stops */
	history_writer_join(hf->writer);
}

static void history_done(Feature *f) {
	HistoryFeature *hf = (HistoryFeature *) f;

	manager_set_history(f->manager, NULL, NULL);
	history_drop_client(hf);
	hf->pipe_fd = safe_close(hf->pipe_fd); /* the writer reads to the end, then stops */
	hf->writer = history_writer_stop(hf->writer);
	hf->notify_source = sd_event_source_disable_unref(hf->notify_source);
	hf->notify_fd = safe_close(hf->notify_fd);
	hf->store = history_store_free(hf->store);
}

static void history_figures(
	HistoryFeature *hf, HubClientStats *cs, HistoryWriterStats *ws, HistoryStoreStats *ss) {
	*cs = hf->gone;
	*ws = (HistoryWriterStats){};
	*ss = (HistoryStoreStats){};
	if (hf->client)
		hub_client_get_stats(hf->client, cs);
	if (hf->writer)
		history_writer_get_stats(hf->writer, ws);
	if (hf->store) {
		pthread_mutex_lock(&hf->store->lock);
		*ss = hf->store->stats;
		pthread_mutex_unlock(&hf->store->lock);
	}
}

static int history_stats_append(Feature *f, sd_bus_message *m) {
	HistoryFeature *hf = (HistoryFeature *) f;
	HubClientStats cs;
	HistoryWriterStats ws;
	HistoryStoreStats ss;
	int r;

	history_figures(hf, &cs, &ws, &ss);
	r = open_section(m, "history");
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}", "on", "b", (int) !!hf->store);
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}", "off_reason", "s", hf->off ?: "");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "offered", cs.offered },
			{ "written", ws.written },
			{ "dropped_behind", cs.dropped },
			{ "dropped_disk", ws.dropped_disk },
			{ "pending", cs.offered - MIN(cs.offered, ws.written + cs.dropped + ws.dropped_disk) },
			{ "gaps", ws.gaps },
			{ "disk_gap_pending", ws.disk_gap_pending },
			{ "blocks", ws.blocks },
			{ "raw_bytes", ws.raw_bytes },
			{ "disk_bytes", ws.disk_bytes },
			{ "write_errors", ws.write_errors },
			{ "syncs", ws.syncs },
			{ "rotations", ws.rotations },
			{ "writer_cpu_ns", ws.cpu_ns },
			{ "segments", ss.segments },
			{ "bytes", ss.bytes },
			{ "events", ss.events },
			{ "first_ordinal", ss.first_ordinal },
			{ "removed_segments", ss.removed_segments },
			{ "removed_bytes", ss.removed_bytes },
			{ "removed_events", ss.removed_events },
			{ "torn_cuts", ss.torn_cuts },
			{ "torn_bytes", ss.torn_bytes },
			{ "corrupt_segments", ss.corrupt_segments });
	return r < 0 ? r : close_entry(m);
}

static void history_log_stats(Feature *f) {
	HistoryFeature *hf = (HistoryFeature *) f;
	HubClientStats cs;
	HistoryWriterStats ws;
	HistoryStoreStats ss;

	if (!hf->store)
		return;
	history_figures(hf, &cs, &ws, &ss);
	log_info(
		"History: %" PRIu64 " offered, %" PRIu64 " written, %" PRIu64
		" dropped (writer behind), %" PRIu64 " dropped (disk); %" PRIu64 " segments, %" PRIu64
		" bytes; %" PRIu64 " bytes of frames in %" PRIu64 " bytes of blocks; writer %" PRIu64
		" ns of CPU",
		cs.offered,
		ws.written,
		cs.dropped,
		ws.dropped_disk,
		ss.segments,
		ss.bytes,
		ws.raw_bytes,
		ws.disk_bytes,
		ws.cpu_ns);
}

const FeatureVtable history_feature = {
	.name = "history",
	.object_size = sizeof(HistoryFeature),
	.config = &history_config,
	.setup = history_setup,
	.start = history_start,
	.reload = history_reload,
	.finish = history_finish,
	.done = history_done,
	.stats_append = history_stats_append,
	.log_stats = history_log_stats,
};
