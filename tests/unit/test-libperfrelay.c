/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of libperfrelay against a scripted fake daemon on a temporary Unix socket: the
 * request it sends, hello and error lines, JSON lines split across reads or too long, binary
 * frames (valid, truncated, malformed), timeouts. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "lib/perfrelay.h"

#include "unit-test.h"
#define ASSERT_EQ_INT(a, b)                                             \
	do {                                                            \
		long long _a = (a), _b = (b);                           \
		if (_a != _b) {                                         \
			fprintf(stderr,                                 \
				"%s:%d: %s == %lld, want %s == %lld\n", \
				__FILE__,                               \
				__LINE__,                               \
				#a,                                     \
				_a,                                     \
				#b,                                     \
				_b);                                    \
			failures++;                                     \
		}                                                       \
	} while (0)

static bool streq_safe(const char *a, const char *b) {
	return a && b && strcmp(a, b) == 0;
}

/* A hello line with these fields after "type". */
#define HELLO(fields)             "{\"type\":\"hello\"," fields "}\n"
#define V1                        "\"protocol\":1,\"schema\":1,\"version\":\"0.1.0\","
#define HELLO_JSON                HELLO(V1 "\"client_id\":7,\"format\":\"json\"")
#define HELLO_BINARY              HELLO(V1 "\"client_id\":8,\"format\":\"binary\"")
#define ERROR_LINE(code, message) "{\"type\":\"error\",\"error\":\"" code "\",\"message\":\"" message "\"}\n"

/* ---- the fake daemon ---- */

typedef struct Server Server;
typedef void (*Script)(Server *s, int fd);

struct Server {
	char dir[64];
	char path[128];
	int listen_fd;
	int go[2]; /* the test writes a byte to let a script go on */
	pthread_t thread;
	Script script;
	const void *arg;
	char request[4096];
	size_t request_len;
};

static void send_all(int fd, const void *p, size_t n) {
	const char *c = p;

	while (n > 0) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);

		if (k <= 0)
			return; /* the client went away: fine for the tests that close early */
		c += k;
		n -= (size_t) k;
	}
}

static void send_str(int fd, const char *s) {
	send_all(fd, s, strlen(s));
}

static void server_wait_go(Server *s) {
	char b;

	(void) !read(s->go[0], &b, 1);
}

static void test_go(Server *s) {
	(void) !write(s->go[1], "g", 1);
}

static void *server_thread(void *p) {
	Server *s = p;
	int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return NULL;
	/* The request line, byte by byte so nothing after it is consumed. */
	while (s->request_len < sizeof(s->request) - 1) {
		char b;

		if (read(fd, &b, 1) != 1)
			break;
		s->request[s->request_len++] = b;
		if (b == '\n')
			break;
	}
	s->request[s->request_len] = '\0';
	s->script(s, fd);
	close(fd);
	return NULL;
}

static void server_start(Server *s, Script script, const void *arg) {
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(s, 0, sizeof(*s));
	strcpy(s->dir, "/tmp/test-libperfrelay-XXXXXX");
	if (!mkdtemp(s->dir)) {
		perror("mkdtemp");
		exit(EXIT_FAILURE);
	}
	snprintf(s->path, sizeof(s->path), "%s/events.sock", s->dir);
	strcpy(sa.sun_path, s->path);
	s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 ||
	    listen(s->listen_fd, 4) < 0 || pipe2(s->go, O_CLOEXEC) < 0) {
		perror("fake server");
		exit(EXIT_FAILURE);
	}
	s->script = script;
	s->arg = arg;
	pthread_create(&s->thread, NULL, server_thread, s);
}

static void server_stop(Server *s) {
	pthread_join(s->thread, NULL);
	close(s->listen_fd);
	close(s->go[0]);
	close(s->go[1]);
	unlink(s->path);
	rmdir(s->dir);
}

/* Sends the string in s->arg and closes. */
static void script_send_arg(Server *s, int fd) {
	send_str(fd, s->arg);
}

static perfrelay_client *connect_to(Server *s, const struct perfrelay_subscription *sub, int want) {
	perfrelay_client *c = NULL;

	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_connect(c, s->path, sub), want);
	return c;
}

static json_object *get_path(json_object *o, const char *a, const char *b) {
	json_object *v = NULL;

	if (!json_object_object_get_ex(o, a, &v))
		return NULL;
	if (b && !json_object_object_get_ex(v, b, &v))
		return NULL;
	return v;
}

