/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libperfrelay: the client side of the event socket protocol (request, hello, JSON lines and
 * binary frames) over one buffered, non-blocking Unix stream socket. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "json-util.h"
#include "macro.h"
#include "lib/perfrelay.h"
#include "lib/request-line.h"
#include "lib/schema.h"
#include "shared-ring.h"
#include "time-util.h"
#include "unit-frame.h"

#include "lib/libperfrelay-internal.h"

int perfrelay_client_new(perfrelay_client **ret) {
	perfrelay_client *c;

	if (!ret)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -EBADF;
	c->hello_fds[0] = c->hello_fds[1] = -EBADF;
	*ret = c;
	return 0;
}


static void containers_clear(perfrelay_client *c) {
	for (size_t i = 0; i < c->n_containers; i++)
		free(c->containers[i]);
	free(c->containers);
	c->containers = NULL;
	c->n_containers = 0;
}

int perfrelay_client_set_containers(perfrelay_client *c, const char *const *names, size_t n) {
	char **copy;

	if (!c || (n > 0 && !names) || n > PERFRELAY_CONTAINERS_MAX || c->fd >= 0 || c->shared)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!names[i])
			return -EINVAL;
	copy = calloc(n ?: 1, sizeof(char *));
	if (!copy)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		copy[i] = strdup(names[i]);
		if (!copy[i]) {
			while (i > 0)
				free(copy[--i]);
			free(copy);
			return -ENOMEM;
		}
	}
	containers_clear(c);
	c->containers = copy;
	c->n_containers = n;
	return 0;
}

static Shared *shared_free(Shared *s) {
	if (!s)
		return NULL;
	shared_unmap(s);
	free(s->scratch_mem);
	free(s);
	return NULL;
}

perfrelay_client *perfrelay_close(perfrelay_client *c) {
	if (!c)
		return NULL;
	safe_close(c->fd);
	safe_close(c->hello_fds[0]);
	safe_close(c->hello_fds[1]);
	shared_free(c->shared);
	free(c->buf);
	free(c->record);
	free(c->version);
	free(c->message);
	free(c->socket_path);
	containers_clear(c);
	for (unsigned i = 0; i < c->n_schemas; i++)
		schema_free(c->schemas[i]);
	free(c);
	return NULL;
}

int perfrelay_fd(const perfrelay_client *c) {
	if (!c || c->state != CLIENT_CONNECTED)
		return -ENOTCONN;
	return c->fd;
}

const struct perfrelay_hello *perfrelay_client_hello(const perfrelay_client *c) {
	return c && c->state == CLIENT_CONNECTED ? &c->hello : NULL;
}

const char *perfrelay_client_error(const perfrelay_client *c) {
	return c ? c->message : NULL;
}

const char *perfrelay_client_socket_path(const perfrelay_client *c) {
	return c ? c->socket_path : NULL;
}

/* ---- reading ---- */

/* read() that keeps up to two descriptors the daemon passes with the hello line, and closes any
 * others (and any that come later: only the hello carries them). */
ssize_t recv_keep_fds(perfrelay_client *c, void *buf, size_t size) {
	union {
		struct cmsghdr h;
		uint8_t raw[CMSG_SPACE(sizeof(int) * 4)];
	} control;
	struct iovec iov = { .iov_base = buf, .iov_len = size };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = &control,
		.msg_controllen = sizeof(control),
	};
	ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);

	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; i < k; i++) {
				int fd;

				memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				/* The hello's, or a "reshared" line's on the shared path. */
				if ((!c->hello_read || c->shared) && c->n_hello_fds < 2)
					c->hello_fds[c->n_hello_fds++] = fd;
				else
					safe_close(fd);
			}
		}
	return n;
}


/* How long poll() may wait: -1 without a timeout, else the milliseconds left (0: none). The
 * deadline is set at a call's first wait, so that a call that finds data never reads the clock. */
int wait_ms(int timeout_ms, uint64_t *deadline) {
	uint64_t now;

	if (timeout_ms < 0)
		return -1;
	now = now_msec(CLOCK_MONOTONIC);
	if (*deadline == 0)
		*deadline = now + (uint64_t) timeout_ms;
	return now >= *deadline ? 0 : (int) MIN(*deadline - now, (uint64_t) INT32_MAX);
}

int wait_readable(int fd, int timeout_ms, uint64_t *deadline) {
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int wait;

	if (timeout_ms == 0)
		return 0;
	wait = wait_ms(timeout_ms, deadline);
	if (wait == 0)
		return 0;
	return poll(&p, 1, wait) < 0 ? -errno : 1;
}

