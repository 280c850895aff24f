/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* `perfrelayctl monitor --nats`: reads the fleet's events back from JetStream with an ordered
 * consumer and hands each one, as the daemon's JSON line, to the local monitor's printer. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct MonitorNatsArgs {
	const char *url;    /* nats://host:port[,...] */
	const char *stream; /* default PERFRELAY */
	const char *host;   /* only this host's subjects (perfrelay.<host>.>), or NULL */
	int64_t since_ns;   /* > 0: only events stored in the last since_ns */
	bool no_follow;     /* exit once the stream's end is reached */
} MonitorNatsArgs;

/* Called per event: line is a JSON event line (without '\n'); store_minus_ts_ns, added to the
 * event's "ts", gives the wall-clock time JetStream stored it (the event's own boot clock is the
 * sending host's). Returns < 0 to stop. */
typedef int (*monitor_nats_emit_t)(const char *line, size_t len, int64_t store_minus_ts_ns, void *userdata);

/* Runs until SIGINT/SIGTERM arrive on signal_fd (returns 0), the stream's end with no_follow
 * (0), or an error (negative errno, after a message on stderr). */
int monitor_nats_run(const MonitorNatsArgs *a, monitor_nats_emit_t emit, void *userdata, int signal_fd);