/* ---- tests ---- */

/* perfrelay_client_set_containers(): the request's "container", checked, copied, cleared. */
static void test_containers(void) {
	static const char *const names[] = { "web", "3f9c0e1b2a4d" };
	struct perfrelay_subscription sub = {};
	char *copy = strdup("db");
	const char *one[] = { copy };
	json_object *req, *v;
	perfrelay_client *c = NULL;
	Server s;

	ASSERT_EQ_INT(perfrelay_client_set_containers(NULL, names, 2), -EINVAL);
	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_client_set_containers(c, NULL, 1), -EINVAL);
	ASSERT_EQ_INT(perfrelay_client_set_containers(c, names, PERFRELAY_CONTAINERS_MAX + 1), -EINVAL);
	ASSERT_EQ_INT(perfrelay_client_set_containers(c, one, 1), 0);
	free(copy); /* copied */
	ASSERT_EQ_INT(perfrelay_client_set_containers(c, names, 2), 0);
	server_start(&s, script_send_arg, HELLO_JSON);
	ASSERT_EQ_INT(perfrelay_connect(c, s.path, &sub), 0);
	req = json_tokener_parse(s.request);
	v = get_path(req, "subscribe", "container");
	ASSERT(v && json_object_array_length(v) == 2);
	ASSERT(v && streq_safe(json_object_get_string(json_object_array_get_idx(v, 0)), "web"));
	ASSERT(v && streq_safe(json_object_get_string(json_object_array_get_idx(v, 1)), "3f9c0e1b2a4d"));
	json_object_put(req);
	/* Connected: too late to change them. */
	ASSERT_EQ_INT(perfrelay_client_set_containers(c, NULL, 0), -EINVAL);
	perfrelay_close(c);
	server_stop(&s);
}

