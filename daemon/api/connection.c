/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One client of the event socket: its credentials and limits, the request line read and
 * answered (hello or error line), its hub client and how its output is written, until it goes. */
#include <inttypes.h>
#include <linux/sockios.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#include "perfrelay-config.h"

#include "hub/encode.h"
#include "hub/filter.h"
#include "base/log.h"
#include "api/server-internal.h"
#include "time-util.h"

/* Lines written directly, outside the hub ------------------------------------------------- */

/* Never blocks. A Unix stream socket takes a line this short whole (one skb) or not at all, so
 * a line is never cut; the socket buffer of a new connection is empty, so hello and error
 * lines always go out. */
int send_line(int fd, const char *line, size_t len) {
	ssize_t n = send(fd, line, len, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0)
		return negative_errno();
	return (size_t) n == len ? 0 : -EAGAIN;
}

static size_t format_error(ProtocolError code, const char *message, char *buf, size_t size) {
	int k = snprintf(
		buf, size, "{\"type\":\"error\",\"error\":\"%s\",\"message\":", protocol_error_to_string(code));
	ssize_t m;

	if (k < 0 || (size_t) k >= size)
		return 0;
	m = encode_json_string(message, strlen(message), buf + k, size - (size_t) k - 2);
	if (m < 0)
		return 0; /* cannot happen: ERROR_LINE_MAX bounds the escaped message */
	memcpy(buf + k + m, "}\n", 2);
	return (size_t) k + (size_t) m + 2;
}

/* Connections ----------------------------------------------------------------------------- */

static int connection_update_events(Connection *c);

/* The end of the request phase, for either path. May free c. */
void connection_subscribed(Connection *c) {
	c->server->stats.subscribed++;
	c->timer = sd_event_source_disable_unref(c->timer);
	free(c->buf);
	c->buf = NULL;
	c->len = c->size = 0;
	log_debug(
		"Client %" PRIu64 " (pid %d, uid %u) subscribed, format %s, access %s%s",
		c->id,
		(int) c->cred.pid,
		(unsigned) c->cred.uid,
		subscription_format_to_string(c->sub->format),
		c->sub->access == SUBSCRIPTION_ACCESS_ALL ? "all" : "own uid",
		c->shared ? ", shared ring" : "");
	if (connection_update_events(c) < 0)
		connection_free(c);
}

static bool match_subscription(
	const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	return filter_match_in(filter, ev, origin->unit, origin->container, lineage);
}

static bool wants_types_subscription(const void *filter, const uint16_t *types, size_t n, bool third_party) {
	return filter_wants_types(filter, types, n, third_party);
}

void connection_free(Connection *c) {
	Server *s = c->server;

	if (c->client) {
		HubClientStats st;

		/* After this no reader touches the client or its subscription. */
		hub_client_detach(s->hub, c->client);
		/* What it was never written is dropped: offered = sent + dropped from here on. */
		hub_client_discard(c->client);
		hub_client_get_stats(c->client, &st);
		s->stats.gone_offered += st.offered;
		s->stats.gone_sent += st.sent;
		s->stats.gone_dropped += st.dropped;
		log_debug(
			"Client %" PRIu64 " disconnected: %" PRIu64 " events offered, %" PRIu64
			" sent, %" PRIu64 " dropped",
			c->id,
			st.offered,
			st.sent,
			st.dropped);
		hub_client_free(c->client);
		s->stats.clients--;
	} else if (c->shared)
		connection_leave_shared(c, NULL);
	else if (c->history)
		connection_history_close(c);
	else if (!c->left_shared)
		s->stats.pending--;
	if (c->charged)
		users_release(s->users, c->cred.uid, c->pooled, 1, c->charged_bytes);
	subscription_free(c->sub);
	sd_event_source_disable_unref(c->io);
	sd_event_source_disable_unref(c->timer);
	safe_close(c->fd);
	free(c->buf);

	LIST_REMOVE(connections, s->connections, c);
	s->n_connections--;
	free(c);
}

