/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The event socket's listener: the socket (from systemd or bound at SocketPath=), accepting
 * under limits with a back-off when descriptors run out, and the server's figures. The
 * connections themselves are in connection.c. */
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <systemd/sd-daemon.h>

#include "perfrelay-config.h"

#include "base/log.h"
#include "api/server-internal.h"
#include "time-util.h"

static int on_accept_resume(sd_event_source *es, uint64_t usec, void *userdata) {
	Server *s = userdata;

	s->accept_pause = sd_event_source_disable_unref(s->accept_pause);
	(void) sd_event_source_set_enabled(s->accept_source, SD_EVENT_ON);
	return 0;
}

static int on_accept(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
	Server *s = userdata;

	for (int i = 0; i < ACCEPT_BATCH; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		uint64_t now = 0;
		int r;

		if (cfd >= 0) {
			connection_new(s, cfd);
			continue;
		}
		r = -errno;
		if (r == -EAGAIN)
			return 0;
		if (r == -EINTR || r == -ECONNABORTED || r == -EPROTO)
			continue;
		/* Out of descriptors or memory: the listening socket stays readable, so pause
		 * instead of spinning; waiting connections stay in the backlog. */
		s->stats.accept_errors++;
		(void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
		if (s->accept_warned_usec == 0 || now >= s->accept_warned_usec + ACCEPT_WARNING_INTERVAL_USEC) {
			s->accept_warned_usec = now ?: 1;
			log_warning_errno(
				r,
				"Failed to accept a connection on %s, pausing for %llu ms (%" PRIu64
				" times so far): %m",
				s->path,
				ACCEPT_PAUSE_USEC / USEC_PER_MSEC,
				s->stats.accept_errors);
		}
		(void) sd_event_source_set_enabled(s->accept_source, SD_EVENT_OFF);
		if (!s->accept_pause &&
		    sd_event_add_time_relative(
			    s->event,
			    &s->accept_pause,
			    CLOCK_MONOTONIC,
			    ACCEPT_PAUSE_USEC,
			    USEC_PER_MSEC,
			    on_accept_resume,
			    s) < 0)
			(void) sd_event_source_set_enabled(s->accept_source, SD_EVENT_ON);
		return 0;
	}
	return 0;
}

/* The listening socket -------------------------------------------------------------------- */

static int mkdir_parents(const char *path, mode_t mode) {
	_cleanup_free_ char *p = strdup(path);

	if (!p)
		return -ENOMEM;
	for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return negative_errno();
		*s = '/';
	}
	return 0;
}

/* A socket file left by a daemon that died is removed; one somebody listens on is not. */
static int remove_stale_socket(const char *path, const struct sockaddr_un *sa, socklen_t sa_len) {
	_cleanup_close_ int fd = -EBADF;
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : negative_errno();
	if (!S_ISSOCK(st.st_mode))
		return log_error_errno(-EEXIST, "%s exists and is not a socket; not touching it", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return negative_errno();
	if (connect(fd, (const struct sockaddr *) sa, sa_len) >= 0 || errno == EAGAIN)
		return log_error_errno(
			-EADDRINUSE,
			"Another process is listening on %s (is perfrelayd already running?)",
			path);
	if (errno != ECONNREFUSED)
		return log_error_errno(-errno, "Failed to check whether %s is in use: %m", path);
	if (unlink(path) < 0 && errno != ENOENT)
		return log_error_errno(-errno, "Failed to remove the stale socket %s: %m", path);
	log_debug("Removed stale socket %s", path);
	return 0;
}

static int server_create_socket(Server *s, const char *path) {
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t sa_len;
	_cleanup_close_ int fd = -EBADF;
	struct group *g;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(
			-ENAMETOOLONG, "SocketPath=%s: longer than a socket address can hold", path);
	memcpy(sa.sun_path, path, strlen(path));
	sa_len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);

	r = mkdir_parents(path, 0755);
	if (r < 0)
		return log_error_errno(r, "Failed to create the directory of %s: %m", path);
	r = remove_stale_socket(path, &sa, sa_len);
	if (r < 0)
		return r;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return log_error_errno(-errno, "Failed to create a Unix socket: %m");
	if (bind(fd, (const struct sockaddr *) &sa, sa_len) < 0)
		return log_error_errno(-errno, "Failed to bind %s: %m", path);
	s->created_path = strdup(path);
	if (!s->created_path) {
		(void) unlink(path);
		return -ENOMEM;
	}
	/* Before listen(): nobody can connect while the mode is still the umask's. */
	if (chmod(path, SOCKET_MODE) < 0)
		return log_error_errno(-errno, "Failed to set the mode of %s: %m", path);
	g = getgrnam(PERFRELAY_GROUP);
	if (g) {
		if (chown(path, (uid_t) -1, g->gr_gid) < 0)
			return log_error_errno(
				-errno, "Failed to give %s to group %s: %m", path, PERFRELAY_GROUP);
	} else
		log_debug("No group %s: %s is accessible to root only", PERFRELAY_GROUP, path);
	if (listen(fd, SOMAXCONN) < 0)
		return log_error_errno(-errno, "Failed to listen on %s: %m", path);
	s->listen_fd = TAKE_FD(fd);
	return 0;
}