static void test_request_and_hello(void) {
	static const char *const types[] = { "exec", "32768" };
	static const uint32_t pids[] = { 1, 4294967295u };
	static const uint32_t uids[] = { 0 };
	static const char *const comms[] = { "a\"b\\c\n" };
	static const char *const units[] = { "sshd.service" };
	static const char *const anc_comms[] = { "sshd" }, *const anc_ids[] = { "0123456789abcdef" },
				 *const anc_units[] = { "cron.service" };
	struct perfrelay_subscription sub = {
		.types = types,
		.n_types = 2,
		.pids = pids,
		.n_pids = 2,
		.uids = uids,
		.n_uids = 1,
		.comms = comms,
		.n_comms = 1,
		.units = units,
		.n_units = 1,
		.ancestor_comms = anc_comms,
		.n_ancestor_comms = 1,
		.ancestor_exec_ids = anc_ids,
		.n_ancestor_exec_ids = 1,
		.ancestor_units = anc_units,
		.n_ancestor_units = 1,
		.on_overflow = PERFRELAY_OVERFLOW_DISCONNECT,
	};
	const struct perfrelay_hello *h;
	const char *line;
	size_t len;
	json_object *req, *v;
	perfrelay_client *c;
	Server s;

	server_start(
		&s,
		script_send_arg,
		HELLO_JSON "{\"type\":\"exec\",\"pid\":1}\n{\"type\":\"lost\",\"count\":3}\n");
	c = connect_to(&s, &sub, 0);

	/* The request is one JSON line that json-c reads back as what was asked. */
	ASSERT(s.request_len > 0 && s.request[s.request_len - 1] == '\n');
	ASSERT(memchr(s.request, '\n', s.request_len) == s.request + s.request_len - 1);
	req = json_tokener_parse(s.request);
	ASSERT(req);
	v = get_path(req, "subscribe", "types");
	ASSERT(v && json_object_array_length(v) == 2);
	ASSERT(v && streq_safe(json_object_get_string(json_object_array_get_idx(v, 0)), "exec"));
	ASSERT(v && json_object_is_type(json_object_array_get_idx(v, 1), json_type_int));
	ASSERT(v && json_object_get_int64(json_object_array_get_idx(v, 1)) == 32768);
	v = get_path(req, "subscribe", "pid");
	ASSERT(v && json_object_array_length(v) == 2);
	ASSERT(v && json_object_get_int64(json_object_array_get_idx(v, 1)) == 4294967295ll);
	v = get_path(req, "subscribe", "uid");
	ASSERT(v && json_object_array_length(v) == 1);
	ASSERT(v && json_object_get_int64(json_object_array_get_idx(v, 0)) == 0);
	v = get_path(req, "subscribe", "comm");
	ASSERT(v && streq_safe(json_object_get_string(json_object_array_get_idx(v, 0)), "a\"b\\c\n"));
	v = get_path(req, "subscribe", "unit");
	ASSERT(v && streq_safe(json_object_get_string(json_object_array_get_idx(v, 0)), "sshd.service"));
	v = get_path(req, "subscribe", "ancestor");
	ASSERT(v && json_object_object_length(v) == 3);
	ASSERT(v &&
	       streq_safe(
		       json_object_get_string(json_object_array_get_idx(get_path(v, "comm", NULL), 0)),
		       "sshd"));
	ASSERT(v &&
	       streq_safe(
		       json_object_get_string(json_object_array_get_idx(get_path(v, "exec_id", NULL), 0)),
		       "0123456789abcdef"));
	ASSERT(v &&
	       streq_safe(
		       json_object_get_string(json_object_array_get_idx(get_path(v, "unit", NULL), 0)),
		       "cron.service"));
	ASSERT(streq_safe(json_object_get_string(get_path(req, "format", NULL)), "json"));
	ASSERT(streq_safe(json_object_get_string(get_path(req, "on_overflow", NULL)), "disconnect"));
	/* A client that wants to be disconnected when it falls behind does not ask to share. */
	ASSERT(!get_path(req, "shared", NULL));
	json_object_put(req);

	h = perfrelay_client_hello(c);
	ASSERT(h);
	if (h) {
		ASSERT_EQ_INT(h->protocol, 1);
		ASSERT_EQ_INT(h->schema, 1);
		ASSERT_EQ_INT(h->client_id, 7);
		ASSERT(streq_safe(h->version, "0.1.0"));
		ASSERT_EQ_INT(h->format, PERFRELAY_FORMAT_JSON);
	}
	ASSERT(perfrelay_fd(c) >= 0);
	ASSERT(streq_safe(perfrelay_client_socket_path(c), s.path));
	ASSERT_EQ_INT(perfrelay_connect(c, s.path, &sub), -EISCONN);

	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT_EQ_INT(len, strlen("{\"type\":\"exec\",\"pid\":1}"));
	ASSERT(streq_safe(line, "{\"type\":\"exec\",\"pid\":1}"));
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT(streq_safe(line, "{\"type\":\"lost\",\"count\":3}"));
	/* The daemon closed: final, and the same answer every time. */
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -ECONNRESET);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 0), -ECONNRESET);
	ASSERT(perfrelay_client_error(c) == NULL);
	{
		const struct perfrelay_hdr *hdr;
		const void *payload;
		size_t size;

		ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 0), -EINVAL);
	}
	perfrelay_close(c);
	server_stop(&s);
}

static void test_default_request_and_env(void) {
	perfrelay_client *c = NULL;
	Server s;

	server_start(&s, script_send_arg, HELLO_JSON);
	setenv("PERFRELAY_SOCKET", s.path, 1);
	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_connect(c, NULL, NULL), 0);
	unsetenv("PERFRELAY_SOCKET");
	ASSERT(streq_safe(
		s.request,
		"{\"subscribe\":{},\"format\":\"json\",\"on_overflow\":\"drop\",\"shared\":true,\"notices\":true}\n"));
	ASSERT(streq_safe(perfrelay_client_socket_path(c), s.path));
	perfrelay_close(c);
	server_stop(&s);
}