/* Answers with an error line (if the socket takes it) and closes. */
static void connection_refuse(Connection *c, ProtocolError code, const char *message) {
	char line[ERROR_LINE_MAX];
	size_t n = format_error(code, message, line, sizeof(line));

	c->server->stats.refused[code]++;
	log_debug(
		"Client %" PRIu64 " (pid %d, uid %u) refused: %s: %s",
		c->id,
		(int) c->cred.pid,
		(unsigned) c->cred.uid,
		protocol_error_to_string(code),
		message);
	if (n > 0)
		(void) send_line(c->fd, line, n);
	connection_free(c);
}

_printf_(3, 4) static void connection_refusef(Connection *c, ProtocolError code, const char *fmt, ...) {
	char m[REQUEST_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	(void) vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	connection_refuse(c, code, m);
}

/* EPOLLIN while input is open, EPOLLOUT while the hub client waits for room; with neither,
 * epoll still reports EPOLLHUP/EPOLLERR, which is how a full close is noticed. */
static int connection_update_events(Connection *c) {
	uint32_t events = c->input_open ? EPOLLIN : 0;
	int r;

	/* The last flush at shutdown runs after the loop finished, when sd-event refuses any
	 * change (-ESTALE) and nothing waits for events any more. */
	if (sd_event_get_state(c->server->event) == SD_EVENT_FINISHED)
		return 0;
	if (c->client && hub_client_blocked(c->client))
		events |= EPOLLOUT;
	if (c->history && (c->hoff < c->hlen || !c->hwait))
		events |= EPOLLOUT;
	r = sd_event_source_set_io_events(c->io, events);
	if (r < 0)
		log_warning_errno(
			r, "Client %" PRIu64 ": failed to update its event watch, closing: %m", c->id);
	return r;
}

/* recv() that closes any descriptor the peer passed. Returns bytes, 0 at EOF, negative errno;
 * *ret_fds is set if descriptors came with the data (or were cut off by the kernel). */
static ssize_t connection_recv(Connection *c, void *buf, size_t size, bool *ret_fds) {
	union {
		struct cmsghdr h;
		uint8_t raw[CMSG_SPACE(sizeof(int) * SERVER_SCM_MAX_FD)];
	} control;
	struct iovec iov = { .iov_base = buf, .iov_len = size };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = &control,
		.msg_controllen = sizeof(control),
	};
	ssize_t n;

	*ret_fds = false;
	n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return negative_errno();
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int fds[SERVER_SCM_MAX_FD];

			memcpy(fds, CMSG_DATA(cm), MIN(k, (size_t) SERVER_SCM_MAX_FD) * sizeof(int));
			for (size_t i = 0; i < k && i < SERVER_SCM_MAX_FD; i++)
				safe_close(fds[i]);
			c->server->stats.fds_closed += k;
			*ret_fds = true;
		}
	/* Descriptors that did not fit were dropped by the kernel, never installed. */
	if (mh.msg_flags & MSG_CTRUNC)
		*ret_fds = true;
	return n;
}

static int connection_access(Connection *c, SubscriptionAccess *ret) {
	const ApiOptions *cfg = &c->server->o;
	_cleanup_free_ gid_t *groups = NULL;
	socklen_t len = 64 * sizeof(gid_t);

	if (c->cred.uid == 0 || cfg->allow_groups.n + cfg->control_groups.n == 0) {
		*ret = c->cred.uid == 0 ? SUBSCRIPTION_ACCESS_ALL : SUBSCRIPTION_ACCESS_UID;
		return 0;
	}
	/* Supplementary groups as they were at connect(), like SO_PEERCRED. */
	for (;;) {
		gid_t *g = realloc(groups, len);

		if (!g)
			return -ENOMEM;
		groups = g;
		if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) >= 0)
			break;
		if (errno != ERANGE)
			return negative_errno();
	}
	*ret = filter_access(
		c->cred.uid, c->cred.gid, groups, len / sizeof(gid_t), &cfg->allow_groups, &cfg->control_groups);
	return 0;
}

/* The connection's consumer (HubClientOptions.flush), called by the manager's flush loop. */
static void connection_flush(HubClient *hc, void *userdata) {
	Connection *c = userdata;

	server_flush_client(c->server, hc);
}

