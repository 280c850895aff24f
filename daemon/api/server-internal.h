/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the event socket's two files share: server.c (the listening socket: accept under
 * limits, back-off, the socket file) and connection.c (one client: its request line, its hub
 * client, its lines outside the hub). Main thread only. */
#pragma once

#include <sys/socket.h>

#include "hub/shared-ring-writer.h"
#include "list.h"
#include "hub/request.h"
#include "api/server.h"

/* The kernel's SCM_MAX_FD: the most descriptors one message can carry. */
#define SERVER_SCM_MAX_FD            253
/* A request buffer starts this small and doubles up to MaxRequestBytes=. */
#define REQUEST_BUFFER_MIN           1024u
/* Input a subscriber sends is read and thrown away, at most this much per wakeup. */
#define DISCARD_PER_WAKEUP           (64u * 1024u)
/* accept() stops this long after running out of file descriptors, instead of spinning. */
#define ACCEPT_PAUSE_USEC            (100 * USEC_PER_MSEC)
/* A daemon out of descriptors would otherwise log ten times a second. */
#define ACCEPT_WARNING_INTERVAL_USEC (60 * 1000 * USEC_PER_MSEC)
/* Connections accepted per wakeup, so that a connection storm cannot starve the flush loop. */
#define ACCEPT_BATCH                 64
/* An error line: the fixed part and a message of REQUEST_MESSAGE_MAX bytes, each of which may
 * become a 6-byte escape. */
#define ERROR_LINE_MAX               (128u + 6u * REQUEST_MESSAGE_MAX)
#define PERFRELAY_GROUP              "perfrelay"
/* A notice goes to a shared member's socket only while less than this waits there unread: a
 * member that does not read its socket loses notices (counted), never gets half a line. */
#define NOTICE_SOCKET_BACKLOG        (64u * 1024u)
#define SOCKET_MODE                  0660

typedef struct Connection Connection;
typedef struct SharedEntry SharedEntry;

/* One shared ring set (shared-ring-writer.h) and the subscription all its members asked for, keyed by what
 * decides the bytes in it: format, unit frames, the access class, the filters. */
struct SharedEntry {
	Server *server;
	LIST_FIELDS(SharedEntry, entries);
	char *key;
	uid_t creator;     /* counted against MaxSharedRingsPerUid= while the ring lives */
	bool pooled;       /* the creator's pool (users.h): the ring's bytes are charged to both */
	uint64_t charged;  /* the ring's bytes, charged to the creator while the ring lives */
	Subscription *sub; /* the filter its hub client matches with */
	SharedRing *ring;
	HubClient *client; /* writes the ring; NULL once retired */
	HubFlushFn flush;  /* its hub client's, for the ring set that replaces it */
	/* Never written again, and joined by no one: its members were moved to a fresh ring set
	 * (connection_retire_shared()). It lives until the last member that stayed leaves. */
	bool retired;
};

struct Connection {
	Server *server;
	LIST_FIELDS(Connection, connections);
	uint64_t id;
	int fd;
	struct ucred cred; /* SO_PEERCRED: the peer at connect() time */
	sd_event_source *io;
	sd_event_source *timer; /* until the request line is read */
	char *buf;              /* the request line so far */
	size_t len, size;
	Subscription *sub;            /* after the request: read by reader threads via the hub */
	HubClient *client;            /* after the request, unless it reads a shared ring */
	SharedEntry *shared;          /* after the request, if it reads a shared ring */
	SharedMember *member;         /* its place in shared->ring */
	HubClientStats shared_before; /* its figures on the ring sets it was moved from */
	bool input_open;              /* false after the client shut down its sending side */
	bool draining;                /* overflowed: detached, writing what is queued, then closed */
	bool charged;                 /* counted against its uid (users.h) */
	bool left_shared;             /* its shared ring set already left (at shutdown) */
	bool pooled;                  /* and the users' pool: not root, AllowGroups=, ControlGroups= */
	bool notices;                 /* a shared member that takes notices on its socket */
	uint64_t charged_bytes;       /* its queues' bytes, charged to its uid */
	ProtocolError drain_error;    /* why it is draining: the error line it gets at the end */
	/* Served from the history (Subscription.history): its stream and the lines read from it
	 * and not yet written. */
	void *history;
	char *hbuf;
	size_t hlen, hoff;
	bool hwait; /* the stream had nothing: waiting for server_history_wake() */
	bool hwake; /* server_history_wake()'s mark */
};