/* Answers to the request other than a plain hello (and one hello with more fields than known). */
static void test_error_lines(void) {
	static const struct {
		const char *line;
		int error;
		const char *message;
	} cases[] = {
		{ ERROR_LINE("bad-request", "subscribe.pid: expected an array of integers"),
		  -EINVAL,
		  "subscribe.pid: expected an array of integers" },
		{ ERROR_LINE("too-large", "request over 65536 bytes"), -E2BIG, "request over 65536 bytes" },
		{ ERROR_LINE("too-deep", "nested too deep"), -EINVAL, "nested too deep" },
		{ ERROR_LINE("timeout", "no request"), -ETIMEDOUT, "no request" },
		{ ERROR_LINE("too-many-clients", "MaxClients=2 reached"), -EUSERS, "MaxClients=2 reached" },
		{ ERROR_LINE("fd-passed", "fds closed"), -EPROTO, "fds closed" },
		{ "{\"type\":\"error\",\"error\":\"from-the-future\"}\n", -EPROTO, "from-the-future" },
		/* Control bytes in a message are not passed on to a terminal. */
		{ ERROR_LINE("bad-request", "a\\u001b[2Jb"), -EINVAL, "a?[2Jb" },
		/* Not a hello. */
		{ "not json\n", -EBADMSG, NULL },
		{ "{\"type\":\"hello\",\"protocol\":1}trailing\n", -EBADMSG, NULL },
		{ "[1,2]\n", -EBADMSG, NULL },
		{ "{\"type\":\"event\"}\n", -EPROTO, NULL },
		{ HELLO("\"protocol\":2,\"schema\":1,\"version\":\"9\",\"client_id\":1,\"format\":\"json\""),
		  -EPROTONOSUPPORT,
		  NULL },
		{ HELLO(V1 "\"format\":\"json\""), -EPROTO, NULL },
		{ HELLO(V1 "\"client_id\":-1,\"format\":\"json\""), -EPROTO, NULL },
		/* Fields the library does not know are fine. */
		{ HELLO(V1 "\"client_id\":1,\"format\":\"json\",\"access\":\"all\""), 0, NULL },
		{ HELLO_BINARY, -EPROTO, NULL }, /* a hello for the other format */
		{ "", -ECONNRESET, NULL },
		{ "{\"type\":\"hello\"", -EBADMSG, NULL }, /* EOF inside the line */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *line;
		size_t len;
		perfrelay_client *c;
		Server s;

		server_start(&s, script_send_arg, cases[i].line);
		c = connect_to(&s, NULL, cases[i].error);
		if (cases[i].error == 0) {
			ASSERT(perfrelay_client_hello(c) && perfrelay_fd(c) >= 0);
			ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -ECONNRESET);
			perfrelay_close(c);
			server_stop(&s);
			continue;
		}
		if (cases[i].message)
			ASSERT(streq_safe(perfrelay_client_error(c), cases[i].message));
		else
			ASSERT(perfrelay_client_error(c) == NULL);
		ASSERT_EQ_INT(perfrelay_fd(c), -ENOTCONN);
		ASSERT(perfrelay_client_hello(c) == NULL);
		ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 0), -ENOTCONN);
		ASSERT_EQ_INT(perfrelay_connect(c, s.path, NULL), -EISCONN);
		perfrelay_close(c);
		server_stop(&s);
	}
}

/* Hello plus half a line; the rest only when the test says so, in pieces. */
static void script_split(Server *s, int fd) {
	send_str(fd, HELLO_JSON "{\"type\":\"exec\",\"pi");
	server_wait_go(s);
	send_str(fd, "d\":1}\n{\"type\":\"ex");
	server_wait_go(s);
	send_str(fd, "it\"}\n");
	/* Many lines cut at every possible place. */
	for (int i = 0; i < 300; i++) {
		char line[64];
		int n = snprintf(line, sizeof(line), "{\"type\":\"fork\",\"child_pid\":%d}\n", i);
		int cut = i % n;

		send_all(fd, line, (size_t) cut);
		if (i % 7 == 0)
			usleep(100);
		send_all(fd, line + cut, (size_t) (n - cut));
	}
	server_wait_go(s);
}

static long long elapsed_ms(const struct timespec *since) {
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - since->tv_sec) * 1000ll + (now.tv_nsec - since->tv_nsec) / 1000000;
}

static void test_split_lines(void) {
	struct timespec t0;
	const char *line;
	size_t len;
	perfrelay_client *c;
	Server s;

	server_start(&s, script_split, NULL);
	c = connect_to(&s, NULL, 0);

	/* Half a line is buffered, not returned; waiting times out. */
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 0), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 100), 0);
	ASSERT(elapsed_ms(&t0) >= 99);
	ASSERT(elapsed_ms(&t0) < 3000);

	test_go(&s);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT(streq_safe(line, "{\"type\":\"exec\",\"pid\":1}"));
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 50), 0);
	test_go(&s);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT(streq_safe(line, "{\"type\":\"exit\"}"));

	for (int i = 0; i < 300; i++) {
		char want[64];

		snprintf(want, sizeof(want), "{\"type\":\"fork\",\"child_pid\":%d}", i);
		ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
		ASSERT(streq_safe(line, want));
		ASSERT_EQ_INT(len, strlen(want));
	}
	/* Nothing more, and poll() on the fd agrees. */
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 0), 0);
	ASSERT_EQ_INT(poll(&(struct pollfd){ .fd = perfrelay_fd(c), .events = POLLIN }, 1, 0), 0);
	test_go(&s);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -ECONNRESET);
	perfrelay_close(c);
	server_stop(&s);
}