int send_line_fds(int fd, const char *line, size_t len, const int *fds, size_t n_fds) {
	union {
		struct cmsghdr h;
		uint8_t raw[CMSG_SPACE(sizeof(int) * 2)];
	} control = {};
	struct iovec iov = { .iov_base = (void *) line, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t k;

	if (n_fds > 2)
		return -EINVAL;
	if (n_fds > 0) {
		mh.msg_control = &control;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		control.h.cmsg_level = SOL_SOCKET;
		control.h.cmsg_type = SCM_RIGHTS;
		control.h.cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(&control.h), fds, sizeof(int) * n_fds);
	}
	k = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (k < 0)
		return negative_errno();
	return (size_t) k == len ? 0 : -EAGAIN;
}

int connection_send_hello(Connection *c, const int *fds, size_t n_fds, const char *extra) {
	char hello[512];
	int n;

	n = snprintf(
		hello,
		sizeof(hello),
		"{\"type\":\"hello\",\"protocol\":%u,\"schema\":%u,\"version\":\"%s\",\"client_id\":%" PRIu64
		",\"format\":\"%s\",\"access\":\"%s\"%s}\n",
		PROTOCOL_VERSION,
		SCHEMA_VERSION,
		PERFRELAY_VERSION_STRING,
		c->id,
		subscription_format_to_string(c->sub->format),
		c->sub->access == SUBSCRIPTION_ACCESS_ALL ? "all" : "uid",
		extra ?: "");
	if (n < 0 || (size_t) n >= sizeof(hello))
		return -ENOBUFS;
	/* The socket buffer of a new connection is empty: the line goes out whole. */
	return send_line_fds(c->fd, hello, (size_t) n, fds, n_fds);
}

/* Refused by a limit of users.h: the error line names it and what the uid holds. */
static void connection_refuse_over(Connection *c, UsersRefusal refusal) {
	const ApiOptions *cfg = &c->server->o;
	unsigned clients;
	uint64_t bytes;

	users_get(c->server->users, c->cred.uid, &clients, &bytes);
	if (refusal == USERS_CLIENTS || refusal == USERS_BYTES)
		connection_refusef(
			c,
			PROTOCOL_TOO_MANY_CLIENTS,
			"the clients of users other than root are at the daemon's limit of %u clients or %" PRIu64
			" bytes of event queues (%s)",
			cfg->users.max_clients,
			cfg->users.max_bytes,
			users_refusal_to_string(refusal));
	else
		connection_refusef(
			c,
			PROTOCOL_TOO_MANY_CLIENTS,
			"uid %u holds %u clients and %" PRIu64
			" bytes of event queues already, on the socket and the bus; one more passes %s",
			(unsigned) c->cred.uid,
			clients,
			bytes,
			users_refusal_to_string(refusal));
}

/* The queues a subscriber gets are memory the daemon holds for its uid: charged, or refused. */
/* Charges c's uid for `bytes` of queues (or a history stream's buffers); frees c if over. */
static int charge_queues(Connection *c, uint64_t bytes) {
	Server *s = c->server;
	UsersLimits limits = s->o.users;
	UsersRefusal refusal;
	int r;

	r = users_charge(s->users, &limits, c->cred.uid, c->pooled, 0, bytes, &refusal);
	if (r >= 0) {
		c->charged_bytes = bytes;
		return 0;
	}
	if (r == -EDQUOT)
		connection_refuse_over(c, refusal);
	else
		connection_free(c);
	return r;
}

/* The ring's hub client has nothing to write; the flush loop runs it after a writer found a
 * hostile member: those are closed (their figures say what they had not read). */
static void connection_shared_flush(HubClient *hc, void *userdata) {
	SharedEntry *e = userdata;
	Server *s = e->server;
	Connection *next;

	if (!shared_ring_has_hostile(e->ring))
		return; /* the usual case, without a walk over every connection */
	for (Connection *c = s->connections; c; c = next) {
		next = c->connections_next;
		if (c->shared == e && shared_member_hostile(c->member)) {
			log_warning(
				"Client %" PRIu64
				" (pid %d, uid %u) moved its shared ring position under the "
				"daemon %u times in a row, closing it",
				c->id,
				(int) c->cred.pid,
				(unsigned) c->cred.uid,
				SHARED_RING_CAS_TRIES);
			s->stats.shared_hostile++;
			/* The last member frees e: stop once it is gone. */
			bool last = shared_ring_n_members(e->ring) == 1;
			connection_free(c);
			if (last)
				return;
		}
	}
}