/* Reads more bytes into the buffer. Returns 1 when bytes arrived, 0 when timeout_ms passed
 * (or, for 0, nothing is readable now), or a negative errno (-ECONNRESET at a clean EOF,
 * -EBADMSG at an EOF inside a line or frame). *deadline: see wait_ms(). */
static int fill(perfrelay_client *c, int timeout_ms, uint64_t *deadline) {
	if (c->shared)
		return shared_fill(c, timeout_ms, deadline);
	if (c->start == c->end)
		c->start = c->scanned = c->end = 0;
	else if (BUFFER_SIZE - c->end < READ_ROOM_MIN && c->start > 0) {
		memmove(c->buf, c->buf + c->start, c->end - c->start);
		c->end -= c->start;
		c->scanned -= c->start;
		c->start = 0;
	}

	for (;;) {
		ssize_t n;
		int k;

		n = recv_keep_fds(c, c->buf + c->end, BUFFER_SIZE - c->end);
		if (n > 0) {
			c->end += (size_t) n;
			return 1;
		}
		if (n == 0)
			return c->start == c->end ? -ECONNRESET : -EBADMSG;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;

		k = wait_readable(c->fd, timeout_ms, deadline);
		if (k <= 0)
			return k; /* -EINTR: the caller's signal handler wants to run */
	}
}

int fail(perfrelay_client *c, int error) {
	c->error = error;
	return error;
}

/* Takes the next complete line out of the buffer, NUL-terminated in place. Returns 1 with a
 * line, 0 on timeout, or a negative errno (not made sticky: the caller decides). */
int read_line(perfrelay_client *c, char **ret, size_t *ret_len, int timeout_ms) {
	uint64_t deadline = 0;

	for (;;) {
		char *nl = memchr(c->buf + c->scanned, '\n', c->end - c->scanned);
		int r;

		if (nl) {
			char *line = c->buf + c->start;
			size_t len = (size_t) (nl - line);

			if (len + 1 > PERFRELAY_LINE_MAX)
				return -EMSGSIZE;
			*nl = '\0';
			c->start = c->scanned = (size_t) (nl + 1 - c->buf);
			*ret = line;
			*ret_len = len;
			return 1;
		}
		c->scanned = c->end;
		if (c->end - c->start >= PERFRELAY_LINE_MAX)
			return -EMSGSIZE;
		r = fill(c, timeout_ms, &deadline);
		if (r <= 0)
			return r;
	}
}

static char *strndup_printable(const char *s, size_t max) {
	size_t n = strnlen(s, max);
	char *t = strndup(s, n);

	if (t)
		for (char *p = t; *p; p++)
			if ((unsigned char) *p < 0x20 || *p == 0x7f)
				*p = '?';
	return t;
}

static void set_message(perfrelay_client *c, const char *message) {
	free(c->message);
	c->message = message ? strndup_printable(message, MESSAGE_MAX) : NULL;
}

/* Parses one whole line as a JSON object (NULL if it is not one). */
json_object *parse_object(const char *line, size_t len) {
	json_tokener *tok = json_tokener_new();
	json_object *o;

	if (!tok)
		return NULL;
	o = json_tokener_parse_ex(tok, line, (int) len);
	if (o && (json_tokener_get_parse_end(tok) != len || !json_object_is_type(o, json_type_object))) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

const char *get_string(json_object *o, const char *key) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

bool get_uint(json_object *o, const char *key, uint64_t *ret) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	errno = 0;
	*ret = json_object_get_uint64(v);
	/* json-c stores negative numbers as int64; get_uint64 then clamps them to 0. */
	return errno == 0 && json_object_get_int64(v) >= 0;
}

static const struct {
	const char *code;
	int error;
} error_codes[] = {
	{ "bad-request", EINVAL },    { "too-large", E2BIG },         { "too-deep", EINVAL },
	{ "timeout", ETIMEDOUT },     { "too-many-clients", EUSERS }, { "overflow", ENOBUFS },
	{ "access-revoked", EACCES },
};

static int error_from_code(const char *code) {
	for (size_t i = 0; code && i < ELEMENTSOF(error_codes); i++)
		if (streq(code, error_codes[i].code))
			return -error_codes[i].error;
	return -EPROTO;
}