/* s->arg: the length of a line to send after one of the longest allowed length. */
static void script_long_lines(Server *s, int fd) {
	size_t second = *(const size_t *) s->arg;
	char *line = malloc(PERFRELAY_LINE_MAX + 64);

	send_str(fd, HELLO_JSON);
	/* The longest line allowed: PERFRELAY_LINE_MAX bytes with its '\n'. */
	memset(line, 'x', PERFRELAY_LINE_MAX - 1);
	line[PERFRELAY_LINE_MAX - 1] = '\n';
	send_all(fd, line, PERFRELAY_LINE_MAX);
	memset(line, 'y', second);
	line[second] = '\n';
	send_all(fd, line, second + 1);
	free(line);
}

static void test_long_lines(void) {
	/* A line one byte too long with its '\n', and one with no '\n' in sight. */
	static const size_t second[] = { PERFRELAY_LINE_MAX, PERFRELAY_LINE_MAX + 60 };

	for (size_t i = 0; i < 2; i++) {
		const char *line;
		size_t len;
		perfrelay_client *c;
		Server s;

		server_start(&s, script_long_lines, &second[i]);
		c = connect_to(&s, NULL, 0);
		ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
		ASSERT_EQ_INT(len, PERFRELAY_LINE_MAX - 1);
		ASSERT(line[0] == 'x' && line[len - 1] == 'x' && line[len] == '\0');
		ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -EMSGSIZE);
		ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -EMSGSIZE);
		perfrelay_close(c);
		server_stop(&s);
	}
}

static void test_goodbye_and_overflow(void) {
	const char *line;
	size_t len;
	perfrelay_client *c;
	Server s;

	server_start(
		&s,
		script_send_arg,
		HELLO_JSON "{\"type\":\"exec\"}\n{\"type\":\"goodbye\",\"reason\":\"shutdown\"}\n");
	c = connect_to(&s, NULL, 0);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -ESHUTDOWN);
	ASSERT(streq_safe(perfrelay_client_error(c), "shutdown"));
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -ESHUTDOWN);
	perfrelay_close(c);
	server_stop(&s);

	/* Spaces where the daemon's writer puts none still make it an error line. */
	server_start(
		&s,
		script_send_arg,
		HELLO_JSON
		"{ \"type\" : \"error\", \"error\": \"overflow\", "
		"\"message\": \"queue full\"}\n");
	c = connect_to(&s, NULL, 0);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -ENOBUFS);
	ASSERT(streq_safe(perfrelay_client_error(c), "queue full"));
	perfrelay_close(c);
	server_stop(&s);

	/* "type" need not come first: an error line is an error line, an event an event. */
	server_start(
		&s,
		script_send_arg,
		HELLO_JSON
		"{\"pid\":1,\"type\":\"exec\"}\n"
		"{\"error\":\"too-many-clients\",\"type\":\"error\"}\n");
	c = connect_to(&s, NULL, 0);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT(streq_safe(line, "{\"pid\":1,\"type\":\"exec\"}"));
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -EUSERS);
	ASSERT(streq_safe(perfrelay_client_error(c), "too-many-clients"));
	perfrelay_close(c);
	server_stop(&s);

	/* A line that is not JSON is handed on (the caller's parser judges it), the stream goes on;
	 * an error line too broken to read is the end. */
	server_start(
		&s,
		script_send_arg,
		HELLO_JSON "garbage\n{\"type\":\"exec\"}\n{\"type\":\"error\",\"error\":\n");
	c = connect_to(&s, NULL, 0);
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT(streq_safe(line, "garbage"));
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), 1);
	ASSERT(streq_safe(line, "{\"type\":\"exec\"}"));
	ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 5000), -EBADMSG);
	ASSERT(perfrelay_client_error(c) == NULL);
	perfrelay_close(c);
	server_stop(&s);
}