/* Writes what c's history stream has; frees c when it ended or the client went. */
static void connection_history_run(Connection *c) {
	int r = connection_history_pump(c);

	if (r != 0 || connection_update_events(c) < 0)
		connection_free(c);
}

/* Serves c from the history (docs/history.md): its first lines go out at the first EPOLLOUT. */
static void connection_subscribe_history(Connection *c, Subscription *sub) {
	char err[REQUEST_MESSAGE_MAX];
	int r;

	/* Its buffers count as a queue would, against MaxQueueBytes= and MaxQueueBytesPerUid=. */
	if (c->server->history &&
	    charge_queues(c, SERVER_HISTORY_BUFFER + c->server->history->stream_bytes) < 0) {
		subscription_free(sub);
		return; /* c is gone */
	}
	r = connection_history_open(c, sub, err, sizeof(err));
	if (r == -ENOMEM) {
		log_warning("Client %" PRIu64 ": out of memory opening its history stream, closing", c->id);
		connection_free(c);
		return;
	}
	if (r < 0) {
		connection_refuse(c, PROTOCOL_BAD_REQUEST, err);
		return;
	}
	r = connection_send_hello(c, NULL, 0, NULL);
	if (r < 0) {
		log_debug_errno(r, "Client %" PRIu64 ": could not send the hello line: %m", c->id);
		connection_free(c);
		return;
	}
	connection_subscribed(c);
}

static void connection_subscribe(Connection *c, Subscription *sub_in) {
	_cleanup_(subscription_freep) Subscription *sub = sub_in;
	Server *s = c->server;
	HubClientOptions o = {
		.format = sub->format == SUBSCRIPTION_FORMAT_BINARY ? HUB_FORMAT_BINARY : HUB_FORMAT_JSON,
		.overflow = sub->overflow == SUBSCRIPTION_OVERFLOW_DISCONNECT ? HUB_OVERFLOW_DISCONNECT :
										HUB_OVERFLOW_DROP,
		.unit_frames = sub->unit_frames && sub->format == SUBSCRIPTION_FORMAT_BINARY,
		.queue_bytes = s->o.client_queue_bytes,
		.match = match_subscription,
		.wants_types = wants_types_subscription,
		.filter = sub,
		.userdata = c,
		.flush = connection_flush,
		.demand = subscription_demand(sub),
	};
	int r;

	r = connection_access(c, &sub->access);
	if (r < 0) {
		log_warning_errno(
			r, "Client %" PRIu64 ": failed to read the peer's groups, closing: %m", c->id);
		connection_free(c);
		return;
	}
	sub->access_uid = c->cred.uid;
	if (sub->history) {
		connection_subscribe_history(c, TAKE_PTR(sub));
		return;
	}
	o.redact = sub->access != SUBSCRIPTION_ACCESS_ALL;
	o.redact_uid = c->cred.uid;

	if (sub->shared) {
		_cleanup_close_ int ro = -EBADF;
		bool notices = sub->notices;
		char extra[128];
		int fds[2];

		r = connection_join_shared(c, &sub, connection_shared_flush, fds, extra, sizeof(extra));
		if (r > 0) {
			c->notices = notices;
			ro = fds[0];
			r = connection_send_hello(c, fds, 2, extra);
			if (r < 0) {
				log_debug_errno(
					r, "Client %" PRIu64 ": could not send the hello line: %m", c->id);
				connection_free(c);
				return;
			}
			connection_subscribed(c);
			return;
		}
	}

	r = hub_client_new(s->hub, c->fd, &o, &c->client);
	if (r < 0) {
		log_warning_errno(r, "Client %" PRIu64 ": failed to allocate its queues, closing: %m", c->id);
		connection_free(c);
		return;
	}
	s->stats.pending--;
	s->stats.clients++;
	r = charge_queues(c, hub_client_capacity(c->client));
	if (r < 0)
		return; /* c is gone */

	/* Attached before the hello line is sent: a client that acts once it has read its hello
	 * (starts a workload, as the tests do) sees every event from then on. Readers only queue;
	 * queues are written by this thread alone, so the hello line still goes first. */
	c->sub = TAKE_PTR(sub);
	r = hub_client_attach(s->hub, c->client);
	if (r < 0) {
		log_warning_errno(
			r, "Client %" PRIu64 ": failed to attach it to the readers, closing: %m", c->id);
		connection_free(c);
		return;
	}
	r = connection_send_hello(c, NULL, 0, NULL);
	if (r < 0) {
		log_debug_errno(r, "Client %" PRIu64 ": could not send the hello line: %m", c->id);
		connection_free(c); /* what was queued meanwhile counts as dropped */
		return;
	}
	connection_subscribed(c);
}