struct Server {
	sd_event *event;
	Hub *hub;
	ApiOptions o; /* a copy of the manager's; server_set_options() on reload */
	ServerFlushFn flush;
	void *userdata;
	int listen_fd;
	char *path;         /* what we listen on, for messages */
	char *created_path; /* the socket file we bound ourselves: removed at exit */
	sd_event_source *accept_source;
	sd_event_source *accept_pause;
	uint64_t accept_warned_usec; /* CLOCK_MONOTONIC of the last accept failure logged */
	Users *users;                /* what each uid holds, socket and bus together */
	Connection *connections;
	size_t n_connections;
	SharedEntry *shared_entries;
	size_t n_shared_entries;
	uint64_t next_id;
	ServerStats stats;
	bool shutting_down; /* no reader writes again: what shared clients have not read is theirs */
	const ServerHistoryOps *history;
	void *history_userdata;
};

/* connection.c */
/* Takes fd: a new connection, refused at once (with an error line) if over MaxClients= or
 * MaxClientsPerUid=. */
void connection_new(Server *s, int fd);
void connection_free(Connection *c);
void connection_recheck_access(Connection *c);     /* may free c */
void connection_close_for_shutdown(Connection *c); /* frees c */
/* c's access was revoked: every other member of its ring set moves to a fresh one (a
 * "reshared" line with its descriptors; a member that cannot be moved is closed), and the old
 * set is never written again, so that c can read nothing from after the revocation from the
 * mapping it keeps. c stays a member of the old set until it is freed. */
void connection_retire_shared(Connection *c);
void connection_subscribed(Connection *c); /* may free c */

/* Writes a short line outside the hub; never blocks. */
int send_line(int fd, const char *line, size_t len);
/* The same with descriptors, which arrive with the line's first byte. -EAGAIN if it did not go
 * out whole. */
int send_line_fds(int fd, const char *line, size_t len, const int *fds, size_t n_fds);
/* Writes what the client's queues hold and acts on the result (see connection.c). */
void server_flush_client(Server *s, HubClient *hc);
/* Answers with the hello line (and the given descriptors); never blocks. */
int connection_send_hello(Connection *c, const int *fds, size_t n_fds, const char *extra);

/* connection-history.c */
/* Opens c's stream out of the history (Subscription.history; c->sub takes sub in any case).
 * 0; -EINVAL with the client's message in err; -ENOMEM. */
int connection_history_open(Connection *c, Subscription *sub, char *err, size_t err_size);
/* Writes what the stream has, as far as the socket takes it: 0 (then the caller updates c's
 * events), 1 at the end of a stream that does not follow, a negative errno when the client is
 * gone. The caller frees c on anything but 0. */
int connection_history_pump(Connection *c);
/* Ends the stream and frees its buffer (connection_free()). */
void connection_history_close(Connection *c);

/* connection-shared.c */
/* Joins c to the shared ring of its subscription (made if none serves it yet, with `flush` as
 * its ring's consumer: connection_shared_flush()). Returns 1 if joined: *sub is taken, ret_fds
 * get the read-only ring (the caller's to close) and the member page (the member's), and
 * `extra` the hello line's "shared" part; the caller sends the hello. 0 if the subscription
 * cannot share (limits, or off): the caller serves it over the socket. */
int connection_join_shared(
	Connection *c, Subscription **sub, HubFlushFn flush, int ret_fds[2], char *extra, size_t extra_size);
/* Leaves the ring (the last member frees it) and adds the member's figures to the gone ones. */
void connection_leave_shared(Connection *c, HubClientStats *ret);
/* A fresh ring set for the subscription of retired e (joined by no one again), taking over its
 * charge. */
int connection_shared_replace(SharedEntry *e, SharedEntry **ret);
/* Moves member c from its ring set to `to` (see connection_retire_shared()): the "reshared"
 * line for it in `line` (its length returned) and a read-only descriptor of the new ring set in
 * *ret_ro, which the line must carry with the member page's descriptor. */
int connection_move_shared(Connection *c, SharedEntry *to, char *line, size_t size, int *ret_ro);
/* The ring set of e is never written again. */
void connection_shared_stop(SharedEntry *e);
void connection_shared_stats(const Connection *c, HubClientStats *ret);
