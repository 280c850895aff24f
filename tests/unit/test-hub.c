/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of hub.c, with the test as both the reader thread and the main thread: formats
 * (JSON lines, binary frames), filters and units, overflow with "lost" notices in both formats
 * (offered = queued + dropped, and the notices add up to the drops), and disconnect-on-overflow. */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/btf.h>
#include <json-c/json.h>

#include "decode/btfrec.h"
#include "hub/encode.h"
#include "hub/shared-ring-writer.h"
#include "hub/hub-internal.h"
#include "hub/hub.h"
#include "macro.h"
#include "hub/proctable.h"
#include "decode/producer-scan.h"

#include "unit-test.h"

static struct perfrelay_open make_open(uint32_t pid, uint64_t seq, const char *path) {
	struct perfrelay_open r = {
		.hdr = {
			.magic = PERFRELAY_MAGIC,
			.version = PERFRELAY_VERSION,
			.type = PERFRELAY_TYPE_OPEN,
			.size = sizeof(r),
			.producer = PERFRELAY_PRODUCER_OPEN,
			.cpu = 1,
			.seq = seq,
			.ts_ns = 1000 + seq,
		},
		.pid = pid,
		.uid = 0,
		.flags = 0,
		.result = 3,
	};

	strcpy(r.comm, "cat");
	snprintf(r.path, sizeof(r.path), "%s", path);
	return r;
}

static DecodedEvent decode(const void *rec, size_t size) {
	DecodedEvent ev;

	if (decode_event(rec, size, &ev) != DECODE_OK) {
		fprintf(stderr, "test record does not decode\n");
		exit(EXIT_FAILURE);
	}
	return ev;
}

/* Match: only the pid in *filter; records the unit it was given. */
static const char *seen_unit;
static bool match_pid(const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	seen_unit = origin->unit;
	return ev->pid == *(const uint32_t *) filter;
}

typedef struct Peer {
	int fds[2]; /* [0]: the hub writes, [1]: the test reads */
	uint8_t *buf;
	size_t len, size;
} Peer;

static void peer_open(Peer *p) {
	*p = (Peer){ .size = 64 << 20 };
	p->buf = malloc(p->size);
	if (!p->buf || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p->fds) < 0) {
		perror("socketpair");
		exit(EXIT_FAILURE);
	}
}

static void peer_close(Peer *p) {
	close(p->fds[0]);
	close(p->fds[1]);
	free(p->buf);
}

/* Flushes the client and reads everything it wrote into p->buf. */
static void pump(HubClient *c, Peer *p) {
	for (;;) {
		int r = hub_client_flush(c);
		ssize_t n;

		ASSERT(r >= 0);
		while ((n = read(p->fds[1], p->buf + p->len, p->size - p->len)) > 0)
			p->len += (size_t) n;
		if (r == 1)
			return;
	}
}

static void publish(Hub *h, const DecodedEvent *ev, const char *unit) {
	hub_reader_begin(h, 0);
	hub_publish(h, 0, ev, &(HubOrigin){ .unit = unit }, NULL);
	hub_reader_end(h, 0);
}

static void test_formats(void) {
	Hub *h;
	HubClient *json, *bin;
	Peer pj, pb;
	uint32_t pid = 42;
	struct perfrelay_open rec = make_open(42, 7, "/etc/passwd"), other = make_open(43, 8, "/x");
	DecodedEvent ev = decode(&rec, sizeof(rec)), ev_other = decode(&other, sizeof(other));
	HubClientStats st;

	peer_open(&pj);
	peer_open(&pb);
	ASSERT(hub_new(1, &h) == 0);
	HubClientOptions oj = { .format = HUB_FORMAT_JSON,
				.queue_bytes = 1 << 20,
				.match = match_pid,
				.filter = &pid,
				.userdata = &pj };
	HubClientOptions ob = { .format = HUB_FORMAT_BINARY, .queue_bytes = 1 << 20 };
	ASSERT(hub_client_new(h, pj.fds[0], &oj, &json) == 0);
	ASSERT(hub_client_new(h, pb.fds[0], &ob, &bin) == 0);
	ASSERT(hub_client_userdata(json) == &pj && hub_client_userdata(bin) == NULL);
	ASSERT(hub_client_format(bin) == HUB_FORMAT_BINARY);

	hub_reader_begin(h, 0);
	ASSERT(!hub_reader_has_clients(h, 0));
	hub_reader_end(h, 0);
	ASSERT(hub_client_attach(h, json) == 0 && hub_client_attach(h, bin) == 0);
	hub_reader_begin(h, 0);
	ASSERT(hub_reader_has_clients(h, 0));
	hub_reader_end(h, 0);

	publish(h, &ev, "cat.service");
	ASSERT(seen_unit && streq(seen_unit, "cat.service"));
	publish(h, &ev_other, NULL);
	pump(json, &pj);
	pump(bin, &pb);

	/* JSON: one line, with the unit, and the other pid filtered out. */
	ASSERT(pj.len > 0 && pj.buf[pj.len - 1] == '\n' && memchr(pj.buf, '\n', pj.len) == pj.buf + pj.len - 1);
	pj.buf[pj.len - 1] = '\0';
	json_object *o = json_tokener_parse((char *) pj.buf), *v;
	ASSERT(o && json_object_object_get_ex(o, "unit", &v) &&
	       streq(json_object_get_string(v), "cat.service"));
	ASSERT(o && json_object_object_get_ex(o, "path", &v) &&
	       streq(json_object_get_string(v), "/etc/passwd"));
	ASSERT(o && json_object_object_get_ex(o, "seq", &v) && json_object_get_int64(v) == 7);
	json_object_put(o);
	hub_client_get_stats(json, &st);
	ASSERT(st.offered == 1 && st.queued == 1 && st.dropped == 0 && st.bytes_sent == pj.len &&
	       st.queued_bytes == 0);

	/* Binary: two frames of a little-endian length and the record as it was. */
	ASSERT(pb.len == 2 * (4 + sizeof(rec)));
	uint32_t len;
	memcpy(&len, pb.buf, 4);
	ASSERT(le32toh(len) == sizeof(rec));
	ASSERT(memcmp(pb.buf + 4, &rec, sizeof(rec)) == 0);
	memcpy(&len, pb.buf + 4 + sizeof(rec), 4);
	ASSERT(le32toh(len) == sizeof(other));
	ASSERT(memcmp(pb.buf + 8 + sizeof(rec), &other, sizeof(other)) == 0);
	hub_client_get_stats(bin, &st);
	ASSERT(st.offered == 2 && st.queued == 2 && st.dropped == 0);

	hub_client_detach(h, json);
	hub_client_detach(h, bin);
	hub_client_free(json);
	hub_client_free(bin);
	hub_free(h);
	peer_close(&pj);
	peer_close(&pb);
}