static void connection_process_request(Connection *c, size_t line_len) {
	const ApiOptions *cfg = &c->server->o;
	RequestLimits limits = { .max_bytes = cfg->max_request_bytes, .max_depth = cfg->max_json_depth };
	Subscription *sub = NULL;
	RequestError e;
	int r;

	r = request_parse(c->buf, line_len, &limits, &sub, &e);
	if (r == -ENOMEM) {
		log_warning_errno(r, "Client %" PRIu64 ": out of memory parsing its request, closing", c->id);
		connection_free(c);
		return;
	}
	if (r < 0) {
		connection_refuse(c, e.code, e.message);
		return;
	}
	connection_subscribe(c, sub);
}

/* Reads until the request line is complete; returns after acting on it or when the socket
 * has nothing more to read. */
static void connection_read_request(Connection *c) {
	size_t max = c->server->o.max_request_bytes;

	for (;;) {
		const char *nl;
		bool fds;
		ssize_t n;

		if (c->len == c->size) {
			size_t size = MIN(MAX(c->size * 2, (size_t) REQUEST_BUFFER_MIN), max);
			char *b;

			if (c->len >= max) {
				connection_refusef(
					c,
					PROTOCOL_TOO_LARGE,
					"the request line is longer than %zu bytes (MaxRequestBytes=)",
					max);
				return;
			}
			b = realloc(c->buf, size);
			if (!b) {
				log_warning(
					"Client %" PRIu64 ": out of memory reading its request, closing",
					c->id);
				connection_free(c);
				return;
			}
			c->buf = b;
			c->size = size;
		}

		n = connection_recv(c, c->buf + c->len, c->size - c->len, &fds);
		if (fds) {
			connection_refuse(
				c,
				PROTOCOL_FD_PASSED,
				"file descriptors are not accepted; the ones sent were closed");
			return;
		}
		if (n == -EAGAIN || n == -EINTR)
			return;
		if (n < 0) {
			log_debug_errno((int) n, "Client %" PRIu64 ": read failed: %m", c->id);
			connection_free(c);
			return;
		}
		if (n == 0) {
			/* A client that shuts down its side after the request may leave out the
			 * '\n': the end of its input ends the line too. */
			c->input_open = false;
			if (c->len == 0) {
				connection_refuse(
					c,
					PROTOCOL_BAD_REQUEST,
					"the connection was closed before a request line was sent");
				return;
			}
			if (c->len >= max) {
				connection_refusef(
					c,
					PROTOCOL_TOO_LARGE,
					"the request line is longer than %zu bytes (MaxRequestBytes=)",
					max);
				return;
			}
			connection_process_request(c, c->len);
			return;
		}
		nl = memchr(c->buf + c->len, '\n', (size_t) n);
		c->len += (size_t) n;
		if (nl) {
			/* Bytes after the line are input after the request: ignored. */
			connection_process_request(c, (size_t) (nl - c->buf));
			return;
		}
	}
}