/* ---- binary ---- */

static size_t put_frame(uint8_t *p, uint32_t length, const void *rec, size_t rec_size) {
	p[0] = (uint8_t) length;
	p[1] = (uint8_t) (length >> 8);
	p[2] = (uint8_t) (length >> 16);
	p[3] = (uint8_t) (length >> 24);
	memcpy(p + 4, rec, rec_size);
	return 4 + rec_size;
}

static struct perfrelay_hdr make_hdr(uint16_t type, uint16_t size, uint64_t seq) {
	return (struct perfrelay_hdr){
		.magic = PERFRELAY_MAGIC,
		.version = PERFRELAY_VERSION,
		.type = type,
		.size = size,
		.producer = PERFRELAY_PRODUCER_EXEC,
		.cpu = 3,
		.seq = seq,
		.ts_ns = 123456789,
	};
}

/* An exec record, a lost record, an unknown type's record of odd size, each frame in two sends. */
static void script_binary(Server *s, int fd) {
	static uint8_t buf[4096];
	struct perfrelay_exec ex = {
		.hdr = make_hdr(PERFRELAY_TYPE_EXEC, sizeof(ex), 1),
		.pid = 42,
		.uid = 1000,
	};
	struct {
		struct perfrelay_hdr hdr;
		uint64_t count;
	} lost = { .hdr = make_hdr(PERFRELAY_TYPE_LOST, sizeof(lost), 0), .count = 5 };
	uint8_t odd[32 + 5];
	struct perfrelay_hdr h = make_hdr(0x8001, sizeof(odd), 9);
	size_t n = 0;

	memcpy(odd, &h, sizeof(h));
	memcpy(odd + 32, "abcde", 5);
	strcpy(ex.comm, "marker");
	send_str(fd, HELLO_BINARY);
	n += put_frame(buf + n, sizeof(ex), &ex, sizeof(ex));
	n += put_frame(buf + n, sizeof(lost), &lost, sizeof(lost));
	n += put_frame(buf + n, sizeof(odd), odd, sizeof(odd));
	n += put_frame(buf + n, sizeof(ex), &ex, sizeof(ex)); /* now at an odd offset */
	send_all(fd, buf, 2);
	usleep(1000);
	send_all(fd, buf + 2, 100);
	usleep(1000);
	send_all(fd, buf + 102, n - 102);
}

static void test_binary(void) {
	struct perfrelay_subscription sub = { .format = PERFRELAY_FORMAT_BINARY };
	const struct perfrelay_hdr *hdr;
	const void *payload;
	size_t size;
	perfrelay_client *c;
	Server s;

	server_start(&s, script_binary, NULL);
	c = connect_to(&s, &sub, 0);
	ASSERT(strstr(s.request, "\"format\":\"binary\""));
	ASSERT_EQ_INT(perfrelay_client_hello(c)->format, PERFRELAY_FORMAT_BINARY);
	{
		const char *line;
		size_t len;

		ASSERT_EQ_INT(perfrelay_next_json(c, &line, &len, 0), -EINVAL);
	}

	for (int round = 0; round < 2; round++) {
		const struct perfrelay_exec *ex;

		ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), 1);
		ASSERT((uintptr_t) hdr % 8 == 0);
		ASSERT_EQ_INT(hdr->type, PERFRELAY_TYPE_EXEC);
		ASSERT_EQ_INT(hdr->size, sizeof(struct perfrelay_exec));
		ASSERT_EQ_INT(hdr->cpu, 3);
		ASSERT_EQ_INT(hdr->ts_ns, 123456789);
		ASSERT_EQ_INT(size, sizeof(struct perfrelay_exec) - sizeof(*hdr));
		ASSERT(payload == (const uint8_t *) hdr + sizeof(*hdr));
		ex = (const struct perfrelay_exec *) hdr;
		ASSERT_EQ_INT(ex->pid, 42);
		ASSERT_EQ_INT(ex->uid, 1000);
		ASSERT(streq_safe(ex->comm, "marker"));
		if (round == 1)
			break;

		ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), 1);
		ASSERT_EQ_INT(hdr->type, PERFRELAY_TYPE_LOST);
		ASSERT_EQ_INT(size, 8);
		ASSERT_EQ_INT(*(const uint64_t *) payload, 5);

		ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), 1);
		ASSERT_EQ_INT(hdr->type, 0x8001);
		ASSERT_EQ_INT(hdr->seq, 9);
		ASSERT_EQ_INT(size, 5);
		ASSERT(memcmp(payload, "abcde", 5) == 0);
	}
	ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), -ECONNRESET);
	perfrelay_close(c);
	server_stop(&s);
}

