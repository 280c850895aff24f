/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The shared fan-out path end to end in one process (docs/shared-ring.md): the daemon's writer
 * (shared-ring-writer.c) on one thread per ring, and libperfrelay's own reader (shared-reader.c,
 * through perfrelay_connect() and perfrelay_next_json()) on one thread per client, joined by a
 * fake daemon on a Unix socket that answers each client's request with a hello carrying the ring
 * set and the client's member page (SCM_RIGHTS), as connection-shared.c does. test-shared-ring-
 * writer reads with a copy of the library's protocol; this reads with the library itself, so
 * its orderings run as they ship: here, under ThreadSanitizer (build-tsan), and as arm64 code
 * under qemu-user (tests/arm64).
 *
 * Every line a client reads is checked byte for byte against what the writer wrote for that
 * (ring, number), and the numbers of a ring come in order. One client reads slowly and is lapped.
 * At the end (the writer's goodbye, after a final detach, so what a client had not read yet is
 * still its to read) each client's events plus its lost notices are every event written, and
 * its events are the writer's `sent` for it and its notices the writer's `dropped`, exactly. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hub/shared-ring-writer.h"
#include "lib/perfrelay.h"
#include "macro.h"

#include "unit-test.h"

#define N_RINGS   2u
#define N_CLIENTS 3u     /* the last one reads slowly */
#define EVENTS    40000u /* per ring */
#define BATCH     32u
#define PAD_MAX   200u

static SharedRing *ring;
static pthread_mutex_t ring_lock[N_RINGS];
static atomic_uint_least64_t written[N_RINGS]; /* events each writer has published */
static char socket_path[108];
static int listen_fd = -1;

typedef struct Client {
	unsigned index;
	int server_fd; /* the daemon's end */
	SharedMember *member;
	uint64_t events, lost, bad, out_of_order;
	uint64_t next[N_RINGS];
	int end; /* what perfrelay_next_json() returned last: -ESHUTDOWN after the goodbye */
	pthread_t thread;
} Client;

static Client clients[N_CLIENTS];

static void lock_all(void) {
	for (unsigned i = 0; i < N_RINGS; i++)
		pthread_mutex_lock(&ring_lock[i]);
}

static void unlock_all(void) {
	for (unsigned i = N_RINGS; i > 0; i--)
		pthread_mutex_unlock(&ring_lock[i - 1]);
}

/* Event n of ring r, as a JSON line; its padding's length and letters follow from (r, n), so a
 * torn copy shows. Returns the length, '\n' included. */
static size_t event_line(unsigned r, uint64_t n, char *buf, size_t size) {
	unsigned pad = (unsigned) ((n * 7u + r * 13u) % PAD_MAX);
	size_t k = (size_t) snprintf(
		buf, size, "{\"type\":\"ev\",\"ring\":%u,\"n\":%" PRIu64 ",\"pad\":\"", r, n);

	for (unsigned i = 0; i < pad; i++)
		buf[k++] = (char) ('a' + (n + i) % 26);
	k += (size_t) snprintf(buf + k, size - k, "\"}\n");
	return k;
}

static void *writer(void *userdata) {
	unsigned r = (unsigned) (uintptr_t) userdata;
	uint8_t *data = shared_ring_data(ring, r);
	uint64_t mask = shared_ring_size(ring, r) - 1, head = 0;
	char line[512];

	for (uint64_t n = 0; n < EVENTS;) {
		pthread_mutex_lock(&ring_lock[r]);
		for (unsigned b = 0; b < BATCH && n < EVENTS; b++, n++) {
			size_t len = event_line(r, n, line, sizeof(line));

			ASSERT(shared_ring_reserve(ring, r, &head, n, len));
			for (size_t i = 0; i < len; i++)
				data[(head + i) & mask] = (uint8_t) line[i];
			head = ALIGN_TO(head + len, (uint64_t) PERFRELAY_SHARED_ALIGN);
		}
		(void) shared_ring_publish(ring, r, head, n);
		pthread_mutex_unlock(&ring_lock[r]);
		atomic_store(&written[r], n);
		if (n % 2048 == 0)
			sched_yield();
	}
	return NULL;
}