/* Sums the "lost" notices and counts the events in a JSON stream. */
static void scan_json(const Peer *p, uint64_t *ret_events, uint64_t *ret_lost, uint64_t *ret_last_seq) {
	uint64_t events = 0, lost = 0, last = 0;
	const uint8_t *s = p->buf, *end = p->buf + p->len;

	while (s < end) {
		const uint8_t *nl = memchr(s, '\n', (size_t) (end - s));
		char line[4096];
		json_object *o, *t, *v;

		ASSERT(nl && (size_t) (nl - s) < sizeof(line));
		if (!nl)
			break;
		memcpy(line, s, (size_t) (nl - s));
		line[nl - s] = '\0';
		o = json_tokener_parse(line);
		ASSERT(o && json_object_object_get_ex(o, "type", &t));
		if (o && streq(json_object_get_string(t), "lost")) {
			ASSERT(json_object_object_get_ex(o, "count", &v) && json_object_get_int64(v) > 0);
			lost += (uint64_t) json_object_get_int64(v);
		} else if (o) {
			ASSERT(json_object_object_get_ex(o, "seq", &v));
			ASSERT((uint64_t) json_object_get_int64(v) > last); /* in order, gaps only where lost */
			last = (uint64_t) json_object_get_int64(v);
			events++;
		}
		json_object_put(o);
		s = nl + 1;
	}
	*ret_events = events;
	*ret_lost = lost;
	*ret_last_seq = last;
}

static void scan_binary(const Peer *p, uint64_t *ret_events, uint64_t *ret_lost) {
	uint64_t events = 0, lost = 0;
	size_t off = 0;

	while (off + 4 <= p->len) {
		uint32_t len;
		struct perfrelay_hdr hdr;

		memcpy(&len, p->buf + off, 4);
		len = le32toh(len);
		ASSERT(len >= sizeof(hdr) && off + 4 + len <= p->len);
		memcpy(&hdr, p->buf + off + 4, sizeof(hdr));
		ASSERT(hdr.magic == PERFRELAY_MAGIC && hdr.version == PERFRELAY_VERSION && hdr.size == len);
		if (hdr.type == PERFRELAY_TYPE_LOST) {
			uint64_t n;

			ASSERT(len == sizeof(hdr) + sizeof(uint64_t));
			memcpy(&n, p->buf + off + 4 + sizeof(hdr), sizeof(n));
			ASSERT(n > 0);
			lost += n;
		} else {
			ASSERT(hdr.type == PERFRELAY_TYPE_OPEN);
			events++;
		}
		off += 4 + len;
	}
	ASSERT(off == p->len);
	*ret_events = events;
	*ret_lost = lost;
}