/* An error or goodbye line from the daemon: remembers its message, returns the errno. */
static int handle_control(perfrelay_client *c, json_object *o, const char *type) {
	if (streq(type, "goodbye")) {
		set_message(c, get_string(o, "reason"));
		return -ESHUTDOWN;
	}
	set_message(c, get_string(o, "message") ?: get_string(o, "error"));
	return error_from_code(get_string(o, "error"));
}

/* The value of the first key if it is "type" with a plain string value, without parsing the
 * whole line: the daemon writes every line that way, and this is checked once per event. */
static bool peek_type(const char *p, const char *end, const char **ret, size_t *ret_len) {
	static const char key[] = "\"type\"";
	const char *name;

#define SKIP_SPACE()                                                             \
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) \
	p++
	SKIP_SPACE();
	if (p >= end || *p++ != '{')
		return false;
	SKIP_SPACE();
	if ((size_t) (end - p) < sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1) != 0)
		return false;
	p += sizeof(key) - 1;
	SKIP_SPACE();
	if (p >= end || *p++ != ':')
		return false;
	SKIP_SPACE();
	if (p >= end || *p++ != '"')
		return false;
#undef SKIP_SPACE
	name = p;
	while (p < end && *p != '"' && *p != '\\')
		p++;
	if (p >= end || *p != '"')
		return false;
	*ret = name;
	*ret_len = (size_t) (p - name);
	return true;
}

static bool type_is(const char *name, size_t len, const char *what) {
	return len == strlen(what) && memcmp(name, what, len) == 0;
}

/* A line that may be an error or goodbye: its errno if it is one, else 0 (an event, or
 * something that is not JSON, which is the caller's to judge: lines are self-delimiting, so
 * one bad line does not spoil the stream). */
static int control_line(perfrelay_client *c, const char *line, size_t len) {
	_cleanup_(json_object_putp) json_object *o = parse_object(line, len);
	const char *type = o ? get_string(o, "type") : NULL;

	if (!type)
		return 0;
	if (streq(type, "error") || streq(type, "goodbye"))
		return handle_control(c, o, type);
	return 0;
}

static int parse_hello(
	perfrelay_client *c,
	const char *line,
	size_t len,
	enum perfrelay_format format,
	uint64_t *ret_shared_rings) {
	_cleanup_(json_object_putp) json_object *o = parse_object(line, len);
	const char *type, *version, *fmt;
	uint64_t protocol, schema, id;
	json_object *shared;

	if (!o)
		return -EBADMSG;
	type = get_string(o, "type");
	if (!type)
		return -EBADMSG;
	if (streq(type, "error") || streq(type, "goodbye"))
		return handle_control(c, o, type);
	if (!streq(type, "hello"))
		return -EPROTO;
	if (!get_uint(o, "protocol", &protocol))
		return -EPROTO;
	if (protocol != PERFRELAY_PROTOCOL)
		return -EPROTONOSUPPORT;
	version = get_string(o, "version");
	fmt = get_string(o, "format");
	if (!get_uint(o, "schema", &schema) || schema > UINT32_MAX || !get_uint(o, "client_id", &id) ||
	    !version || !fmt || !streq(fmt, format == PERFRELAY_FORMAT_BINARY ? "binary" : "json"))
		return -EPROTO;
	c->version = strndup_printable(version, MESSAGE_MAX);
	if (!c->version)
		return -ENOMEM;
	*ret_shared_rings = 0;
	if (json_object_object_get_ex(o, "shared", &shared) &&
	    (!json_object_is_type(shared, json_type_object) ||
	     !get_uint(shared, "rings", ret_shared_rings) || *ret_shared_rings == 0))
		return -EPROTO;
	c->hello = (struct perfrelay_hello){
		.protocol = (unsigned) protocol,
		.schema = (unsigned) schema,
		.client_id = id,
		.version = c->version,
		.format = format,
	};
	return 0;
}

/* ---- connecting ---- */

static int send_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += k;
		n -= (size_t) k;
	}
	return 0;
}

static int connect_socket(const char *path, int *ret) {
	_cleanup_close_ int fd = -EBADF;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(path);

	if (len == 0)
		return -EINVAL;
	if (len >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, len);

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd,
		    (const struct sockaddr *) &sa,
		    (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len + 1)) < 0)
		return -errno;
	*ret = TAKE_FD(fd);
	return 0;
}