/* The line as the writer wrote it, or a complaint. */
static void check_line(Client *c, const char *line, size_t len) {
	char want[512];
	unsigned r;
	uint64_t n, count;

	if (sscanf(line, "{\"type\":\"lost\",\"count\":%" SCNu64 "}", &count) == 1) {
		c->lost += count;
		return;
	}
	if (sscanf(line, "{\"type\":\"ev\",\"ring\":%u,\"n\":%" SCNu64 ",", &r, &n) != 2 || r >= N_RINGS) {
		c->bad++;
		return;
	}
	/* The library hands the line without its '\n'. */
	if (event_line(r, n, want, sizeof(want)) != len + 1 || memcmp(want, line, len) != 0)
		c->bad++;
	if (n < c->next[r])
		c->out_of_order++;
	c->next[r] = n + 1;
	c->events++;
}

static void *client_main(void *userdata) {
	Client *c = userdata;
	struct perfrelay_subscription sub = {};
	perfrelay_client *pc = NULL;
	struct timespec slow = { .tv_nsec = 200 * 1000 };

	ASSERT(perfrelay_client_new(&pc) == 0);
	ASSERT(perfrelay_connect(pc, socket_path, &sub) == 0);
	for (uint64_t i = 0;; i++) {
		const char *line;
		size_t len;
		int r = perfrelay_next_json(pc, &line, &len, 30000);

		if (r <= 0) {
			c->end = r;
			break;
		}
		check_line(c, line, len);
		/* The slow client: after its first events it stops until every ring was written
		 * over several times (a ring holds a few thousand of these events), so it is
		 * lapped whatever the machine's speed; then it reads on, pausing now and then. */
		if (c->index == N_CLIENTS - 1 && i == 100)
			while (atomic_load(&written[0]) < EVENTS / 2 || atomic_load(&written[1]) < EVENTS / 2)
				nanosleep(&slow, NULL);
		if (c->index == N_CLIENTS - 1 && i % 256 == 0)
			nanosleep(&slow, NULL);
	}
	perfrelay_close(pc);
	return NULL;
}

static int send_hello(int fd, unsigned index, int ring_fd, int page_fd) {
	union {
		struct cmsghdr h;
		uint8_t raw[CMSG_SPACE(sizeof(int) * 2)];
	} control = {};
	char hello[256];
	int n = snprintf(
		hello,
		sizeof(hello),
		"{\"type\":\"hello\",\"protocol\":1,\"schema\":1,\"client_id\":%u,\"version\":\"test-fanout\","
		"\"format\":\"json\",\"shared\":{\"rings\":%u,\"bytes\":%" PRIu64 "}}\n",
		index + 1,
		N_RINGS,
		shared_ring_bytes(ring));
	struct iovec iov = { .iov_base = hello, .iov_len = (size_t) n };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control, .msg_controllen = sizeof(control)
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fds[2] = { ring_fd, page_fd };

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == n ? 0 : -1;
}

/* The daemon's side of a connection: the request line, a member attached at every ring's head,
 * the hello with the two descriptors. */