static void test_overflow(HubFormat format) {
	Hub *h;
	HubClient *c;
	Peer p;
	HubClientStats st;
	uint64_t events, lost, last = 0;
	const unsigned n = 5000;

	peer_open(&p);
	ASSERT(hub_new(1, &h) == 0);
	/* The smallest queue: far fewer than n events fit. */
	HubClientOptions o = { .format = format, .queue_bytes = 64 * 1024 };
	ASSERT(hub_client_new(h, p.fds[0], &o, &c) == 0 && hub_client_attach(h, c) == 0);

	/* A burst the client does not read: its queue fills and the rest is dropped. */
	hub_reader_begin(h, 0);
	for (unsigned i = 1; i <= n; i++) {
		struct perfrelay_open rec = make_open(1, i, "/burst");
		DecodedEvent ev = decode(&rec, sizeof(rec));

		hub_publish(h, 0, &ev, NULL, NULL);
	}
	hub_reader_end(h, 0);
	hub_client_get_stats(c, &st);
	ASSERT(st.offered == n && st.queued + st.dropped == n && st.dropped > 0 && st.queued > 0);
	ASSERT(!hub_client_overflowed(c));

	/* The client reads; the next batch end (no event needed) queues the lost notice. */
	pump(c, &p);
	hub_reader_begin(h, 0);
	hub_reader_end(h, 0);
	pump(c, &p);

	/* Then a trickle that fits, in order after the notice. */
	for (unsigned i = n + 1; i <= n + 10; i++) {
		struct perfrelay_open rec = make_open(1, i, "/after");
		DecodedEvent ev = decode(&rec, sizeof(rec));

		publish(h, &ev, NULL);
	}
	pump(c, &p);

	hub_client_get_stats(c, &st);
	if (format == HUB_FORMAT_JSON) {
		scan_json(&p, &events, &lost, &last);
		ASSERT(last == n + 10);
	} else
		scan_binary(&p, &events, &lost);
	ASSERT(st.offered == n + 10);
	ASSERT(events == st.queued && lost == st.dropped);
	ASSERT(events + lost == n + 10);

	hub_client_detach(h, c);
	hub_client_free(c);
	hub_free(h);
	peer_close(&p);
}

static void test_disconnect(void) {
	Hub *h;
	HubClient *c;
	Peer p;
	HubClientStats st;

	peer_open(&p);
	ASSERT(hub_new(2, &h) == 0);
	HubClientOptions o = { .format = HUB_FORMAT_JSON,
			       .overflow = HUB_OVERFLOW_DISCONNECT,
			       .queue_bytes = 64 * 1024 };
	ASSERT(hub_client_new(h, p.fds[0], &o, &c) == 0 && hub_client_attach(h, c) == 0);

	hub_reader_begin(h, 1);
	for (unsigned i = 1; i <= 3000 && !hub_client_overflowed(c); i++) {
		struct perfrelay_open rec = make_open(1, i, "/burst");
		DecodedEvent ev = decode(&rec, sizeof(rec));

		hub_publish(h, 1, &ev, NULL, NULL);
	}
	hub_reader_end(h, 1);
	ASSERT(hub_client_overflowed(c));
	/* The main thread must not sleep while an overflowed client waits to be closed. */
	ASSERT(hub_prepare_sleep(h));
	hub_client_get_stats(c, &st);
	ASSERT(st.dropped == 1 && st.offered == st.queued + 1);

	/* No lost notice for a client that is to be closed. */
	pump(c, &p);
	hub_reader_begin(h, 1);
	hub_reader_end(h, 1);
	size_t before = p.len;
	pump(c, &p);
	ASSERT(p.len == before);

	hub_client_detach(h, c);
	hub_client_free(c);
	hub_free(h);
	peer_close(&p);
}

/* What a consumer in the daemon (the D-Bus monitors) collects from hub_client_consume(). */
typedef struct Consumed {
	uint64_t events, lost, last_seq, first_ts;
	bool lines_match, known;
	uint16_t type;
} Consumed;

static void consume_frame(const HubFrame *f, void *userdata) {
	Consumed *c = userdata;
	char want[ENCODE_JSON_MAX];

	if (f->type == PERFRELAY_TYPE_LOST) {
		ssize_t n = encode_lost_json(f->value, want, sizeof(want));

		c->lost += f->value;
		c->lines_match &= n > 0 && (size_t) n == f->len + 1 && memcmp(want, f->line, f->len) == 0;
		return;
	}
	/* The line is the JSON line any JSON client gets, without its newline; type and ts are
	 * the record's, without parsing the line. */
	c->lines_match &= strlen(f->line) == f->len && f->len > 0 && f->line[0] == '{' &&
		strstr(f->line, "\"type\":\"open\"") != NULL;
	if (c->events == 0)
		c->first_ts = f->value;
	c->type = f->type;
	c->known = f->known;
	c->events++;
	{
		const char *p = strstr(f->line, "\"seq\":");

		if (p)
			c->last_seq = strtoull(p + 6, NULL, 10);
	}
}

/* HUB_FORMAT_JSON_TAGGED: frames handed over whole, in order, with the record's type and
 * timestamp; after an overflow the lost notice carries the exact count; sent = events taken. */