/* A subscriber's input is read and discarded; returns false if the connection was freed. */
static bool connection_discard_input(Connection *c) {
	char buf[4096];

	for (size_t total = 0; total < DISCARD_PER_WAKEUP;) {
		bool fds;
		ssize_t n = connection_recv(c, buf, sizeof(buf), &fds);

		if (n == -EAGAIN || n == -EINTR)
			return true;
		if (n < 0) {
			log_debug_errno((int) n, "Client %" PRIu64 ": read failed: %m", c->id);
			connection_free(c);
			return false;
		}
		if (n == 0) {
			/* Half-closed: it keeps receiving until it closes for good (EPOLLHUP). */
			c->input_open = false;
			if (connection_update_events(c) < 0) {
				connection_free(c);
				return false;
			}
			return true;
		}
		total += (size_t) n;
	}
	return true;
}

static int on_connection_io(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
	Connection *c = userdata;
	Server *s = c->server;

	if (!c->client && !c->shared && !c->history) {
		/* Reading first: a request followed by a close is still answered. */
		connection_read_request(c);
		return 0;
	}
	if (revents & (EPOLLHUP | EPOLLERR)) {
		log_debug("Client %" PRIu64 " hung up", c->id);
		connection_free(c);
		return 0;
	}
	if ((revents & EPOLLIN) && !connection_discard_input(c))
		return 0;
	if (c->history) {
		if (revents & EPOLLOUT)
			connection_history_run(c);
		return 0;
	}
	if (revents & EPOLLOUT) {
		server_flush_client(s, c->client);
		/* Other clients and the hub's notification: the manager's flush loop. */
		s->flush(s->userdata);
	}
	return 0;
}

static int on_request_timeout(sd_event_source *es, uint64_t usec, void *userdata) {
	Connection *c = userdata;
	connection_refusef(
		c,
		PROTOCOL_TIMEOUT,
		"no complete request line within %u ms (RequestTimeoutMs=)",
		c->server->o.request_timeout_ms);
	return 0;
}

void connection_new(Server *s, int fd_in) {
	_cleanup_close_ int fd = fd_in;
	const ApiOptions *cfg = &s->o;
	UsersLimits limits = cfg->users;
	UsersRefusal refusal;
	socklen_t len = sizeof(struct ucred);
	struct ucred cred;
	Connection *c;
	int r;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		log_debug("Failed to read the credentials of a new connection, closing it: %m");
		return;
	}
	s->stats.accepted++;

	c = calloc(1, sizeof(*c));
	if (!c) {
		log_warning("Out of memory accepting a connection, closing it");
		return;
	}
	c->server = s;
	c->id = ++s->next_id;
	c->fd = TAKE_FD(fd);
	c->cred = cred;
	c->input_open = true;
	LIST_PREPEND(connections, s->connections, c);
	s->n_connections++;
	s->stats.pending++;

	log_debug(
		"Client %" PRIu64 " connected (pid %d, uid %u, gid %u)",
		c->id,
		(int) cred.pid,
		(unsigned) cred.uid,
		(unsigned) cred.gid);

	/* Charged at once: pending connections hold a slot too, so that clients that never send
	 * a request cannot get around the limits. The uid's bus monitors count as well. Those who
	 * see everything (root, AllowGroups=, ControlGroups=) are outside the users' pool: no
	 * number of unprivileged uids can crowd them out. */
	{
		SubscriptionAccess a;

		c->pooled = cred.uid != 0 && (connection_access(c, &a) < 0 || a != SUBSCRIPTION_ACCESS_ALL);
	}
	r = users_charge(s->users, &limits, cred.uid, c->pooled, 1, 0, &refusal);
	if (r == -EDQUOT) {
		connection_refuse_over(c, refusal);
		return;
	}
	if (r < 0) {
		log_warning_errno(r, "Out of memory accounting a connection, closing it: %m");
		connection_free(c);
		return;
	}
	c->charged = true;

	r = sd_event_add_io(s->event, &c->io, c->fd, EPOLLIN, on_connection_io, c);
	if (r >= 0)
		/* Accuracy of 1 ms: the default (250 ms) would dwarf short timeouts. */
		r = sd_event_add_time_relative(
			s->event,
			&c->timer,
			CLOCK_MONOTONIC,
			(uint64_t) cfg->request_timeout_ms * USEC_PER_MSEC,
			USEC_PER_MSEC,
			on_request_timeout,
			c);
	if (r < 0) {
		log_warning_errno(r, "Failed to watch client %" PRIu64 ", closing it: %m", c->id);
		connection_free(c);
	}
}

