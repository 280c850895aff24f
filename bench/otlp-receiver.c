/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The benchmark's OTLP/HTTP logs receiver (row o): a collector's front end and no more, so that
 * the row measures the exporter, not the receiver. Listens on 127.0.0.1 (an ephemeral port,
 * printed as the first line of stdout), answers each POST of an ExportLogsServiceRequest with
 * 200 and an empty body after inflating it (Content-Encoding: gzip) and unpacking it with
 * protobuf-c's code generated from the OpenTelemetry project's .proto files (every message of
 * it: the records' bodies and attributes too), and counts its log records. HTTP/1.1 with keep-alive, one
 * connection at a time per poll round, no pipelining beyond what curl does. At SIGTERM it prints
 * {"requests":N,"records":N,"refused":N, "cpu_ns":N} on stdout: records / cpu_ns is its own capacity, which
 * the row shows beside the exporter's rate. Test tool only: it trusts its one client. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "logs_service.pb-c.h"

#define CONNS_MAX    16
#define HEAD_MAX     (16u * 1024u)
#define BODY_MAX     (64u * 1024u * 1024u)
#define INFLATED_MAX (256u * 1024u * 1024u)

typedef struct Conn {
	int fd;
	char *buf;
	size_t used, size;
	bool continued; /* "100 Continue" sent for the request being read */
} Conn;

static uint64_t requests, records, refused;
static uint8_t *inflated;

/* protobuf-c allocates every message it unpacks on its own: from a bump arena, emptied after each
 * request, those allocations cost what a collector's pooled decoder pays, not malloc's price. */
#define ARENA_SIZE (1024u * 1024u * 1024u)
static uint8_t *arena;
static size_t arena_used;

static void *arena_alloc(void *data, size_t size) {
	size = (size + 15) & ~(size_t) 15;
	if (ARENA_SIZE - arena_used < size)
		return NULL;
	arena_used += size;
	return arena + arena_used - size;
}

static void arena_free(void *data, void *p) {
}

static ProtobufCAllocator arena_allocator = { .alloc = arena_alloc, .free = arena_free };

static int64_t cpu_ns(void) {
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const uint8_t *gunzip(const uint8_t *in, size_t len, size_t *ret_len) {
	z_stream z = { .next_in = (uint8_t *) in, .avail_in = (uInt) len };
	int r;

	if (inflateInit2(&z, 15 + 16) != Z_OK)
		return NULL;
	z.next_out = inflated;
	z.avail_out = INFLATED_MAX;
	r = inflate(&z, Z_FINISH);
	inflateEnd(&z);
	if (r != Z_STREAM_END)
		return NULL;
	*ret_len = z.total_out;
	return inflated;
}

/* One request's body: unpacked and counted; false if it is not a request. */
static bool take(const uint8_t *body, size_t len, bool gz) {
	Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest *req;

	if (gz && !(body = gunzip(body, len, &len)))
		return false;
	arena_used = 0;
	req = opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
		&arena_allocator, len, body);
	if (!req)
		return false;
	for (size_t i = 0; i < req->n_resource_logs; i++)
		for (size_t j = 0; j < req->resource_logs[i]->n_scope_logs; j++)
			records += req->resource_logs[i]->scope_logs[j]->n_log_records;
	return true;
}

static const char *header(const char *head, const char *end, const char *name) {
	size_t n = strlen(name);

	for (const char *p = head; p && p < end; p = memchr(p, '\n', (size_t) (end - p)), p = p ? p + 1 : NULL)
		if ((size_t) (end - p) > n && strncasecmp(p, name, n) == 0 && p[n] == ':')
			return p + n + 1;
	return NULL;
}

static void answer(int fd, const char *text) {
	(void) !write(fd, text, strlen(text));
}

/* Whatever whole requests the connection's buffer holds; false to close it. */
static bool serve(Conn *c) {
	for (;;) {
		char *end = memmem(c->buf, c->used, "\r\n\r\n", 4);
		const char *cl, *ce, *ex;
		size_t head, body;

		if (!end)
			return c->used < HEAD_MAX;
		head = (size_t) (end - c->buf) + 4;
		cl = header(c->buf, end, "Content-Length");
		body = cl ? strtoull(cl, NULL, 10) : 0;
		if (body > BODY_MAX)
			return false;
		ex = header(c->buf, end, "Expect");
		if (c->used < head + body && ex && !c->continued) {
			answer(c->fd, "HTTP/1.1 100 Continue\r\n\r\n"); /* curl asks for large bodies */
			c->continued = true;
		}
		if (c->used < head + body) {
			if (head + body > c->size) {
				char *p = realloc(c->buf, head + body);

				if (!p)
					return false;
				c->buf = p;
				c->size = head + body;
			}
			return true;
		}
		ce = header(c->buf, end, "Content-Encoding");
		requests++;
		if (take((const uint8_t *) c->buf + head, body, ce && strstr(ce, "gzip") && ce < end))
			answer(c->fd,
			       "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n");
		else {
			refused++;
			answer(c->fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
		}
		memmove(c->buf, c->buf + head + body, c->used - head - body);
		c->used -= head + body;
		c->continued = false;
	}
}

int main(void) {
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	struct pollfd p[CONNS_MAX + 2];
	Conn conns[CONNS_MAX] = {};
	sigset_t mask;
	int lfd, sfd;

	inflated = malloc(INFLATED_MAX);
	arena = malloc(ARENA_SIZE);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!inflated || !arena || lfd < 0 || bind(lfd, (struct sockaddr *) &a, sizeof(a)) < 0 ||
	    listen(lfd, 64) < 0 || getsockname(lfd, (struct sockaddr *) &a, &alen) < 0) {
		perror("otlp-receiver");
		return 1;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	printf("%u\n", ntohs(a.sin_port));
	fflush(stdout);
	for (unsigned i = 0; i < CONNS_MAX; i++)
		conns[i].fd = -1;
	for (;;) {
		unsigned n = 2;

		p[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (unsigned i = 0; i < CONNS_MAX; i++)
			p[n++] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
		if (poll(p, n, -1) < 0 && errno != EINTR)
			return 1;
		if (p[0].revents)
			break;
		if (p[1].revents) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			for (unsigned i = 0; fd >= 0 && i < CONNS_MAX; i++)
				if (conns[i].fd < 0) {
					conns[i] = (Conn){ .fd = fd, .buf = malloc(HEAD_MAX), .size = HEAD_MAX };
					fd = -1;
				}
			if (fd >= 0)
				close(fd);
		}
		for (unsigned i = 0; i < CONNS_MAX; i++) {
			Conn *c = &conns[i];
			ssize_t k;

			if (c->fd < 0 || !p[2 + i].revents)
				continue;
			k = read(c->fd, c->buf + c->used, c->size - c->used);
			if (k <= 0 || !(c->used += (size_t) k, serve(c))) {
				close(c->fd);
				free(c->buf);
				*c = (Conn){ .fd = -1 };
			}
		}
	}
	printf("{\"requests\":%" PRIu64 ",\"records\":%" PRIu64 ",\"refused\":%" PRIu64
	       ",\"cpu_ns\":%" PRId64 "}\n",
	       requests,
	       records,
	       refused,
	       cpu_ns());
	return 0;
}