static int do_connect(perfrelay_client *c, const struct perfrelay_subscription *sub) {
	_cleanup_free_ char *request = NULL;
	uint64_t shared_rings;
	size_t request_len, len;
	char *line;
	int r, send_error, flags;

	r = request_line_build(
		sub, (const char *const *) c->containers, c->n_containers, &request, &request_len);
	if (r < 0)
		return r;
	c->buf = malloc(BUFFER_SIZE);
	if (!c->buf)
		return -ENOMEM;
	if (sub->format == PERFRELAY_FORMAT_BINARY) {
		/* malloc's alignment is enough for struct perfrelay_hdr's u64 fields. */
		c->record = malloc(PERFRELAY_RECORD_MAX);
		if (!c->record)
			return -ENOMEM;
	}

	r = connect_socket(c->socket_path, &c->fd);
	if (r < 0)
		return r;

	/* A daemon that refuses the request may close before reading all of it; its error line
	 * is still worth reading, so a failed send only counts if no answer follows. */
	send_error = send_all(c->fd, request, request_len);

	flags = fcntl(c->fd, F_GETFL);
	if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;

	r = read_line(c, &line, &len, PERFRELAY_HELLO_TIMEOUT_MS);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return send_error < 0 && r == -ECONNRESET ? send_error : r;
	c->hello_read = true;
	r = parse_hello(c, line, len, sub->format, &shared_rings);
	if (r < 0 || shared_rings == 0)
		return r;
	return shared_setup(c, (unsigned) MIN(shared_rings, (uint64_t) UINT_MAX));
}

int perfrelay_connect(perfrelay_client *c, const char *socket_path, const struct perfrelay_subscription *sub) {
	static const struct perfrelay_subscription everything = {};
	int r;

	if (!c)
		return -EINVAL;
	if (c->state != CLIENT_NEW)
		return -EISCONN;
	if (!sub)
		sub = &everything;
	r = request_line_check(sub);
	if (r < 0)
		return r;

	if (!socket_path) {
		socket_path = secure_getenv("PERFRELAY_SOCKET");
		if (!socket_path || !*socket_path)
			socket_path = PERFRELAY_SOCKET_DEFAULT;
	}
	c->state = CLIENT_FAILED; /* until the hello says otherwise */
	c->socket_path = strdup(socket_path);
	if (!c->socket_path)
		return -ENOMEM;

	r = do_connect(c, sub);
	if (r < 0) {
		c->fd = safe_close(c->fd);
		free(c->buf);
		c->buf = NULL;
		return r;
	}
	c->state = CLIENT_CONNECTED;
	return 0;
}


/* ---- events ---- */

static int check_readable(perfrelay_client *c, enum perfrelay_format format) {
	if (!c || c->state != CLIENT_CONNECTED)
		return -ENOTCONN;
	if (c->hello.format != format)
		return -EINVAL;
	return c->error;
}

int perfrelay_next_json(perfrelay_client *c, const char **line, size_t *len, int timeout_ms) {
	const char *name;
	size_t name_len, n;
	char *l;
	int r;

	if (!line || !len)
		return -EINVAL;
	r = check_readable(c, PERFRELAY_FORMAT_JSON);
	if (r < 0)
		return r;

	r = read_line(c, &l, &n, timeout_ms);
	if (r == 0 || r == -EINTR)
		return r;
	if (r < 0)
		return fail(c, r);

	/* Error and goodbye lines end the stream. The daemon writes "type" first, so one look at
	 * the start of the line settles it; only other lines pay for a full parse. */
	if (peek_type(l, l + n, &name, &name_len)) {
		if (type_is(name, name_len, "error") || type_is(name, name_len, "goodbye")) {
			r = control_line(c, l, n);
			return fail(c, r < 0 ? r : -EBADMSG);
		}
	} else {
		r = control_line(c, l, n);
		if (r < 0)
			return fail(c, r);
	}
	*line = l;
	*len = n;
	return 1;
}

static int next_frame(
	perfrelay_client *c,
	const struct perfrelay_hdr **hdr,
	const void **payload,
	size_t *payload_size,
	int timeout_ms) {
	uint64_t deadline = 0;
	uint32_t length;
	const char *rec;
	int r;

	if (!hdr || !payload || !payload_size)
		return -EINVAL;
	r = check_readable(c, PERFRELAY_FORMAT_BINARY);
	if (r < 0)
		return r;
	if (c->shared)
		return shared_next_frame(c, hdr, payload, payload_size, timeout_ms);

	/* The length prefix first, then the whole frame; both may take several reads. */
	for (;;) {
		size_t have = c->end - c->start;

		if (have >= 4) {
			length = frame_length_at(c->buf + c->start);
			if (length < sizeof(struct perfrelay_hdr) || length > PERFRELAY_RECORD_MAX)
				return fail(c, -EBADMSG);
			if (have >= 4 + (size_t) length)
				break;
		}
		r = fill(c, timeout_ms, &deadline);
		if (r == 0 || r == -EINTR)
			return r;
		if (r < 0)
			return fail(c, r);
	}

	rec = c->buf + c->start + 4;
	r = frame_check(rec, length);
	if (r < 0)
		return fail(c, r);
	c->start += 4 + (size_t) length;
	c->scanned = c->start;
	frame_out(c, rec, length, hdr, payload, payload_size);
	return 1;
}