static int server_take_activated_socket(Server *s, int *ret_found) {
	int n, r, flags;

	n = sd_listen_fds(true);
	if (n < 0)
		return log_error_errno(n, "Failed to read the sockets passed by systemd: %m");
	if (n == 0) {
		*ret_found = 0;
		return 0;
	}
	if (n > 1)
		return log_error_errno(
			-EINVAL, "systemd passed %d sockets; perfrelayd takes exactly one (ListenStream=)", n);
	r = sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0);
	if (r < 0)
		return log_error_errno(r, "Failed to check the socket passed by systemd: %m");
	if (r == 0)
		return log_error_errno(
			-EINVAL, "The socket passed by systemd is not a listening AF_UNIX stream socket");
	flags = fcntl(SD_LISTEN_FDS_START, F_GETFL);
	if (flags < 0 || fcntl(SD_LISTEN_FDS_START, F_SETFL, flags | O_NONBLOCK) < 0)
		return log_error_errno(-errno, "Failed to make the socket passed by systemd non-blocking: %m");
	s->listen_fd = SD_LISTEN_FDS_START;
	*ret_found = 1;
	return 0;
}

int server_new(
	sd_event *event, Hub *hub, const ApiOptions *options, ServerFlushFn flush, void *userdata, Server **ret) {
	_cleanup_(server_freep) Server *s = NULL;
	int r, activated = 0;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->event = event;
	s->hub = hub;
	s->o = *options;
	s->flush = flush;
	s->userdata = userdata;
	s->listen_fd = -EBADF;
	r = users_new(&s->users);
	if (r < 0)
		return r;

	r = server_take_activated_socket(s, &activated);
	if (r >= 0 && !activated)
		r = server_create_socket(s, options->socket_path);
	if (r < 0)
		return r;
	if (activated) {
		struct sockaddr_un sa = {};
		socklen_t len = sizeof(sa);

		if (getsockname(s->listen_fd, (struct sockaddr *) &sa, &len) >= 0 && sa.sun_path[0])
			s->path = strndup(sa.sun_path, sizeof(sa.sun_path));
		else
			s->path = strdup("(socket from systemd)");
	} else
		s->path = strdup(options->socket_path);
	if (!s->path)
		return -ENOMEM;

	r = sd_event_add_io(event, &s->accept_source, s->listen_fd, EPOLLIN, on_accept, s);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the listening socket: %m");
	log_info("Listening on %s%s", s->path, activated ? " (from systemd)" : "");
	*ret = TAKE_PTR(s);
	return 0;
}

Server *server_free(Server *s) {
	if (!s)
		return NULL;
	while (s->connections)
		connection_free(s->connections);
	sd_event_source_disable_unref(s->accept_source);
	sd_event_source_disable_unref(s->accept_pause);
	safe_close(s->listen_fd);
	if (s->created_path)
		(void) unlink(s->created_path);
	free(s->created_path);
	free(s->path);
	users_free(s->users);
	free(s);
	return NULL;
}

Users *server_users(const Server *s) {
	return s->users;
}

void server_set_options(Server *s, const ApiOptions *options) {
	s->o = *options;

	/* A group taken out of AllowGroups= takes its access along (connection_recheck_access()). */
	LIST_FOREACH(connections, c, s->connections)
		connection_recheck_access(c); /* may free c */
}


void server_shutdown(Server *s) {
	s->accept_source = sd_event_source_disable_unref(s->accept_source);
	s->accept_pause = sd_event_source_disable_unref(s->accept_pause);
	s->shutting_down = true;
	while (s->connections) {
		Connection *c = s->connections;

		connection_close_for_shutdown(c);
	}
}

void server_get_stats(const Server *s, ServerStats *ret) {
	*ret = s->stats;
	LIST_FOREACH(connections, c, s->connections)
		if (c->client || c->shared) {
			HubClientStats st;

			if (c->client)
				hub_client_get_stats(c->client, &st);
			else
				connection_shared_stats(c, &st);
			ret->live_offered += st.offered;
			ret->live_sent += st.sent;
			ret->live_dropped += st.dropped;
		}
}

int server_foreach_client(Server *s, int (*fn)(const ServerClientInfo *info, void *userdata), void *userdata) {
	/* The list is newest first: walk it backwards. */
	LIST_FOREACH_BACKWARDS(connections, c, LIST_FIND_TAIL(connections, s->connections)) {
		ServerClientInfo info;
		int r;

		if ((!c->client && !c->shared) || !c->sub)
			continue;
		info = (ServerClientInfo){
			.id = c->id,
			.uid = c->cred.uid,
			.pid = c->cred.pid,
			.sub = c->sub,
		};
		info.shared = c->shared;
		if (c->client)
			hub_client_get_stats(c->client, &info.stats);
		else
			connection_shared_stats(c, &info.stats);
		r = fn(&info, userdata);
		if (r < 0)
			return r;
	}
	return 0;
}

int server_disconnect_client(Server *s, uint64_t id) {
	LIST_FOREACH(connections, c, s->connections)
		if (c->id == id) {
			log_info(
				"Client %" PRIu64 " (pid %d, uid %u) disconnected on request",
				c->id,
				(int) c->cred.pid,
				(unsigned) c->cred.uid);
			connection_free(c);
			return 0;
		}
	return -ESRCH;
}

const char *server_socket_path(const Server *s) {
	return s->path;
}