static void accept_client(Client *c) {
	char request[4096];
	size_t got = 0;
	int ring_fd;

	c->server_fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	ASSERT(c->server_fd >= 0);
	while (got < sizeof(request) - 1 && (got == 0 || request[got - 1] != '\n')) {
		ssize_t k = read(c->server_fd, request + got, sizeof(request) - 1 - got);

		ASSERT(k > 0);
		if (k <= 0)
			return;
		got += (size_t) k;
	}
	request[got] = '\0';
	/* libperfrelay asks for the shared path unless told not to */
	ASSERT(strstr(request, "\"shared\":true") != NULL);
	ASSERT(shared_member_new(ring, c->server_fd, &c->member) == 0);
	lock_all();
	ASSERT(shared_ring_attach_locked(ring, c->member) == 0);
	unlock_all();
	ring_fd = shared_ring_open_readonly(ring);
	ASSERT(ring_fd >= 0);
	ASSERT(send_hello(c->server_fd, c->index, ring_fd, shared_member_fd(c->member)) == 0);
	close(ring_fd);
	/* The writer's wakeups (one '\n') never wait. */
	ASSERT(fcntl(c->server_fd, F_SETFL, fcntl(c->server_fd, F_GETFL) | O_NONBLOCK) == 0);
}

int main(void) {
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	pthread_t writers[N_RINGS];
	const uint64_t total = (uint64_t) N_RINGS * EVENTS;

	snprintf(socket_path, sizeof(socket_path), "/tmp/test-fanout-%d.sock", (int) getpid());
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
	unlink(socket_path);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(listen_fd >= 0);
	ASSERT(bind(listen_fd, (struct sockaddr *) &sa, sizeof(sa)) == 0);
	ASSERT(listen(listen_fd, N_CLIENTS) == 0);

	for (unsigned i = 0; i < N_RINGS; i++)
		pthread_mutex_init(&ring_lock[i], NULL);
	/* The smallest rings (512 KiB), so that the slow client is lapped many times. */
	ASSERT(shared_ring_new(N_RINGS, 0, (uint64_t) N_RINGS * SHARED_RING_MIN, &ring) == 0);
	ASSERT(shared_ring_size(ring, 0) == SHARED_RING_MIN);

	for (unsigned i = 0; i < N_CLIENTS; i++) {
		clients[i].index = i;
		ASSERT(pthread_create(&clients[i].thread, NULL, client_main, &clients[i]) == 0);
		accept_client(&clients[i]);
	}
	for (unsigned i = 0; i < N_RINGS; i++)
		ASSERT(pthread_create(&writers[i], NULL, writer, (void *) (uintptr_t) i) == 0);
	for (unsigned i = 0; i < N_RINGS; i++)
		pthread_join(writers[i], NULL);

	/* Shut down as the daemon does: every member detached for good (what it has not read stays
	 * its to read, and counts as sent), then the goodbye line. */
	lock_all();
	for (unsigned i = 0; i < N_CLIENTS; i++)
		shared_ring_detach_locked(ring, clients[i].member, true);
	unlock_all();
	for (unsigned i = 0; i < N_CLIENTS; i++) {
		static const char bye[] = "{\"type\":\"goodbye\",\"reason\":\"test-fanout done\"}\n";

		ASSERT(write(clients[i].server_fd, bye, sizeof(bye) - 1) == (ssize_t) sizeof(bye) - 1);
	}

	for (unsigned i = 0; i < N_CLIENTS; i++) {
		Client *c = &clients[i];
		SharedMemberStats st;

		pthread_join(c->thread, NULL);
		shared_member_get_stats(c->member, &st);
		printf("client %u: %" PRIu64 " events, %" PRIu64 " lost; writer: offered %" PRIu64
		       " sent %" PRIu64 " dropped %" PRIu64 "\n",
		       i,
		       c->events,
		       c->lost,
		       st.offered,
		       st.sent,
		       st.dropped);
		ASSERT(c->end == -ESHUTDOWN);
		ASSERT(c->bad == 0);
		ASSERT(c->out_of_order == 0);
		ASSERT(c->events + c->lost == total);
		ASSERT(st.offered == total);
		ASSERT(st.sent == c->events);
		ASSERT(st.dropped == c->lost);
		shared_member_free(c->member);
		close(c->server_fd);
	}
	/* The slow client was lapped: the loss path ran. */
	ASSERT(clients[N_CLIENTS - 1].lost > 0);

	shared_ring_free(ring);
	close(listen_fd);
	unlink(socket_path);
	return failures ? 1 : 0;
}