static void test_consume(void) {
	Hub *h;
	HubClient *c;
	HubClientStats st;
	Consumed got = { .lines_match = true };
	const unsigned n = 5000;

	ASSERT(hub_new(2, &h) == 0);
	HubClientOptions o = { .format = HUB_FORMAT_JSON_TAGGED, .queue_bytes = 64 * 1024 };
	ASSERT(hub_client_new(h, -EBADF, &o, &c) == 0 && hub_client_attach(h, c) == 0);

	/* Reader 1 publishes a burst its queue cannot hold. */
	hub_reader_begin(h, 1);
	for (unsigned i = 1; i <= n; i++) {
		struct perfrelay_open rec = make_open(1, i, "/burst");
		DecodedEvent ev = decode(&rec, sizeof(rec));

		hub_publish(h, 1, &ev, NULL, NULL);
	}
	hub_reader_end(h, 1);
	hub_client_consume(c, consume_frame, &got);
	hub_client_get_stats(c, &st);
	ASSERT(st.offered == n && st.dropped > 0 && st.sent == got.events && st.queued == got.events);
	ASSERT(st.queued_bytes == 0);
	ASSERT(got.type == PERFRELAY_TYPE_OPEN && got.known && got.first_ts != 0);

	/* The next batch end queues the notice, then events follow it in order. */
	hub_reader_begin(h, 1);
	hub_reader_end(h, 1);
	for (unsigned i = n + 1; i <= n + 10; i++) {
		struct perfrelay_open rec = make_open(1, i, "/after");
		DecodedEvent ev = decode(&rec, sizeof(rec));

		hub_reader_begin(h, 1);
		hub_publish(h, 1, &ev, NULL, NULL);
		hub_reader_end(h, 1);
	}
	hub_client_consume(c, consume_frame, &got);
	hub_client_get_stats(c, &st);
	ASSERT(got.lines_match);
	ASSERT(got.last_seq == n + 10);
	ASSERT(got.lost == st.dropped && got.events == st.sent && got.events + got.lost == n + 10);

	/* Queued but never consumed: counted as dropped when the client goes. */
	{
		struct perfrelay_open rec = make_open(1, n + 11, "/left");
		DecodedEvent ev = decode(&rec, sizeof(rec));

		hub_reader_begin(h, 0);
		hub_publish(h, 0, &ev, NULL, NULL);
		hub_reader_end(h, 0);
	}
	hub_client_detach(h, c);
	hub_client_discard(c);
	hub_client_get_stats(c, &st);
	ASSERT(st.offered == n + 11 && st.offered == st.sent + st.dropped);

	hub_client_free(c);
	hub_free(h);
}

/* A third-party record decoded from BTF under the name "lost" (producer-scan.c refuses the name;
 * the hub must not depend on that): its lines read like "lost" notices, and still each one
 * written counts as sent, across many overflows (more notices than HubQueue.lost_at holds). */
struct lost_named {
	struct perfrelay_hdr hdr;
	uint64_t count;
};

static void test_lost_named_event(void) {
	struct btf *btf = btf__new_empty();
	int u16, u64, hdr, rec_id;
	BtfRec *r = NULL;
	BtfRecError err;
	Hub *h;
	HubClient *c;
	Peer p;
	HubClientStats st;
	uint64_t offered = 0, lines = 0, notices = 0, told = 0;

	u16 = btf__add_int(btf, "unsigned short", 2, 0);
	u64 = btf__add_int(btf, "unsigned long long", 8, 0);
	hdr = btf__add_struct(btf, "perfrelay_hdr", 32);
	btf__add_field(btf, "magic", u16, 0, 0);
	rec_id = btf__add_struct(btf, "lost_named", sizeof(struct lost_named));
	btf__add_field(btf, "hdr", hdr, 0, 0);
	btf__add_field(btf, "count", u64, 256, 0);
	ASSERT(btfrec_build(btf, rec_id, 0x8042, "lost", &r, &err) == 0 && r);
	btf__free(btf);
	if (!r)
		return;

	peer_open(&p);
	ASSERT(hub_new(1, &h) == 0);
	HubClientOptions o = { .format = HUB_FORMAT_JSON, .queue_bytes = 64 * 1024 };
	ASSERT(hub_client_new(h, p.fds[0], &o, &c) == 0 && hub_client_attach(h, c) == 0);
	for (unsigned round = 0; round < 3 * HUB_LOST_MARKS; round++) {
		/* A burst the queue cannot hold, read, and a batch end that queues the notice. */
		hub_reader_begin(h, 0);
		for (unsigned i = 0; i < 6000; i++) {
			struct lost_named rec = {
				.hdr = { .magic = PERFRELAY_MAGIC,
					 .version = PERFRELAY_VERSION,
					 .type = 0x8042,
					 .size = sizeof(rec),
					 .producer = 300,
					 .seq = offered,
					 .ts_ns = 1 + offered },
				.count = 7,
			};
			DecodedEvent ev = decode(&rec, sizeof(rec));

			ev.btf = r;
			ev.producer_name = "x";
			hub_publish(h, 0, &ev, NULL, NULL);
			offered++;
		}
		hub_reader_end(h, 0);
		pump(c, &p);
		hub_reader_begin(h, 0);
		hub_reader_end(h, 0);
		pump(c, &p);
	}
	/* Every line starts {"type":"lost"; the notices are those without a "seq". */
	for (size_t pos = 0; pos < p.len;) {
		uint8_t *nl = memchr(p.buf + pos, '\n', p.len - pos);
		json_object *line, *v;

		ASSERT(nl);
		if (!nl)
			break;
		*nl = '\0';
		line = json_tokener_parse((char *) p.buf + pos);
		ASSERT(line && strncmp((char *) p.buf + pos, "{\"type\":\"lost\"", 14) == 0);
		if (json_object_object_get_ex(line, "seq", &v))
			lines++;
		else if (json_object_object_get_ex(line, "count", &v)) {
			notices++;
			told += (uint64_t) json_object_get_int64(v);
		}
		json_object_put(line);
		pos = (size_t) (nl - p.buf) + 1;
	}
	hub_client_detach(h, c);
	hub_client_discard(c);
	hub_client_get_stats(c, &st);
	ASSERT(notices > HUB_LOST_MARKS);
	ASSERT(st.offered == offered && st.sent == lines && st.offered == st.sent + st.dropped);
	ASSERT(told == st.dropped);
	hub_client_free(c);
	hub_free(h);
	peer_close(&p);
	btfrec_free(r);
}

