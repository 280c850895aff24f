/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The event socket (docs/protocol.md): the listening socket (from systemd or created at
 * SocketPath=), per-connection limits and credentials, the request line, the hello line, and
 * the life of each subscriber as a hub client. Main thread only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "api/options.h"
#include "hub/hub.h"
#include "hub/request.h"
#include "api/users.h"

#define PROTOCOL_VERSION 1u
#define SCHEMA_VERSION   3u

typedef struct Server Server;

typedef struct ServerStats {
	uint64_t clients;                      /* subscribed now */
	uint64_t pending;                      /* connected, request line not read yet */
	uint64_t accepted;                     /* connections accepted since start */
	uint64_t subscribed;                   /* of which sent a valid request */
	uint64_t refused[_PROTOCOL_ERROR_MAX]; /* connections closed with each error line */
	uint64_t fds_closed;                   /* file descriptors clients passed us, closed unread */
	uint64_t accept_errors;                /* accept() failures other than "try again" (EMFILE, ...) */
	/* Per-client event counters (offered = sent + dropped for each client), summed over the
	 * subscribers that have gone and over those connected now: D-Bus ClientDrops is
	 * gone_dropped + live_dropped. "sent" counts events written whole to the client; what
	 * was still queued when a client went counts as dropped (hub_client_discard()). Live
	 * clients: offered = sent + dropped + the events in their queues. */
	uint64_t gone_offered;
	uint64_t gone_sent;
	uint64_t gone_dropped;
	uint64_t live_offered;
	uint64_t live_sent;
	uint64_t live_dropped;
	/* The shared path (docs/shared-ring.md). */
	uint64_t shared_rings;     /* ring sets now */
	uint64_t shared_bytes;     /* their memory */
	uint64_t shared_clients;   /* clients reading one now (also in `clients`) */
	uint64_t shared_fallbacks; /* clients that asked and got the socket stream (limits) */
	uint64_t shared_hostile;   /* members closed for fighting the writer over their position */
	uint64_t shared_moved;     /* members moved to a fresh ring set (another member's access revoked) */
	/* The history's streams (docs/history.md; also in `clients`). */
	uint64_t history_clients; /* now */
	uint64_t history_events;  /* event lines written by streams that have ended */
} ServerStats;

/* Runs the manager's flush loop: called after the server wrote to a client outside of it (on
 * EPOLLOUT), so that the loop re-arms the hub's notification before the event loop sleeps. */
typedef void (*ServerFlushFn)(void *userdata);

/* Takes the socket systemd passed (sd_listen_fds) or creates options->socket_path, and starts
 * accepting. The options are copied; their group lists must stay valid until
 * server_set_options() or server_free(). */
int server_new(
	sd_event *event, Hub *hub, const ApiOptions *options, ServerFlushFn flush, void *userdata, Server **ret);
/* Closes every connection (without a goodbye) and the listening socket; removes the socket
 * file if this server created it. */
Server *server_free(Server *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Server *, server_free);

/* Every connection and bus monitor is charged to its uid here (users.h), against [Socket]'s
 * MaxClients=, MaxClientsPerUid=, MaxQueueBytes=, MaxQueueBytesPerUid=. */
Users *server_users(const Server *s);

/* The limits of [Socket] apply to connections accepted from now on. */
void server_set_options(Server *s, const ApiOptions *options);


/* Shutdown: stops accepting, sends each subscriber what is queued and a goodbye line if its
 * socket takes them without blocking, and closes every connection. */
void server_shutdown(Server *s);

void server_get_stats(const Server *s, ServerStats *ret);

/* One subscribed client, for D-Bus ListClients. Valid during the callback only. */
typedef struct ServerClientInfo {
	uint64_t id; /* the hello line's client_id */
	uid_t uid;   /* SO_PEERCRED at connect() */
	pid_t pid;
	const Subscription *sub;
	bool shared; /* reads a shared ring (docs/shared-ring.md) */
	HubClientStats stats;
} ServerClientInfo;

/* Calls fn for every subscribed client (connections still sending their request are left
 * out), oldest first; stops at fn's first negative return and returns it. */
int server_foreach_client(Server *s, int (*fn)(const ServerClientInfo *info, void *userdata), void *userdata);

/* Closes the connection with this id, subscribed or not, without a goodbye line (D-Bus
 * DisconnectClient). Returns 0, or -ESRCH if there is no such connection. */
int server_disconnect_client(Server *s, uint64_t id);
const char *server_socket_path(const Server *s);

/* The history (docs/history.md), offered by the history feature (features/history/): a
 * subscription with any of its keys (Subscription.history) is served from it, as JSON lines
 * the feature makes; the connection writes them at the client's pace. Main thread. */
typedef struct ServerHistoryOps {
	/* Opens the stream for sub (its filters and access already decided; valid until close).
	 * 0, or a negative errno and the client's error message in err. */
	int (*open)(void *userdata, const Subscription *sub, void **ret, char *err, size_t err_size);
	/* Whole lines of the stream into buf (size >= SERVER_HISTORY_BUFFER): bytes, 0 at its end
	 * (the connection is then closed), -EAGAIN when nothing is there yet (until
	 * server_history_wake()), -EINPROGRESS when it read its share of blocks for one call
	 * without a line (ask again on the next turn of the loop), another negative errno to
	 * close it. */
	ssize_t (*read)(void *stream, char *buf, size_t size);
	/* Its figures: events written into lines. */
	void (*close)(void *stream, uint64_t *ret_events);
	/* What a stream holds in memory, charged to its user with the connection's buffer. */
	uint64_t stream_bytes;
	/* The record types the history holds (bit t: type t). */
	uint64_t types;
} ServerHistoryOps;
#define SERVER_HISTORY_BUFFER (128u * 1024u)
/* NULL ops: no history (a request for it is refused with a message saying so). */
void server_set_history(Server *s, const ServerHistoryOps *ops, void *userdata);
/* New blocks are in the history: the streams waiting for them read again. */
void server_history_wake(Server *s);

/* The notice of records lost upstream (hub.h, HubNotice) for the members of shared ring sets
 * that asked for notices and whose subscription takes one of its types: a line on their
 * socket (their rings carry events only). Counted into *st. */
void server_publish_notice(Server *s, const HubNotice *n, HubNoticeStats *st);
