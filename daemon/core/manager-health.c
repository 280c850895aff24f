/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager's health tick: STATUS= with live figures and WATCHDOG=1 while every reader makes
 * progress, once a second; and the fault injection that stalls a reader (tests only). */
#include <systemd/sd-daemon.h>

#include "perfrelay-config.h"

#include "base/log.h"
#include "core/manager-internal.h"
#include "core/stats.h"
#include "time-util.h"

#define HEALTH_INTERVAL_USEC (1000ULL * 1000ULL)


/* Slack on top of two flush intervals before a quiet reader counts as stalled: one drain of
 * half a ring per CPU of the group, and the scheduler's delays on a loaded machine. */
#define READER_STALL_SLACK_USEC (1000ULL * 1000ULL)

/* STATUS=: rate and the accounting totals of the stats snapshot (lifetime figures of the
 * pinned maps: see stats.h). */
static void manager_notify_status(Manager *m, uint64_t rate, uint64_t ring_lost, bool alive) {
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	StatsSources src;

	manager_stats_sources(m, &src);
	if (stats_snapshot(&src, &s) < 0) {
		(void) sd_notifyf(
			false,
			"STATUS=%s: %zu readers, %" PRIu64 " events/s, %" PRIu64 " lost in rings%s",
			m->state == MANAGER_RUNNING ? "Running" : "Stopping",
			m->n_readers,
			rate,
			ring_lost,
			alive ? "" : "; a reader is stalled");
		return;
	}
	(void) sd_notifyf(
		false,
		"STATUS=%s: %zu readers, %" PRIu64 " events/s, %" PRIu64
		" lost in rings; producers: %" PRIu64 " failures while serving, %" PRIu64 " before, %" PRIu64
		" crash_lost, %" PRIu64 " seq_gaps; clients: %" PRIu64 " dropped%s",
		m->state == MANAGER_RUNNING ? "Running" : "Stopping",
		m->n_readers,
		rate,
		ring_lost,
		s->total.failures_serving,
		s->total.failures_downtime,
		s->total.crash_lost,
		s->total.seq_gaps,
		s->clients_dropped,
		alive ? "" : "; a reader is stalled");
}

/* A reader goes around its loop at least every FlushIntervalMs= (its longest epoll timeout) plus
 * one drain, and stamps the time each round. It is stalled when its last round is older than
 * twice the flush interval plus the slack: a limit in time, so that it holds whatever the health
 * tick is (shorter or longer than the flush interval, which a count of rounds per tick cannot
 * judge). */
static bool manager_readers_alive(Manager *m, uint64_t now) {
	uint64_t limit = 2ULL * m->config->flush_interval_ms * 1000ULL + READER_STALL_SLACK_USEC;
	bool alive = true;

	for (size_t i = 0; i < m->n_readers; i++) {
		uint64_t last = STAT_LOAD(reader_stats(m->readers[i])->alive_usec);

		if (now > last && now - last > limit) {
			if (!m->watchdog_withheld)
				log_error(
					"Reader %zu made no progress for %" PRIu64
					" ms: withholding WATCHDOG=1",
					i,
					(now - last) / 1000);
			alive = false;
		}
	}
	return alive;
}

static int on_health(sd_event_source *s, uint64_t usec, void *userdata) {
	Manager *m = userdata;
	uint64_t t = now_usec(CLOCK_MONOTONIC), events = 0, lost = 0, elapsed = t - m->health_last_usec;
	uint64_t interval = m->watchdog_usec ? MIN(m->watchdog_usec / 2, HEALTH_INTERVAL_USEC) :
					       HEALTH_INTERVAL_USEC;
	bool alive;

	for (size_t i = 0; i < m->n_readers; i++) {
		events += STAT_LOAD(reader_stats(m->readers[i])->events);
		for (size_t k = 0; k < reader_n_rings(m->readers[i]); k++)
			lost += STAT_LOAD(reader_cpu_stats(m->readers[i], k)->lost);
	}
	alive = manager_readers_alive(m, t);
	if (m->state == MANAGER_RUNNING)
		manager_features_tick(m);
	(void) decoders_collect(m->decoders);

	if (m->watchdog_usec && alive)
		(void) sd_notify(false, "WATCHDOG=1");
	if (alive && m->watchdog_withheld)
		log_notice("Every reader makes progress again");
	m->watchdog_withheld = !alive;

	manager_notify_status(
		m, elapsed ? (events - m->health_last_events) * 1000000ULL / elapsed : 0, lost, alive);
	m->health_last_usec = t;
	m->health_last_events = events;
	return sd_event_source_set_time(s, usec + interval);
}

int manager_setup_health(Manager *m) {
	uint64_t wd = 0;
	int r;

	/* sd_watchdog_enabled() checks $WATCHDOG_PID too; 0 when not watched. */
	if (sd_watchdog_enabled(false, &wd) > 0)
		m->watchdog_usec = wd;
	m->health_last_usec = now_usec(CLOCK_MONOTONIC);
	r = sd_event_add_time_relative(
		m->event,
		&m->health_source,
		CLOCK_MONOTONIC,
		m->watchdog_usec ? MIN(m->watchdog_usec / 2, HEALTH_INTERVAL_USEC) : HEALTH_INTERVAL_USEC,
		0,
		on_health,
		m);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the health timer: %m");
	return sd_event_source_set_enabled(m->health_source, SD_EVENT_ON);
}

#if PERFRELAY_FAULT_INJECTION
/* Test-only (built with -Dfault_injection=true): SIGUSR2 freezes reader 0, or thaws it, so a
 * test can prove that the watchdog notices a stalled reader. */
int manager_on_fault_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
	Manager *m = userdata;
	static int frozen;

	frozen = !frozen;
	log_warning("Fault injection: reader 0 %s", frozen ? "frozen" : "thawed");
	if (m->n_readers > 0)
		reader_set_frozen(m->readers[0], frozen);
	return 0;
}
#endif