/* A binary shared ring: a third-party record near the largest, behind a schema near the largest,
 * goes in two frames (the schema's first, the same seq), each within PERFRELAY_SHARED_FRAME_MAX,
 * which a reader copies whole; together they were once more than libperfrelay's copy room. */
static void test_shared_schema_split(void) {
	static uint8_t rec[60000];
	static char schema[60000];
	struct perfrelay_hdr *hdr = (struct perfrelay_hdr *) rec;
	ProducerType t = { .type = 0x8042, .schema = schema, .schema_len = sizeof(schema), .generation = 1 };
	SharedRing *ring;
	Hub *h;
	HubClient *c;
	DecodedEvent ev;
	const uint8_t *data;
	uint64_t head, seqs[2] = {}, n = 0;

	memset(schema, 'x', sizeof(schema));
	*hdr = (struct perfrelay_hdr){ .magic = PERFRELAY_MAGIC,
				       .version = PERFRELAY_VERSION,
				       .type = 0x8042,
				       .size = sizeof(rec),
				       .producer = 300,
				       .ts_ns = 1 };
	ev = decode(rec, sizeof(rec));
	ev.producer_type = &t;
	ASSERT(hub_new(1, &h) == 0);
	ASSERT(shared_ring_new(hub_n_slots(h), hub_n_small_slots(h), 1 << 20, &ring) == 0);
	HubClientOptions o = { .format = HUB_FORMAT_BINARY, .overflow = HUB_OVERFLOW_DROP, .shared = ring };
	ASSERT(hub_client_new(h, -EBADF, &o, &c) == 0 && hub_client_attach(h, c) == 0);
	publish(h, &ev, NULL);

	data = shared_ring_data(ring, 0);
	head = ((const struct perfrelay_shared_ctl *) (data - sizeof(struct perfrelay_shared_ctl)))->head;
	for (uint64_t pos = 0; pos < head;) {
		struct perfrelay_shared_frame f;
		struct perfrelay_hdr sub;

		memcpy(&f, data + pos, sizeof(f));
		ASSERT(f.len <= PERFRELAY_SHARED_FRAME_MAX && f.size >= sizeof(f) && n < 2);
		if (f.len == 0 || n >= 2 || f.size < sizeof(f))
			break;
		memcpy(&sub, data + pos + sizeof(f) + sizeof(uint32_t), sizeof(sub));
		ASSERT(sub.type == (n == 0 ? PERFRELAY_TYPE_SCHEMA : 0x8042));
		seqs[n++] = f.seq;
		pos += f.size;
	}
	ASSERT(n == 2 && seqs[0] == 0 && seqs[1] == 0);
	hub_client_detach(h, c);
	hub_client_free(c);
	hub_free(h);
	shared_ring_free(ring);
}

/* A client that sees only its uid's events (HubClientOptions.redact) gets an exec's ancestors
 * that the process table says ran as that uid, in JSON and in the binary record alike: another
 * user's (root's sshd) and one the table does not know are left out; a client of everything
 * gets them all; nothing else of the event changes. */
