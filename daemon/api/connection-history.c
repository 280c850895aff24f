/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A connection served from the history (docs/history.md): the history feature makes its lines
 * (ServerHistoryOps), this file writes them at the client's pace. Nothing is dropped for a slow
 * client: what it has not read stays on disk, and only retention can take it (a gap line). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "api/server-internal.h"
#include "base/log.h"

/* Bytes written to one stream per wakeup, so that a client that reads fast cannot hold the
 * main thread: the rest goes at the next EPOLLOUT. */
#define HISTORY_PUMP_BUDGET (1024u * 1024u)

int connection_history_open(Connection *c, Subscription *sub, char *err, size_t err_size) {
	Server *s = c->server;
	int r;

	c->sub = sub;
	if (!s->history) {
		snprintf(err, err_size, "the history is off (History=no, or HistoryPath= could not be used)");
		return -EINVAL;
	}
	c->hbuf = malloc(SERVER_HISTORY_BUFFER);
	if (!c->hbuf)
		return -ENOMEM;
	r = s->history->open(s->history_userdata, c->sub, &c->history, err, err_size);
	if (r < 0)
		return r;
	s->stats.pending--;
	s->stats.clients++;
	s->stats.history_clients++;
	return 0;
}

int connection_history_pump(Connection *c) {
	Server *s = c->server;
	size_t budget = HISTORY_PUMP_BUDGET;

	c->hwait = false;
	while (budget > 0) {
		ssize_t n;

		if (c->hoff < c->hlen) {
			n = send(c->fd, c->hbuf + c->hoff, c->hlen - c->hoff, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			if (n < 0)
				return log_debug_errno(-errno, "Client %" PRIu64 ": write failed: %m", c->id);
			c->hoff += (size_t) n;
			budget -= MIN((size_t) n, budget);
			continue;
		}
		n = s->history->read(c->history, c->hbuf, SERVER_HISTORY_BUFFER);
		if (n == -EAGAIN) {
			c->hwait = true;
			break;
		}
		if (n == -EINPROGRESS)
			break; /* EPOLLOUT stays on: the next turn of the loop goes on */
		if (n < 0)
			return log_debug_errno(
				(int) n, "Client %" PRIu64 ": its history stream failed: %m", c->id);
		if (n == 0) {
			/* The end of a stream without "follow": the client reads to EOF. */
			(void) shutdown(c->fd, SHUT_WR);
			return 1;
		}
		c->hlen = (size_t) n;
		c->hoff = 0;
	}
	return 0;
}

void connection_history_close(Connection *c) {
	uint64_t events = 0;

	if (c->history) {
		c->server->history->close(c->history, &events);
		c->history = NULL;
		c->server->stats.history_clients--;
		c->server->stats.clients--;
		c->server->stats.history_events += events;
	}
	free(c->hbuf);
	c->hbuf = NULL;
}
