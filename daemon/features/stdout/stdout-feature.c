/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* --stdout: the standard output as a hub client, written by the flush loop, waited for at exit.
 * Its figures count with the clients outside the socket (GetStats() "clients"). */
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <unistd.h>

#include "perfrelay-config.h"

#include "features/feature-table.h"
#include "core/manager.h"
#include "base/log.h"
#include "hub/subscription.h"
#include "time-util.h"

typedef struct StdoutFeature {
	Feature feature;
	HubClient *client;
	HubClientStats gone;     /* the client's counters after it went away */
	sd_event_source *source; /* EPOLLOUT wait on fd 1, NULL for files */
} StdoutFeature;

static void stdout_drop(StdoutFeature *o, int error) {
	if (error < 0)
		log_warning_errno(error, "Standard output is gone (%m), no longer printing events");
	hub_client_detach(manager_hub(o->feature.manager), o->client);
	hub_client_discard(o->client);
	hub_client_get_stats(o->client, &o->gone);
	o->client = hub_client_free(o->client);
	o->source = sd_event_source_disable_unref(o->source);
}

/* Every event a subscription of everything gets. */
static bool stdout_match(const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	return !event_type_on_request(ev->hdr.type);
}

/* The --stdout client's consumer (HubClientOptions.flush). */
static void stdout_flush(HubClient *c, void *userdata) {
	StdoutFeature *o = userdata;
	int r;

	r = hub_client_flush(c);
	if (r < 0) {
		stdout_drop(o, r);
		return;
	}
	if (o->source)
		sd_event_source_set_enabled(o->source, r == 0 ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
}

static int on_stdout_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	StdoutFeature *o = userdata;

	if (o->client)
		hub_client_run_flush(o->client);
	manager_flush(o->feature.manager);
	return 0;
}

static int stdout_setup(Feature *f) {
	StdoutFeature *so = (StdoutFeature *) f;
	Manager *m = f->manager;
	Hub *hub = manager_hub(m);
	HubClientOptions o = {
		.format = HUB_FORMAT_JSON,
		.overflow = HUB_OVERFLOW_DROP,
		.queue_bytes = manager_config(m)->client_queue_bytes,
		.match = stdout_match,
		.userdata = so,
		.flush = stdout_flush,
		.demand = subscription_demand_all(),
	};
	int r, flags;

	if (!manager_options(m)->stdout_events)
		return 0;

	flags = fcntl(STDOUT_FILENO, F_GETFL);
	if (flags < 0)
		return log_error_errno(-errno, "--stdout: standard output is not open: %m");
	if (fcntl(STDOUT_FILENO, F_SETFL, flags | O_NONBLOCK) < 0)
		return log_error_errno(-errno, "--stdout: cannot make standard output non-blocking: %m");

	r = hub_client_new(hub, STDOUT_FILENO, &o, &so->client);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the standard output client: %m");
	r = sd_event_add_io(manager_event(m), &so->source, STDOUT_FILENO, EPOLLOUT, on_stdout_writable, so);
	if (r == -EPERM)
		so->source = NULL; /* a regular file: never blocks */
	else if (r < 0)
		return log_error_errno(r, "Failed to watch standard output: %m");
	else
		sd_event_source_set_enabled(so->source, SD_EVENT_OFF);
	return hub_client_attach(hub, so->client);
}

/* At exit, standard output gets everything it was offered (and no cut line), unless it does
 * not take it within a bounded time. */
static void stdout_finish(Feature *f) {
	StdoutFeature *o = (StdoutFeature *) f;
	usec_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * USEC_PER_SEC;
	int r;

	if (!o->client)
		return;
	while ((r = hub_client_flush(o->client)) == 0) {
		struct pollfd p = { .fd = STDOUT_FILENO, .events = POLLOUT };
		usec_t t = now_usec(CLOCK_MONOTONIC);

		if (t >= deadline || poll(&p, 1, (int) ((deadline - t) / USEC_PER_MSEC) + 1) <= 0) {
			log_warning("Standard output did not take the last events within 5s, giving up");
			break;
		}
	}
	if (r < 0)
		log_warning_errno(r, "Failed to write the last events to standard output: %m");
	/* The readers have stopped: what is still queued is never written, and counts as
	 * dropped in the exit summary. */
	hub_client_detach(manager_hub(f->manager), o->client);
	hub_client_discard(o->client);
}

static void stdout_done(Feature *f) {
	StdoutFeature *o = (StdoutFeature *) f;

	if (o->client)
		stdout_drop(o, 0);
}

static void stdout_stats_clients(Feature *f, StatsClients *add) {
	StdoutFeature *o = (StdoutFeature *) f;
	HubClientStats st = o->gone;

	if (o->client) {
		HubClientStats now;

		hub_client_get_stats(o->client, &now);
		st.sent += now.sent;
		st.dropped += now.dropped;
		st.offered += now.offered;
	}
	add->delivered += st.sent;
	add->dropped += st.dropped;
	add->offered += st.offered;
}

static void stdout_log_stats(Feature *f) {
	StdoutFeature *o = (StdoutFeature *) f;
	HubClientStats cs;

	if (!o->client)
		return;
	hub_client_get_stats(o->client, &cs);
	log_info(
		"Standard output: %" PRIu64 " offered, %" PRIu64 " sent, %" PRIu64 " dropped",
		cs.offered,
		cs.sent,
		cs.dropped);
}

const FeatureVtable stdout_feature = {
	.name = "stdout",
	.object_size = sizeof(StdoutFeature),
	.setup = stdout_setup,
	.finish = stdout_finish,
	.done = stdout_done,
	.log_stats = stdout_log_stats,
	.stats_clients = stdout_stats_clients,
};