static void test_redacted_ancestors(void) {
	static _Alignas(8) struct perfrelay_exec rec, got_rec;
	ProcEntry mine = { .exec_id = 0xa1, .pid = 100, .uid = 1000, .comm = "sh" },
		  roots = { .exec_id = 0xa2, .pid = 50, .uid = 0, .comm = "sshd" };
	Hub *h;
	HubClient *cj, *cb, *ca;
	Peer pj, pb, pa;
	DecodedEvent ev;
	json_object *o, *anc;
	const struct perfrelay_exec *got;

	rec.hdr = (struct perfrelay_hdr){ .magic = PERFRELAY_MAGIC,
					  .version = PERFRELAY_VERSION,
					  .type = PERFRELAY_TYPE_EXEC,
					  .size = sizeof(rec),
					  .producer = PERFRELAY_PRODUCER_EXEC,
					  .cpu = 1,
					  .seq = 1,
					  .ts_ns = 1 };
	rec.pid = 200;
	rec.uid = 1000;
	rec.creds.euid = 1000;
	strcpy(rec.comm, "true");
	rec.ids.exec_id = 0xa0;
	rec.ids.parent_exec_id = 0xa1;
	rec.n_ancestors = 3;
	rec.ancestors[0] = (struct perfrelay_ancestor){ .exec_id = 0xa1, .pid = 100, .comm = "sh" };
	rec.ancestors[1] = (struct perfrelay_ancestor){ .exec_id = 0xa2, .pid = 50, .comm = "sshd" };
	rec.ancestors[2] = (struct perfrelay_ancestor){ .exec_id = 0xa3, .pid = 1, .comm = "systemd" };
	ev = decode(&rec, sizeof(rec));

	peer_open(&pj);
	peer_open(&pb);
	peer_open(&pa);
	ASSERT(hub_new(1, &h) == 0);
	proc_table_put(hub_procs(h), &mine, false);
	proc_table_put(hub_procs(h), &roots, false);
	HubClientOptions oj = {
		.format = HUB_FORMAT_JSON, .queue_bytes = 1 << 20, .redact = true, .redact_uid = 1000
	};
	HubClientOptions ob = {
		.format = HUB_FORMAT_BINARY, .queue_bytes = 1 << 20, .redact = true, .redact_uid = 1000
	};
	HubClientOptions oa = { .format = HUB_FORMAT_JSON, .queue_bytes = 1 << 20 };
	ASSERT(hub_client_new(h, pj.fds[0], &oj, &cj) == 0 && hub_client_attach(h, cj) == 0);
	ASSERT(hub_client_new(h, pb.fds[0], &ob, &cb) == 0 && hub_client_attach(h, cb) == 0);
	ASSERT(hub_client_new(h, pa.fds[0], &oa, &ca) == 0 && hub_client_attach(h, ca) == 0);
	publish(h, &ev, NULL);
	pump(cj, &pj);
	pump(cb, &pb);
	pump(ca, &pa);

	pj.buf[pj.len - 1] = 0;
	o = json_tokener_parse((char *) pj.buf);
	ASSERT(o && json_object_object_get_ex(o, "ancestors", &anc) && json_object_array_length(anc) == 1);
	if (o && anc && json_object_array_length(anc) == 1) {
		json_object *pid;

		ASSERT(json_object_object_get_ex(json_object_array_get_idx(anc, 0), "pid", &pid) &&
		       json_object_get_int(pid) == 100);
	}
	json_object_put(o);
	pa.buf[pa.len - 1] = 0;
	o = json_tokener_parse((char *) pa.buf);
	ASSERT(o && json_object_object_get_ex(o, "ancestors", &anc) && json_object_array_length(anc) == 3);
	json_object_put(o);

	ASSERT(pb.len == 4 + sizeof(rec));
	memcpy(&got_rec, pb.buf + 4, MIN(pb.len - 4, sizeof(got_rec))); /* the frame's record is not aligned */
	got = &got_rec;
	ASSERT(got->n_ancestors == 1 && got->ancestors[0].exec_id == 0xa1 && got->ancestors[1].exec_id == 0 &&
	       got->ancestors[2].exec_id == 0 && got->ancestors[1].comm[0] == 0);
	ASSERT(memcmp(got, &rec, offsetof(struct perfrelay_exec, n_ancestors)) == 0);
	ASSERT(memcmp(got->exe, rec.exe, sizeof(rec) - offsetof(struct perfrelay_exec, exe)) == 0);

	for (HubClient **c = (HubClient *[]){ cj, cb, ca, NULL }; *c; c++) {
		hub_client_detach(h, *c);
		hub_client_free(*c);
	}
	hub_free(h);
	peer_close(&pj);
	peer_close(&pb);
	peer_close(&pa);
}

/* A client whose "ancestor" filter took the event only for its incomplete lineage (as
 * filter.c tells the hub, through the lineage) gets a flagged copy, in JSON and binary; the
 * others, before and after it, the event as it is. */
static bool match_incomplete(
	const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	if (*(const bool *) filter && lineage)
		lineage->incomplete_matched = true;
	return true;
}