/* s->arg: bytes to send after the hello, as {size_t n; uint8_t bytes[n]}. */
typedef struct Bytes {
	size_t n;
	uint8_t b[256];
} Bytes;

static void script_send_bytes(Server *s, int fd) {
	const Bytes *b = s->arg;

	send_str(fd, HELLO_BINARY);
	send_all(fd, b->b, b->n);
}

static void test_binary_malformed(void) {
	struct perfrelay_subscription sub = { .format = PERFRELAY_FORMAT_BINARY };
	struct perfrelay_hdr h;
	Bytes cases[6] = {};
	int want[6];
	size_t k = 0;

	/* Length below the header. */
	h = make_hdr(PERFRELAY_TYPE_BENCH, 8, 0);
	cases[k].n = put_frame(cases[k].b, 8, &h, 8);
	want[k++] = -EBADMSG;
	/* Length and hdr.size disagree. */
	h = make_hdr(PERFRELAY_TYPE_BENCH, 48, 0);
	cases[k].n = put_frame(cases[k].b, 40, &h, sizeof(h));
	cases[k].n += 8;
	want[k++] = -EBADMSG;
	/* Length beyond any record. */
	h = make_hdr(PERFRELAY_TYPE_BENCH, 40, 0);
	cases[k].n = put_frame(cases[k].b, 0x10000, &h, sizeof(h));
	want[k++] = -EBADMSG;
	/* Not a perfrelay record. */
	h = make_hdr(PERFRELAY_TYPE_BENCH, 40, 0);
	h.magic = 0xdead;
	cases[k].n = put_frame(cases[k].b, 40, &h, sizeof(h)) + 8;
	want[k++] = -EBADMSG;
	/* Truncated: the stream ends inside the frame, and inside the length. */
	h = make_hdr(PERFRELAY_TYPE_BENCH, 40, 0);
	cases[k].n = put_frame(cases[k].b, 40, &h, sizeof(h)); /* 8 payload bytes missing */
	want[k++] = -EBADMSG;
	cases[k].n = 2;
	want[k++] = -EBADMSG;

	for (size_t i = 0; i < k; i++) {
		const struct perfrelay_hdr *hdr;
		const void *payload;
		size_t size;
		perfrelay_client *c;
		Server s;

		server_start(&s, script_send_bytes, &cases[i]);
		c = connect_to(&s, &sub, 0);
		ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), want[i]);
		ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 0), want[i]);
		perfrelay_close(c);
		server_stop(&s);
	}
}

/* A history's binary stream: a cursor frame before a record is that record's cursor, and only
 * its; a record without one has none, and a cursor frame without its NUL is none. */
static void script_cursors(Server *s, int fd) {
	static uint8_t buf[8192];
	struct perfrelay_exec ex = { .hdr = make_hdr(PERFRELAY_TYPE_EXEC, sizeof(ex), 1), .pid = 42 };
	uint8_t cur[32 + 8];
	struct perfrelay_hdr h = make_hdr(PERFRELAY_TYPE_CURSOR, sizeof(cur), 1);
	size_t n = 0;

	memcpy(cur, &h, sizeof(h));
	memcpy(cur + sizeof(h), "h=1;n=2", 8);
	send_str(fd, HELLO_BINARY);
	n += put_frame(buf + n, sizeof(cur), cur, sizeof(cur));
	n += put_frame(buf + n, sizeof(ex), &ex, sizeof(ex));
	n += put_frame(buf + n, sizeof(ex), &ex, sizeof(ex)); /* no cursor frame */
	cur[sizeof(cur) - 1] = 'x';                           /* no NUL: not a cursor */
	n += put_frame(buf + n, sizeof(cur), cur, sizeof(cur));
	n += put_frame(buf + n, sizeof(ex), &ex, sizeof(ex));
	send_all(fd, buf, n);
}