/* Keeps the schema a schema frame carries (replacing the one of its type), so that
 * perfrelay_record_field() can use it. A malformed one is ignored: that type's records then
 * have no fields. */
static int take_schema(perfrelay_client *c, const char *payload, size_t len) {
	Schema *s;
	int r;

	r = schema_parse(payload, len, &s);
	if (r == -EBADMSG)
		return 0;
	if (r < 0)
		return r;
	for (unsigned i = 0; i < c->n_schemas; i++)
		if (schema_type(c->schemas[i]) == schema_type(s)) {
			schema_free(c->schemas[i]);
			c->schemas[i] = s;
			return 0;
		}
	if (c->n_schemas < SCHEMA_MAX_KEPT) {
		c->schemas[c->n_schemas++] = s;
		return 0;
	}
	/* More types than the daemon keeps decoders for at once: the oldest go first. */
	schema_free(c->schemas[c->next_evicted]);
	c->schemas[c->next_evicted] = s;
	c->next_evicted = (c->next_evicted + 1) % SCHEMA_MAX_KEPT;
	return 0;
}

static const Schema *find_schema(const perfrelay_client *c, uint16_t type) {
	if (!c)
		return NULL;
	for (unsigned i = 0; i < c->n_schemas; i++)
		if (schema_type(c->schemas[i]) == type)
			return c->schemas[i];
	return NULL;
}

const char *perfrelay_record_type_name(const perfrelay_client *c, uint16_t type) {
	const Schema *s = find_schema(c, type);

	return s ? schema_name(s) : NULL;
}

const char *perfrelay_record_producer_name(const perfrelay_client *c, uint16_t type) {
	const Schema *s = find_schema(c, type);

	return s ? schema_producer_name(s) : NULL;
}

int perfrelay_record_field(
	const perfrelay_client *c, const struct perfrelay_hdr *hdr, unsigned *iter, struct perfrelay_field *f) {
	const Schema *s;

	if (!c || !hdr || !iter || !f)
		return -EINVAL;
	s = find_schema(c, hdr->type);
	if (!s)
		return -ENOENT;
	return schema_field(s, hdr, hdr->size, iter, f);
}

int perfrelay_next_record(
	perfrelay_client *c,
	const struct perfrelay_hdr **hdr,
	const void **payload,
	size_t *payload_size,
	int timeout_ms) {
	int r;

	/* Schema and unit frames are the library's, not the caller's: take them and read on. */
	for (;;) {
		r = next_frame(c, hdr, payload, payload_size, timeout_ms);
		if (r <= 0)
			return r;
		if ((*hdr)->type == PERFRELAY_TYPE_UNIT) {
			/* Kept for the record that follows; a malformed one is ignored (that
			 * record then has no unit). */
			c->unit_pending = unit_frame_name(*payload, *payload_size, c->unit);
			continue;
		}
		if ((*hdr)->type == PERFRELAY_TYPE_CURSOR) {
			/* The same, for the record's cursor: a NUL-terminated string. */
			size_t n = strnlen(*payload, *payload_size);

			c->cursor_pending = n > 0 && n < *payload_size && n < sizeof(c->cursor);
			if (c->cursor_pending)
				memcpy(c->cursor, *payload, n + 1);
			continue;
		}
		if ((*hdr)->type != PERFRELAY_TYPE_SCHEMA) {
			c->unit_current = c->unit_pending;
			c->unit_pending = false;
			c->cursor_current = c->cursor_pending;
			c->cursor_pending = false;
			return r;
		}
		r = take_schema(c, *payload, *payload_size);
		if (r < 0)
			return fail(c, r);
	}
}

const char *perfrelay_record_unit(const perfrelay_client *c) {
	return c && c->unit_current ? c->unit : NULL;
}

const char *perfrelay_record_cursor(const perfrelay_client *c) {
	return c && c->cursor_current ? c->cursor : NULL;
}
