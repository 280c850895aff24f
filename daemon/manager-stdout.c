/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* --stdout: the standard output as a hub client, written by the flush loop, waited for at exit. */
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "perfrelay-config.h"

#include "log.h"
#include "manager-internal.h"
#include "stats.h"
#include "time-util.h"

static void manager_drop_stdout(Manager *m, int error) {
	log_warning_errno(error, "Standard output is gone (%m), no longer printing events");
	hub_client_detach(m->hub, m->stdout_client);
	hub_client_discard(m->stdout_client);
	hub_client_get_stats(m->stdout_client, &m->stdout_gone);
	m->stdout_client = hub_client_free(m->stdout_client);
	m->stdout_source = sd_event_source_disable_unref(m->stdout_source);
}

/* Every event a subscription of everything gets. */
static bool stdout_match(const void *filter, const DecodedEvent *ev, const char *unit) {
	return !event_type_on_request(ev->hdr.type);
}

/* The --stdout client's consumer (HubClientOptions.flush). */
static void manager_flush_stdout(HubClient *c, void *userdata) {
	Manager *m = userdata;
	int r;

	r = hub_client_flush(c);
	if (r < 0) {
		manager_drop_stdout(m, r);
		return;
	}
	if (m->stdout_source)
		sd_event_source_set_enabled(m->stdout_source, r == 0 ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
}

static int on_stdout_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	Manager *m = userdata;

	if (m->stdout_client)
		hub_client_run_flush(m->stdout_client);
	manager_flush(m);
	return 0;
}

int manager_setup_stdout(Manager *m) {
	HubClientOptions o = {
		.format = HUB_FORMAT_JSON,
		.overflow = HUB_OVERFLOW_DROP,
		.queue_bytes = m->config->client_queue_bytes,
		.match = stdout_match,
		.userdata = m,
		.flush = manager_flush_stdout,
	};
	int r, flags;

	flags = fcntl(STDOUT_FILENO, F_GETFL);
	if (flags < 0)
		return log_error_errno(-errno, "--stdout: standard output is not open: %m");
	if (fcntl(STDOUT_FILENO, F_SETFL, flags | O_NONBLOCK) < 0)
		return log_error_errno(-errno, "--stdout: cannot make standard output non-blocking: %m");

	r = hub_client_new(m->hub, STDOUT_FILENO, &o, &m->stdout_client);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the standard output client: %m");
	r = sd_event_add_io(m->event, &m->stdout_source, STDOUT_FILENO, EPOLLOUT, on_stdout_writable, m);
	if (r == -EPERM)
		m->stdout_source = NULL; /* a regular file: never blocks */
	else if (r < 0)
		return log_error_errno(r, "Failed to watch standard output: %m");
	else
		sd_event_source_set_enabled(m->stdout_source, SD_EVENT_OFF);
	return hub_client_attach(m->hub, m->stdout_client);
}

/* At exit, standard output gets everything it was offered (and no cut line), unless it does
 * not take it within a bounded time. */
void manager_finish_stdout(Manager *m) {
	usec_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * USEC_PER_SEC;
	int r;

	if (!m->stdout_client)
		return;
	while ((r = hub_client_flush(m->stdout_client)) == 0) {
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
	hub_client_detach(m->hub, m->stdout_client);
	hub_client_discard(m->stdout_client);
}