/* Writes what the client's queues hold and acts on the result: waits for EPOLLOUT when the
 * socket is full, drops the client when it is gone, closes it (with an "overflow" error line if
 * it can) when it asked to be disconnected on overflow. The connection may be freed on return. */
void server_flush_client(Server *s, HubClient *hc) {
	Connection *c = hub_client_userdata(hc);
	int r;

	if (!c->draining && hub_client_overflowed(hc)) {
		/* It asked to be disconnected when it falls behind: no more events, but what was
		 * queued before the loss still goes out, so that the stream ends at a line
		 * boundary, then the error line. Until it has read that, it keeps its slot and its
		 * queue, as any client that does not read does. */
		hub_client_detach(s->hub, hc);
		c->draining = true;
		c->drain_error = PROTOCOL_OVERFLOW;
	}
	r = hub_client_flush(hc);
	if (r < 0) {
		log_debug_errno(r, "Client %" PRIu64 ": write failed: %m", c->id);
		connection_free(c);
		return;
	}
	if (c->draining && r > 0) {
		/* At a line boundary now. Binary streams have no place for a JSON line. */
		const char *why = c->drain_error == PROTOCOL_ACCESS_REVOKED ?
			"a reload removed the AllowGroups= group that gave this client every event" :
			"the client's queue overflowed (on_overflow=disconnect)";

		if (c->sub->format == SUBSCRIPTION_FORMAT_JSON)
			connection_refuse(c, c->drain_error, why);
		else {
			s->stats.refused[c->drain_error]++;
			log_debug("Client %" PRIu64 " closing: %s", c->id, why);
			connection_free(c);
		}
		return;
	}
	if (connection_update_events(c) < 0)
		connection_free(c);
}

/* Reload: a group taken out of AllowGroups= (or ControlGroups=) takes its access along. A client that saw
 * everything only through it is closed like an overflowed client (what was queued before goes
 * out, then the error line), so that none keeps more than its hello line would now say. */
void connection_recheck_access(Connection *c) {
	SubscriptionAccess a;

	if ((!c->client && !c->shared) || c->draining || c->cred.uid == 0 ||
	    c->sub->access != SUBSCRIPTION_ACCESS_ALL)
		return;
	if (connection_access(c, &a) >= 0 && a == SUBSCRIPTION_ACCESS_ALL)
		return;
	if (c->shared) {
		/* Its ring is the access class "all": the others on it move to a fresh one and it
		 * is never written again, so that the mapping c keeps holds nothing from after
		 * the reload. libperfrelay reads the error line from the socket. */
		connection_retire_shared(c);
		connection_refuse(
			c,
			PROTOCOL_ACCESS_REVOKED,
			"a reload removed the AllowGroups= group that gave this client every event");
		return;
	}
	log_info(
		"Client %" PRIu64
		" (pid %d, uid %u): AllowGroups= no longer grants it every event, "
		"disconnecting",
		c->id,
		(int) c->cred.pid,
		(unsigned) c->cred.uid);
	/* After this no reader offers it an event. */
	hub_client_detach(c->server->hub, c->client);
	c->draining = true;
	c->drain_error = PROTOCOL_ACCESS_REVOKED;
	server_flush_client(c->server, c->client); /* may free c */
}

void connection_retire_shared(Connection *c) {
	Server *s = c->server;
	SharedEntry *e = c->shared, *fresh = NULL;

	e->retired = true; /* joined by no one from now on */
	LIST_FOREACH(connections, i, s->connections) {
		_cleanup_close_ int ro = -EBADF;
		char line[160];
		int r = 0;

		if (i == c || i->shared != e)
			continue;
		if (!fresh) {
			r = connection_shared_replace(e, &fresh);
			if (r < 0)
				log_warning_errno(
					r,
					"Failed to make a shared ring for the members of a revoked client's: %m");
		}
		if (r >= 0)
			r = connection_move_shared(i, fresh, line, sizeof(line), &ro);
		if (r >= 0) {
			int fds[2] = { ro, shared_member_fd(i->member) };

			r = send_line_fds(i->fd, line, (size_t) r, fds, 2);
		}
		if (r < 0) {
			/* Closed rather than left on a set that is no longer written. */
			bool last = fresh && i->shared == fresh && shared_ring_n_members(fresh->ring) == 1;

			log_warning_errno(
				r,
				"Client %" PRIu64 ": failed to move it to a fresh shared ring, closing it: %m",
				i->id);
			connection_free(i);
			if (last)
				fresh = NULL; /* freed with its last member */
		}
	}
	/* Nothing is written to the old set again. */
	connection_shared_stop(e);
}