static void test_binary_cursors(void) {
	struct perfrelay_history history = { .flags = PERFRELAY_HISTORY_CURSORS };
	struct perfrelay_subscription sub = { .format = PERFRELAY_FORMAT_BINARY, .history = &history };
	const struct perfrelay_hdr *hdr;
	const void *payload;
	size_t size;
	perfrelay_client *c;
	Server s;

	server_start(&s, script_cursors, NULL);
	c = connect_to(&s, &sub, 0);
	ASSERT(strstr(s.request, "\"cursors\":true"));
	ASSERT(strstr(s.request, "\"format\":\"binary\""));
	ASSERT(perfrelay_record_cursor(c) == NULL);
	ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), 1);
	ASSERT_EQ_INT(hdr->type, PERFRELAY_TYPE_EXEC);
	ASSERT(streq_safe(perfrelay_record_cursor(c), "h=1;n=2"));
	ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), 1);
	ASSERT_EQ_INT(hdr->type, PERFRELAY_TYPE_EXEC);
	ASSERT(perfrelay_record_cursor(c) == NULL);
	ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), 1);
	ASSERT_EQ_INT(hdr->type, PERFRELAY_TYPE_EXEC);
	ASSERT(perfrelay_record_cursor(c) == NULL);
	ASSERT_EQ_INT(perfrelay_next_record(c, &hdr, &payload, &size, 5000), -ECONNRESET);
	perfrelay_close(c);
	server_stop(&s);
}

static void test_arguments(void) {
	static const char *const comms[] = { "x" };
	struct perfrelay_subscription sub = {};
	perfrelay_client *c = NULL;
	char path[200];

	ASSERT_EQ_INT(perfrelay_client_new(NULL), -EINVAL);
	ASSERT_EQ_INT(perfrelay_connect(NULL, "/x", NULL), -EINVAL);
	ASSERT(perfrelay_close(NULL) == NULL);
	ASSERT(perfrelay_client_error(NULL) == NULL);
	ASSERT_EQ_INT(perfrelay_fd(NULL), -ENOTCONN);

	/* Checked before anything is sent: the socket does not even exist. A history's unknown
	 * flag, its reserved fields, after_cursor with since_ns: */
	{
		struct perfrelay_history bad[] = {
			{ .flags = 0x80 },
			{ .reserved = { 1 } },
			{ .after_cursor = "h=0", .since_ns = 1 },
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			sub = (struct perfrelay_subscription){ .history = &bad[i] };
			ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
			ASSERT_EQ_INT(perfrelay_connect(c, "/nonexistent/events.sock", &sub), -EINVAL);
			c = perfrelay_close(c);
		}
		/* A binary history is one (it gets cursor frames): it goes as far as the socket. */
		sub = (struct perfrelay_subscription){ .history = &(struct perfrelay_history){},
						       .format = PERFRELAY_FORMAT_BINARY };
		ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
		ASSERT_EQ_INT(perfrelay_connect(c, "/nonexistent/events.sock", &sub), -ENOENT);
		c = perfrelay_close(c);
	}

	sub = (struct perfrelay_subscription){ .n_pids = 1 }; /* count without an array */
	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_connect(c, "/nonexistent/events.sock", &sub), -EINVAL);
	c = perfrelay_close(c);

	sub = (struct perfrelay_subscription){ .comms = comms, .n_comms = 1, .format = 7 };
	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_connect(c, "/nonexistent/events.sock", &sub), -EINVAL);
	c = perfrelay_close(c);

	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_connect(c, "/nonexistent/events.sock", NULL), -ENOENT);
	ASSERT(streq_safe(perfrelay_client_socket_path(c), "/nonexistent/events.sock"));
	c = perfrelay_close(c);

	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	ASSERT_EQ_INT(perfrelay_client_new(&c), 0);
	ASSERT_EQ_INT(perfrelay_connect(c, path, NULL), -ENAMETOOLONG);
	c = perfrelay_close(c);
}

int main(void) {
	test_arguments();
	test_request_and_hello();
	test_containers();
	test_default_request_and_env();
	test_error_lines();
	test_split_lines();
	test_long_lines();
	test_goodbye_and_overflow();
	test_binary();
	test_binary_malformed();
	test_binary_cursors();
	if (failures) {
		fprintf(stderr, "%d assertion(s) failed\n", failures);
		return EXIT_FAILURE;
	}
	printf("all libperfrelay tests passed\n");
	return EXIT_SUCCESS;
}