static void test_lineage_incomplete_flag(void) {
	static const bool yes = true, no = false;
	struct perfrelay_open rec = make_open(42, 9, "/x"), got;
	DecodedEvent ev;
	HubClientOptions o[4] = {
		{ .format = HUB_FORMAT_JSON, .match = match_incomplete, .filter = &yes },
		{ .format = HUB_FORMAT_JSON, .match = match_incomplete, .filter = &no },
		{ .format = HUB_FORMAT_BINARY, .match = match_incomplete, .filter = &yes },
		{ .format = HUB_FORMAT_BINARY, .match = match_incomplete, .filter = &no },
	};
	HubClient *c[4];
	Peer p[4];
	Lineage l;
	Hub *h;

	rec.ids.exec_id = 0xc0;
	rec.ids.parent_exec_id = 0xbeef;
	ev = decode(&rec, sizeof(rec));
	ASSERT(hub_new(1, &h) == 0);
	for (unsigned i = 0; i < 4; i++) {
		o[i].queue_bytes = 1 << 20;
		peer_open(&p[i]);
		ASSERT(hub_client_new(h, p[i].fds[0], &o[i], &c[i]) == 0 && hub_client_attach(h, c[i]) == 0);
	}
	lineage_init(&l, hub_procs(h), &ev, NULL, NULL);
	hub_reader_begin(h, 0);
	hub_publish(h, 0, &ev, NULL, &l);
	hub_reader_end(h, 0);
	for (unsigned i = 0; i < 4; i++)
		pump(c[i], &p[i]);
	for (unsigned i = 0; i < 2; i++) {
		json_object *j, *v;

		p[i].buf[p[i].len - 1] = 0;
		j = json_tokener_parse((char *) p[i].buf);
		ASSERT(j && json_object_object_get_ex(j, "path", &v));
		ASSERT(json_object_object_get_ex(j, "lineage_incomplete", &v) == (i == 0));
		ASSERT(i != 0 || json_object_get_boolean(v));
		json_object_put(j);
	}
	for (unsigned i = 2; i < 4; i++) {
		ASSERT(p[i].len == 4 + sizeof(rec));
		memcpy(&got, p[i].buf + 4, sizeof(got)); /* the frame's record is not aligned */
		ASSERT(got.hdr.flags == (i == 2 ? PERFRELAY_HDR_LINEAGE_INCOMPLETE : 0));
		got.hdr.flags = 0;
		ASSERT(memcmp(&got, &rec, sizeof(rec)) == 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		hub_client_detach(h, c[i]);
		hub_client_free(c[i]);
		peer_close(&p[i]);
	}
	hub_free(h);
}

static void count_call(void *userdata) {
	(*(unsigned *) userdata)++;
}

/* Kernel-side demand: the union of the attached clients' types, told once per change, before
 * hub_client_attach() returns; a client that was never attached counts for nothing. */
static void test_demand(void) {
	const uint64_t exec = UINT64_C(1) << PERFRELAY_TYPE_EXEC, open = UINT64_C(1) << PERFRELAY_TYPE_OPEN;
	HubClientOptions a = { .format = HUB_FORMAT_JSON_TAGGED, .queue_bytes = 4096, .demand = exec | open },
			 b = { .format = HUB_FORMAT_JSON_TAGGED, .queue_bytes = 4096, .demand = open },
			 none = { .format = HUB_FORMAT_JSON_TAGGED, .queue_bytes = 4096 };
	HubClient *ca, *cb, *cn, *unattached;
	unsigned calls = 0;
	Hub *h;

	ASSERT(hub_new(2, &h) == 0);
	hub_set_demand_fn(h, count_call, &calls);
	ASSERT(hub_demand(h) == 0);
	ASSERT(hub_client_new(h, -EBADF, &a, &ca) == 0 && hub_client_attach(h, ca) == 0);
	ASSERT(hub_demand(h) == (exec | open) && calls == 1);
	ASSERT(hub_client_new(h, -EBADF, &b, &cb) == 0 && hub_client_attach(h, cb) == 0);
	ASSERT(hub_demand(h) == (exec | open) && calls == 1); /* nothing new: not told */
	ASSERT(hub_client_new(h, -EBADF, &none, &cn) == 0 && hub_client_attach(h, cn) == 0);
	ASSERT(calls == 1);
	hub_client_detach(h, ca);
	ASSERT(hub_demand(h) == open && calls == 2); /* exec lost its last client */
	hub_client_detach(h, ca);                    /* twice: counted once */
	ASSERT(hub_demand(h) == open && calls == 2);
	ASSERT(hub_client_new(h, -EBADF, &a, &unattached) == 0);
	hub_client_detach(h, unattached);
	ASSERT(hub_demand(h) == open && calls == 2);
	hub_client_detach(h, cb);
	ASSERT(hub_demand(h) == 0 && calls == 3);
	hub_client_detach(h, cn);
	ASSERT(calls == 3);
	hub_client_free(ca);
	hub_client_free(cb);
	hub_client_free(cn);
	hub_client_free(unattached);
	hub_free(h);
}

/* hub_client_consume() for the notice test: [0] events, [1] notices whose line is the notice. */
static void count_tagged(const HubFrame *f, void *userdata) {
	unsigned *n = userdata;

	if (f->notice)
		n[1] += f->type == PERFRELAY_TYPE_LOST && f->value == 0 && strstr(f->line, "\"kernel\":5");
	else
		n[0]++;
}

/* wants_types for the notice test: the one type in *filter. */
static bool wants_type(const void *filter, const uint16_t *types, size_t n, bool third_party) {
	for (size_t i = 0; i < n; i++)
		if (types[i] == *(const uint16_t *) filter)
			return true;
	return false;
}

/* Notices (hub_publish_notice()): published on the main thread's slot, offered to the clients
 * whose subscription takes one of their types, the redacted text to "uid" clients, as a JSON
 * line or a PERFRELAY_TYPE_LOST record of count 0 with the JSON behind the count; never an
 * event (offered = sent = the events alone). */
static void test_notices(void) {
	static const char full[] =
		"{\"type\":\"lost\",\"count\":0,\"kernel\":5,\"units\":[{\"unit\":\"a.service\"}]}";
	static const char red[] = "{\"type\":\"lost\",\"count\":0,\"kernel\":5,\"units\":[{}]}";
	const uint16_t open_type = PERFRELAY_TYPE_OPEN, exec_type = PERFRELAY_TYPE_EXEC;
	const uint16_t types[] = { PERFRELAY_TYPE_OPEN };
	HubNotice n = { .types = types,
			.n_types = 1,
			.json = full,
			.json_len = strlen(full),
			.json_redacted = red,
			.json_redacted_len = strlen(red) };
	HubNoticeStats st = {};
	Peer pj, pb, pr, pe;
	HubClient *cj, *cb, *cr, *ce;
	HubClientStats cs;
	struct perfrelay_open rec = make_open(1, 0, "/etc/hosts");
	DecodedEvent ev = decode(&rec, sizeof(rec));
	Hub *h;

	peer_open(&pj);
	peer_open(&pb);
	peer_open(&pr);
	peer_open(&pe);
	ASSERT(hub_new(2, &h) == 0 && hub_set_small_slots(h, 1) == 0);
	HubClientOptions oj = { .format = HUB_FORMAT_JSON,
				.queue_bytes = 1 << 20,
				.wants_types = wants_type,
				.filter = &open_type };
	HubClientOptions ob = oj, orr = oj, oe = oj;
	ob.format = HUB_FORMAT_BINARY;
	orr.redact = true;
	oe.filter = &exec_type;
	ASSERT(hub_client_new(h, pj.fds[0], &oj, &cj) == 0 && hub_client_attach(h, cj) == 0);
	ASSERT(hub_client_new(h, pb.fds[0], &ob, &cb) == 0 && hub_client_attach(h, cb) == 0);
	ASSERT(hub_client_new(h, pr.fds[0], &orr, &cr) == 0 && hub_client_attach(h, cr) == 0);
	ASSERT(hub_client_new(h, pe.fds[0], &oe, &ce) == 0 && hub_client_attach(h, ce) == 0);

	publish(h, &ev, NULL);
	hub_reader_begin(h, 1);
	hub_publish_notice(h, 1, &n, &st);
	hub_reader_end(h, 1);
	publish(h, &ev, NULL);
	ASSERT(st.delivered == 3 && st.dropped == 0); /* not the exec client's */
	pump(cj, &pj);
	pump(cb, &pb);
	pump(cr, &pr);
	pump(ce, &pe);

	pj.buf[pj.len] = '\0';
	pr.buf[pr.len] = '\0';
	ASSERT(strstr((char *) pj.buf, full) && !strstr((char *) pj.buf, red));
	ASSERT(strstr((char *) pr.buf, red) && !strstr((char *) pr.buf, "a.service"));
	pe.buf[pe.len] = '\0';
	ASSERT(!strstr((char *) pe.buf, "\"count\""));
	/* Binary: two events and the notice record, in some order of the two slots. */
	{
		size_t pos = 0, records = 0, notices = 0;

		while (pos + 4 + sizeof(struct perfrelay_hdr) <= pb.len) {
			struct perfrelay_hdr hdr;
			uint32_t len;
			uint64_t count;

			memcpy(&len, pb.buf + pos, 4);
			memcpy(&hdr, pb.buf + pos + 4, sizeof(hdr));
			ASSERT(le32toh(len) == hdr.size);
			if (hdr.type == PERFRELAY_TYPE_LOST) {
				memcpy(&count, pb.buf + pos + 4 + sizeof(hdr), sizeof(count));
				ASSERT(count == 0 && hdr.size == sizeof(hdr) + 8 + strlen(full));
				ASSERT(memcmp(pb.buf + pos + 4 + sizeof(hdr) + 8, full, strlen(full)) == 0);
				notices++;
			} else
				records++;
			pos += 4 + le32toh(len);
		}
		ASSERT(pos == pb.len && records == 2 && notices == 1);
	}
	/* A consumer inside the daemon (the bus monitors) gets the notice as a frame of its own. */
	{
		HubClientOptions ot = oj;
		HubClient *ct;
		unsigned frames[2] = {};

		ot.format = HUB_FORMAT_JSON_TAGGED;
		ASSERT(hub_client_new(h, -EBADF, &ot, &ct) == 0 && hub_client_attach(h, ct) == 0);
		hub_reader_begin(h, 1);
		hub_publish_notice(h, 1, &n, &st);
		hub_reader_end(h, 1);
		hub_client_consume(ct, count_tagged, frames);
		ASSERT(frames[0] == 0 && frames[1] == 1); /* the notice, and no event */
		hub_client_get_stats(ct, &cs);
		ASSERT(cs.offered == 0 && cs.sent == 0);
		hub_client_detach(h, ct);
		hub_client_free(ct);
	}
	for (HubClient **c = (HubClient *[]){ cj, cb, cr, ce, NULL }; *c; c++) {
		hub_client_get_stats(*c, &cs);
		ASSERT(cs.offered == 2 && cs.sent == 2 && cs.dropped == 0);
		hub_client_detach(h, *c);
		hub_client_free(*c);
	}
	hub_free(h);
	peer_close(&pj);
	peer_close(&pb);
	peer_close(&pr);
	peer_close(&pe);
}

int main(void) {
	test_demand();
	test_formats();
	test_lineage_incomplete_flag();
	test_shared_schema_split();
	test_redacted_ancestors();
	test_lost_named_event();
	test_overflow(HUB_FORMAT_JSON);
	test_overflow(HUB_FORMAT_BINARY);
	test_disconnect();
	test_consume();
	test_notices();

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return EXIT_FAILURE;
	}
	printf("test-hub: all passed\n");
	return EXIT_SUCCESS;
}