static void send_goodbye(Connection *c, const HubClientStats *st) {
	char line[160];
	int n = snprintf(
		line,
		sizeof(line),
		"{\"type\":\"goodbye\",\"reason\":\"shutdown\",\"offered\":%" PRIu64 ",\"sent\":%" PRIu64
		",\"dropped\":%" PRIu64 "}\n",
		st->offered,
		st->sent,
		st->dropped);

	(void) send_line(c->fd, line, (size_t) n);
}

/* Never waits: a client that does not keep up loses the tail, as it would have lost events
 * while the daemon ran. The goodbye says what the client was offered, sent and dropped, final:
 * the readers have stopped. */
void connection_close_for_shutdown(Connection *c) {
	HubClientStats st;

	if (c->client && hub_client_flush(c->client) > 0 && c->sub->format == SUBSCRIPTION_FORMAT_JSON) {
		hub_client_get_stats(c->client, &st);
		send_goodbye(c, &st);
	} else if (c->shared) {
		/* Its events are in the ring, read at its pace, and count as sent: the set is never
		 * written again. The socket carries the goodbye in either format (libperfrelay
		 * reads it). */
		connection_leave_shared(c, &st);
		c->left_shared = true;
		send_goodbye(c, &st);
	}
	connection_free(c);
}

void server_publish_notice(Server *s, const HubNotice *n, HubNoticeStats *st) {
	char line[HUB_NOTICE_MAX + 1];

	if (n->json_len > HUB_NOTICE_MAX || n->json_redacted_len > HUB_NOTICE_MAX)
		return; /* counted by hub_publish_notice() */
	LIST_FOREACH(connections, c, s->connections) {
		const Subscription *sub = c->shared ? c->shared->sub : NULL;
		bool redact;
		size_t len;
		int queued;

		if (!sub || !c->notices || c->draining ||
		    !filter_wants_types(sub, n->types, n->n_types, n->third_party))
			continue;
		redact = sub->access != SUBSCRIPTION_ACCESS_ALL;
		len = redact ? n->json_redacted_len : n->json_len;
		if (ioctl(c->fd, SIOCOUTQ, &queued) < 0 || queued < 0 ||
		    (size_t) queued > NOTICE_SOCKET_BACKLOG) {
			st->dropped++;
			continue;
		}
		memcpy(line, redact ? n->json_redacted : n->json, len);
		line[len] = '\n';
		if (send_line(c->fd, line, len + 1) < 0)
			st->dropped++; /* with NOTICE_SOCKET_BACKLOG of a larger buffer free, nothing */
		else
			st->delivered++;
	}
}

/* The first connection with a history stream (and, with `waking`, marked to wake), or NULL. */
static Connection *first_stream(Server *s, bool waking) {
	LIST_FOREACH(connections, c, s->connections)
		if (c->history && (!waking || c->hwake))
			return c;
	return NULL;
}

void server_set_history(Server *s, const ServerHistoryOps *ops, void *userdata) {
	Connection *c;

	/* Without the history, its streams end. */
	while (!ops && (c = first_stream(s, false)))
		connection_free(c);
	s->history = ops;
	s->history_userdata = userdata;
}

void server_history_wake(Server *s) {
	Connection *c;

	LIST_FOREACH(connections, i, s->connections)
		i->hwake = i->history && i->hwait;
	/* A stream may end and free its connection, which the list walk would not survive: each
	 * round takes the first one still marked. */
	while ((c = first_stream(s, true))) {
		c->hwake = false;
		connection_history_run(c);
	}
}
