/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of request.c: every field of a subscription request, its bounds, and the error
 * code and message of every way a request can be wrong. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json_c_version.h>

#include "event.h"
#include "macro.h"
#include "hub/request.h"

#include "unit-test.h"

static const RequestLimits limits = { .max_bytes = 65536, .max_depth = 8 };

static Subscription *parse_ok_limits(const char *text, const RequestLimits *l, int line) {
	Subscription *s = NULL;
	RequestError e = {};
	int r = request_parse(text, strlen(text), l, &s, &e);

	if (r < 0 || !s) {
		fprintf(stderr,
			"%s:%d: request_parse(%.200s) = %d (%s: %s), expected success\n",
			__FILE__,
			line,
			text,
			r,
			protocol_error_to_string(e.code),
			e.message);
		failures++;
		return NULL;
	}
	return s;
}
#define PARSE_OK(text) parse_ok_limits((text), &limits, __LINE__)

/* Expects failure with `code` and a message containing `needle`. */
static void parse_fail_limits(
	const char *text, size_t len, const RequestLimits *l, ProtocolError code, const char *needle, int line) {
	Subscription *s = NULL;
	RequestError e = {};
	int r = request_parse(text, len, l, &s, &e);

	if (r != -EINVAL || s || e.code != code || !strstr(e.message, needle)) {
		fprintf(stderr,
			"%s:%d: request_parse(%.200s) = %d (%s: \"%s\"), expected %s with \"%s\"\n",
			__FILE__,
			line,
			text,
			r,
			protocol_error_to_string(e.code),
			e.message,
			protocol_error_to_string(code),
			needle);
		failures++;
	}
	subscription_free(s);
}
#define PARSE_FAIL(text, code, needle) \
	parse_fail_limits((text), strlen(text), &limits, (code), (needle), __LINE__)

static void test_error_names(void) {
	ASSERT(streq(protocol_error_to_string(PROTOCOL_BAD_REQUEST), "bad-request"));
	ASSERT(streq(protocol_error_to_string(PROTOCOL_TOO_LARGE), "too-large"));
	ASSERT(streq(protocol_error_to_string(PROTOCOL_TOO_DEEP), "too-deep"));
	ASSERT(streq(protocol_error_to_string(PROTOCOL_TIMEOUT), "timeout"));
	ASSERT(streq(protocol_error_to_string(PROTOCOL_TOO_MANY_CLIENTS), "too-many-clients"));
	ASSERT(streq(protocol_error_to_string(PROTOCOL_FD_PASSED), "fd-passed"));
	ASSERT(streq(protocol_error_to_string(PROTOCOL_OVERFLOW), "overflow"));
	ASSERT(protocol_error_to_string(_PROTOCOL_ERROR_MAX) == NULL);
	ASSERT(protocol_error_to_string((ProtocolError) -1) == NULL);
}

static void test_empty(void) {
	Subscription *s = PARSE_OK("{}");

	if (s) {
		ASSERT(s->access == SUBSCRIPTION_ACCESS_NONE); /* the server decides */
		ASSERT(s->type_mask == 0 && s->n_types == 0 && s->n_pids == 0 && s->n_uids == 0);
		ASSERT(s->n_comms == 0 && s->n_units == 0);
		ASSERT(s->format == SUBSCRIPTION_FORMAT_JSON);
		ASSERT(s->overflow == SUBSCRIPTION_OVERFLOW_DROP);
		ASSERT(!subscription_wants_unit(s));
	}
	subscription_free(s);

	/* Whitespace around the object is fine, also a '\r' before the newline. */
	subscription_free(PARSE_OK("  { } \r"));
	s = PARSE_OK("{\"subscribe\":{}}");
	ASSERT(s && s->type_mask == 0);
	subscription_free(s);
	/* An empty list does not filter. */
	s = PARSE_OK("{\"subscribe\":{\"types\":[],\"pid\":[],\"uid\":[],\"comm\":[],\"unit\":[]}}");
	ASSERT(s && s->type_mask == 0 && s->n_types == 0 && s->n_pids == 0 && s->n_units == 0);
	subscription_free(s);
}

/* What a subscription makes the kernel produce (docs/pipeline.md, "Demand"). */
static void test_demand(void) {
	const uint64_t bit = 1;
	Subscription *s = PARSE_OK("{}");

	/* Every type but those sent only on request. */
	ASSERT(s && subscription_demand(s) == subscription_demand_all());
	ASSERT((subscription_demand_all() & (bit << PERFRELAY_TYPE_EXEC)) &&
	       (subscription_demand_all() & (bit << PERFRELAY_TYPE_CONNECT)));
	ASSERT(!(subscription_demand_all() & (bit << PERFRELAY_TYPE_COUNTERS)) &&
	       !(subscription_demand_all() & (bit << PERFRELAY_TYPE_PACKET)));
	subscription_free(s);
	s = PARSE_OK("{\"subscribe\":{\"types\":[\"open\",\"exec\"]}}");
	ASSERT(s && subscription_demand(s) == ((bit << PERFRELAY_TYPE_OPEN) | (bit << PERFRELAY_TYPE_EXEC)));
	subscription_free(s);
	/* Only a third-party type: no built-in probe is wanted. */
	s = PARSE_OK("{\"subscribe\":{\"types\":[65000]}}");
	ASSERT(s && subscription_demand(s) == 0);
	subscription_free(s);
}

static void test_full(void) {
	Subscription *s = PARSE_OK(
		"{\"subscribe\": {\"types\": [\"exec\", \"open\", 40000, 16, \"exec\", 33000],"
		" \"pid\": [30, 1, 4294967295, 1], \"uid\": [1000, 0],"
		" \"comm\": [\"bash\", \"sshd\", \"bash\"], \"unit\": [\"sshd.service\", \"user@1000.service\", \"sshd.service\"]},"
		" \"format\": \"binary\", \"on_overflow\": \"disconnect\"}");

	if (!s)
		return;
	ASSERT(s->type_mask == ((1ull << 1) | (1ull << 4) | (1ull << 16)));
	ASSERT(s->n_types == 2 && s->types[0] == 33000 && s->types[1] == 40000);
	ASSERT(s->n_pids == 3 && s->pids[0] == 1 && s->pids[1] == 30 && s->pids[2] == 4294967295u);
	ASSERT(s->n_uids == 2 && s->uids[0] == 0 && s->uids[1] == 1000);
	ASSERT(s->n_comms == 2 && streq(s->comms[0], "bash") && streq(s->comms[1], "sshd"));
	ASSERT(s->n_units == 2 && streq(s->units[0], "sshd.service") &&
	       streq(s->units[1], "user@1000.service"));
	ASSERT(subscription_wants_unit(s));
	ASSERT(s->format == SUBSCRIPTION_FORMAT_BINARY);
	ASSERT(s->overflow == SUBSCRIPTION_OVERFLOW_DISCONNECT);
	subscription_free(s);

	s = PARSE_OK("{\"format\":\"json\",\"on_overflow\":\"drop\"}");
	ASSERT(s && s->format == SUBSCRIPTION_FORMAT_JSON && s->overflow == SUBSCRIPTION_OVERFLOW_DROP);
	subscription_free(s);
	ASSERT(streq(subscription_format_to_string(SUBSCRIPTION_FORMAT_JSON), "json"));
	ASSERT(streq(subscription_format_to_string(SUBSCRIPTION_FORMAT_BINARY), "binary"));
}

static void test_type_names(void) {
	static const struct {
		const char *name;
		unsigned id;
	} t[] = { { "exec", 1 }, { "exit", 2 },    { "fork", 3 },
		  { "open", 4 }, { "connect", 5 }, { "bench", 16 } };
	char buf[128];

	for (size_t i = 0; i < ELEMENTSOF(t); i++) {
		Subscription *s;

		snprintf(buf, sizeof(buf), "{\"subscribe\":{\"types\":[\"%s\"]}}", t[i].name);
		s = PARSE_OK(buf);
		ASSERT(s && s->type_mask == 1ull << t[i].id && s->n_types == 0);
		subscription_free(s);
	}
	/* Numeric ids: the mask below 64, the list above; the bounds. */
	Subscription *s = PARSE_OK("{\"subscribe\":{\"types\":[1, 63, 64, 65535]}}");
	ASSERT(s && s->type_mask == ((1ull << 1) | (1ull << 63)));
	ASSERT(s && s->n_types == 2 && s->types[0] == 64 && s->types[1] == 65535);
	subscription_free(s);

	/* A name that is not built in names a third-party type (decoded from its producer's BTF). */
	s = PARSE_OK("{\"subscribe\":{\"types\":[\"exec\", \"my_rec\", \"exc\"]}}");
	ASSERT(s && s->type_mask == 1ull << PERFRELAY_TYPE_EXEC && s->n_type_names == 2);
	ASSERT(s && streq(s->type_names[0], "my_rec") && streq(s->type_names[1], "exc"));
	subscription_free(s);
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[\"EXEC\"]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.types[0]: unknown event type \"EXEC\" (did you mean \"exec\"?)");
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[\"no such\"]}}",
		PROTOCOL_BAD_REQUEST,
		"nor a third-party type name");
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[\"a123456789012345678901234567890123456789012345678901234567890123\"]}}",
		PROTOCOL_BAD_REQUEST,
		"nor a third-party type name");
	PARSE_FAIL("{\"subscribe\":{\"types\":[\"lost\"]}}", PROTOCOL_BAD_REQUEST, "unknown event type");
	PARSE_FAIL("{\"subscribe\":{\"types\":[\"unknown\"]}}", PROTOCOL_BAD_REQUEST, "unknown event type");
	PARSE_FAIL("{\"subscribe\":{\"types\":[\"exec\\u0000x\"]}}", PROTOCOL_BAD_REQUEST, "NUL");
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[0]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.types[0]: 0 is out of range (1..65535)");
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[\"exec\", 65536]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.types[1]: 65536 is out of range");
	PARSE_FAIL("{\"subscribe\":{\"types\":[-1]}}", PROTOCOL_BAD_REQUEST, "out of range");
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[1.5]}}",
		PROTOCOL_BAD_REQUEST,
		"expected a type name or a numeric type id");
	PARSE_FAIL("{\"subscribe\":{\"types\":[true]}}", PROTOCOL_BAD_REQUEST, "expected a type name");
	PARSE_FAIL("{\"subscribe\":{\"types\":[null]}}", PROTOCOL_BAD_REQUEST, "expected a type name");
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":\"exec\"}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.types: expected an array");
}

static void test_ids(void) {
	PARSE_FAIL(
		"{\"subscribe\":{\"pid\":[-1]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.pid[0]: -1 is out of range (0..4294967295)");
	PARSE_FAIL(
		"{\"subscribe\":{\"pid\":[1, 4294967296]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.pid[1]: 4294967296 is out of range");
	PARSE_FAIL(
		"{\"subscribe\":{\"uid\":[18446744073709551615]}}", PROTOCOL_BAD_REQUEST, "subscribe.uid[0]");
	/* json-c 0.18 (Debian 13) refuses the number itself in strict mode; 0.16 gives it to us. */
	PARSE_FAIL(
		"{\"subscribe\":{\"uid\":[99999999999999999999999]}}",
		PROTOCOL_BAD_REQUEST,
		JSON_C_VERSION_NUM >= (18 << 8) ? "number expected" : "subscribe.uid[0]");
	PARSE_FAIL("{\"subscribe\":{\"uid\":[-9223372036854775808]}}", PROTOCOL_BAD_REQUEST, "out of range");
	PARSE_FAIL(
		"{\"subscribe\":{\"pid\":[\"1\"]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.pid[0]: expected an integer");
	PARSE_FAIL("{\"subscribe\":{\"pid\":[1e3]}}", PROTOCOL_BAD_REQUEST, "expected an integer");
	PARSE_FAIL("{\"subscribe\":{\"pid\":[1.0]}}", PROTOCOL_BAD_REQUEST, "expected an integer");
	PARSE_FAIL("{\"subscribe\":{\"pid\":[[1]]}}", PROTOCOL_BAD_REQUEST, "expected an integer");
	PARSE_FAIL("{\"subscribe\":{\"pid\":1}}", PROTOCOL_BAD_REQUEST, "subscribe.pid: expected an array");
	PARSE_FAIL("{\"subscribe\":{\"uid\":{}}}", PROTOCOL_BAD_REQUEST, "subscribe.uid: expected an array");
	PARSE_FAIL("{\"subscribe\":{\"uid\":null}}", PROTOCOL_BAD_REQUEST, "subscribe.uid: expected an array");

	Subscription *s = PARSE_OK("{\"subscribe\":{\"pid\":[0, 4294967295],\"uid\":[5, 5, 5]}}");
	ASSERT(s && s->n_pids == 2 && s->pids[0] == 0 && s->pids[1] == 4294967295u);
	ASSERT(s && s->n_uids == 1 && s->uids[0] == 5);
	subscription_free(s);
}

/* A list of n entries made by fmt(i). */
static char *make_list(const char *key, size_t n, void (*entry)(char *buf, size_t size, size_t i)) {
	size_t size = 64 + n * 300;
	char *t = malloc(size), *p = t;

	if (!t)
		abort();
	p += sprintf(p, "{\"subscribe\":{\"%s\":[", key);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			*p++ = ',';
		entry(p, size - (size_t) (p - t), i);
		p += strlen(p);
	}
	strcpy(p, "]}}");
	return t;
}

static void pid_entry(char *buf, size_t size, size_t i) {
	snprintf(buf, size, "%zu", i + 100);
}

static void type_entry(char *buf, size_t size, size_t i) {
	snprintf(buf, size, "%zu", 40000 + i);
}

static void comm_entry(char *buf, size_t size, size_t i) {
	snprintf(buf, size, "\"c%zu\"", i);
}

static void unit_entry(char *buf, size_t size, size_t i) {
	snprintf(buf, size, "\"u%zu.service\"", i);
}

static void test_list_bounds(void) {
	static const struct {
		const char *key;
		void (*entry)(char *, size_t, size_t);
	} lists[] = { { "types", type_entry },
		      { "pid", pid_entry },
		      { "uid", pid_entry },
		      { "comm", comm_entry },
		      { "unit", unit_entry } };

	for (size_t k = 0; k < ELEMENTSOF(lists); k++) {
		_cleanup_free_ char *ok = make_list(lists[k].key, SUBSCRIPTION_MAX_ENTRIES, lists[k].entry);
		_cleanup_free_ char *bad = make_list(
			lists[k].key, SUBSCRIPTION_MAX_ENTRIES + 1, lists[k].entry);
		char needle[128];
		Subscription *s = PARSE_OK(ok);

		ASSERT(s &&
		       s->n_types + s->n_pids + s->n_uids + s->n_comms + s->n_units ==
			       SUBSCRIPTION_MAX_ENTRIES);
		subscription_free(s);
		snprintf(needle, sizeof(needle), "subscribe.%s: 65 entries, at most 64 are allowed", lists[k].key);
		PARSE_FAIL(bad, PROTOCOL_BAD_REQUEST, needle);
	}
}

static void test_comm(void) {
	Subscription *s = PARSE_OK("{\"subscribe\":{\"comm\":[\"123456789012345\", \"\", \"k\\u00e9\"]}}");

	ASSERT(s && s->n_comms == 3);
	ASSERT(s && streq(s->comms[0], "") && streq(s->comms[1], "123456789012345") &&
	       streq(s->comms[2], "k\xc3\xa9"));
	subscription_free(s);

	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":[\"1234567890123456\"]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.comm[0]: \"1234567890123456...\" is longer than 15 bytes");
	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":[\"a\\u0000b\"]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.comm[0]: contains a NUL");
	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":[1]}}", PROTOCOL_BAD_REQUEST, "subscribe.comm[0]: expected a string");
	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":\"bash\"}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.comm: expected an array");
}

static void test_unit(void) {
	char buf[600], name[300];
	Subscription *s;

	s = PARSE_OK(
		"{\"subscribe\":{\"unit\":[\"a.scope\", \"x@y.service\", \"dev-sda.device\", \"-.mount\", "
		"\"a.socket\", \"a.target\", \"a.swap\", \"a.timer\", \"a.path\", \"a.automount\", \"a\\\\x2d.service\"]}}");
	ASSERT(s && s->n_units == 11);
	subscription_free(s);

	/* 255 bytes is the longest unit name. */
	memset(name, 'a', 247);
	strcpy(name + 247, ".service");
	snprintf(buf, sizeof(buf), "{\"subscribe\":{\"unit\":[\"%s\"]}}", name);
	s = PARSE_OK(buf);
	ASSERT(s && s->n_units == 1 && strlen(s->units[0]) == 255);
	subscription_free(s);
	memset(name, 'a', 248);
	strcpy(name + 248, ".service");
	snprintf(buf, sizeof(buf), "{\"subscribe\":{\"unit\":[\"%s\"]}}", name);
	PARSE_FAIL(buf, PROTOCOL_BAD_REQUEST, "is longer than 255 bytes");

	PARSE_FAIL(
		"{\"subscribe\":{\"unit\":[\"sshd\"]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.unit[0]: \"sshd\" is not a unit events can belong to");
	PARSE_FAIL(
		"{\"subscribe\":{\"unit\":[\"system.slice\"]}}", PROTOCOL_BAD_REQUEST, "slices own no events");
	PARSE_FAIL("{\"subscribe\":{\"unit\":[\".service\"]}}", PROTOCOL_BAD_REQUEST, "is not a unit");
	PARSE_FAIL("{\"subscribe\":{\"unit\":[\"\"]}}", PROTOCOL_BAD_REQUEST, "is not a unit");
	PARSE_FAIL("{\"subscribe\":{\"unit\":[\"a b.service\"]}}", PROTOCOL_BAD_REQUEST, "is not a unit");
	PARSE_FAIL("{\"subscribe\":{\"unit\":[\"a/b.service\"]}}", PROTOCOL_BAD_REQUEST, "is not a unit");
	PARSE_FAIL("{\"subscribe\":{\"unit\":[\"@x.service\"]}}", PROTOCOL_BAD_REQUEST, "is not a unit");
	PARSE_FAIL("{\"subscribe\":{\"unit\":[\"a.service\\u0000\"]}}", PROTOCOL_BAD_REQUEST, "NUL");
	PARSE_FAIL(
		"{\"subscribe\":{\"unit\":[5]}}", PROTOCOL_BAD_REQUEST, "subscribe.unit[0]: expected a string");
}

static void test_enums(void) {
	PARSE_FAIL(
		"{\"format\":\"xml\"}",
		PROTOCOL_BAD_REQUEST,
		"format: \"xml\" is neither \"json\" nor \"binary\"");
	PARSE_FAIL("{\"format\":1}", PROTOCOL_BAD_REQUEST, "format: expected \"json\" or \"binary\"");
	PARSE_FAIL("{\"format\":null}", PROTOCOL_BAD_REQUEST, "format: expected");
	PARSE_FAIL("{\"format\":\"JSON\"}", PROTOCOL_BAD_REQUEST, "is neither");
	PARSE_FAIL(
		"{\"on_overflow\":\"block\"}",
		PROTOCOL_BAD_REQUEST,
		"on_overflow: \"block\" is neither \"drop\" nor \"disconnect\"");
	PARSE_FAIL("{\"on_overflow\":[]}", PROTOCOL_BAD_REQUEST, "on_overflow: expected");
}

static void test_where(void) {
	Subscription *s = PARSE_OK(
		"{\"subscribe\":{\"types\":[\"my_rec\"],\"where\":{\"pid\":42,\"delta\":-7,\"big\":18446744073709551615,"
		"\"comm\":\"bash\"}}}");

	ASSERT(s && s->n_where == 4);
	ASSERT(s && streq(s->where[0].field, "pid") && !s->where[0].is_string && !s->where[0].is_negative &&
	       s->where[0].value.u == 42);
	ASSERT(s && s->where[1].is_negative && s->where[1].value.i == -7);
	ASSERT(s && !s->where[2].is_negative && s->where[2].value.u == UINT64_MAX);
	ASSERT(s && s->where[3].is_string && s->where[3].string_len == 4 && streq(s->where[3].string, "bash"));
	subscription_free(s);

	PARSE_FAIL(
		"{\"subscribe\":{\"where\":[]}}", PROTOCOL_BAD_REQUEST, "subscribe.where: expected an object");
	PARSE_FAIL("{\"subscribe\":{\"where\":{}}}", PROTOCOL_BAD_REQUEST, "subscribe.where: no conditions");
	PARSE_FAIL(
		"{\"subscribe\":{\"where\":{\"x\":true}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.where.x: expected an integer or a string");
	PARSE_FAIL(
		"{\"subscribe\":{\"where\":{\"x\":null}}}",
		PROTOCOL_BAD_REQUEST,
		"expected an integer or a string");
	PARSE_FAIL("{\"subscribe\":{\"where\":{\"1x\":1}}}", PROTOCOL_BAD_REQUEST, "is not a field name");
	PARSE_FAIL(
		"{\"subscribe\":{\"where\":{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.where: more than 8 conditions");
	PARSE_FAIL(
		"{\"subscribe\":{\"where\":{\"x\":\"a\\u0000b\"}}}",
		PROTOCOL_BAD_REQUEST,
		"without NUL characters");
}

static void test_structure(void) {
	PARSE_FAIL(
		"{\"subscribe\":{\"types\":[\"exec\"]},\"extra\":1}",
		PROTOCOL_BAD_REQUEST,
		"unknown key \"extra\" (known: subscribe, format, on_overflow, units, shared, notices, after_cursor, since, "
		"until, cursors, follow)");
	PARSE_FAIL(
		"{\"subscribe\":{\"pids\":[1]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe: unknown key \"pids\" (known: types, pid, uid, comm, unit, container, ancestor, where, capture)");
	/* Control bytes the client quoted come back as '?': the message stays one line. */
	PARSE_FAIL(
		"{\"subscribe\":{\"pi\\nd\\u0001\":[1]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe: unknown key \"pi?d?\" (known: types, pid, uid, comm, unit, container, ancestor, where, capture)");
	PARSE_FAIL("{\"subscribe\":[]}", PROTOCOL_BAD_REQUEST, "subscribe: expected an object");
	PARSE_FAIL("{\"subscribe\":null}", PROTOCOL_BAD_REQUEST, "subscribe: expected an object");
	PARSE_FAIL("[]", PROTOCOL_BAD_REQUEST, "the request must be a JSON object");
	PARSE_FAIL("\"subscribe\"", PROTOCOL_BAD_REQUEST, "must be a JSON object");
	PARSE_FAIL("null", PROTOCOL_BAD_REQUEST, "");
	PARSE_FAIL("42", PROTOCOL_BAD_REQUEST, "not a complete JSON object");
	PARSE_FAIL("", PROTOCOL_BAD_REQUEST, "not a complete JSON object");
	PARSE_FAIL("   ", PROTOCOL_BAD_REQUEST, "not a complete JSON object");
	PARSE_FAIL("{\"subscribe\":", PROTOCOL_BAD_REQUEST, "not a complete JSON object");
	PARSE_FAIL("{bad", PROTOCOL_BAD_REQUEST, "malformed JSON at byte 1");
	PARSE_FAIL("{\"a\":1,}", PROTOCOL_BAD_REQUEST, "malformed JSON");
	PARSE_FAIL("{} {}", PROTOCOL_BAD_REQUEST, "malformed JSON");
	PARSE_FAIL("{}x", PROTOCOL_BAD_REQUEST, "malformed JSON");
	PARSE_FAIL("{\"subscribe\":{\"comm\":[\"\xff\"]}}", PROTOCOL_BAD_REQUEST, "malformed JSON");
	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":[\"ab\xc3\"]}}", PROTOCOL_BAD_REQUEST, "at byte 25: invalid utf-8");
	/* Raw UTF-8 in a string (json-c 0.18 refuses it in strict mode: handed to it escaped),
	 * a four-byte sequence too; the same bytes come out. */
	{
		Subscription *u = PARSE_OK("{\"subscribe\":{\"comm\":[\"caf\xc3\xa9\xf0\x9f\x98\x80\"]}}");

		ASSERT(u->n_comms == 1 && streq(u->comms[0], "caf\xc3\xa9\xf0\x9f\x98\x80"));
		subscription_free(u);
	}
	PARSE_FAIL("{\"subscribe\":{\xc3\xa9:1}}", PROTOCOL_BAD_REQUEST, "malformed JSON");
	/* A NUL byte inside the line is not the end of it. */
	parse_fail_limits("{}\0{}", 5, &limits, PROTOCOL_BAD_REQUEST, "malformed JSON", __LINE__);
	parse_fail_limits("{\"format\":\"json\0\"}", 18, &limits, PROTOCOL_BAD_REQUEST, "", __LINE__);
	/* The buffer need not be NUL-terminated: only len bytes are read. */
	{
		Subscription *s = NULL;
		RequestError e;

		ASSERT(request_parse("{}garbage", 2, &limits, &s, &e) == 0 && s);
		subscription_free(s);
	}
}

static void test_size(void) {
	RequestLimits l = { .max_bytes = 256, .max_depth = 8 };
	char buf[512];

	/* 255 bytes and the '\n' make 256: allowed; one more is too large. */
	memset(buf, ' ', sizeof(buf));
	buf[0] = '{';
	buf[254] = '}';
	buf[255] = '\0';
	Subscription *s = parse_ok_limits(buf, &l, __LINE__);
	subscription_free(s);
	buf[255] = ' ';
	parse_fail_limits(
		buf, 256, &l, PROTOCOL_TOO_LARGE, "longer than 256 bytes (MaxRequestBytes=)", __LINE__);
	/* Rejected before parsing: even garbage is "too-large", not "bad-request". */
	memset(buf, 'x', sizeof(buf));
	parse_fail_limits(buf, sizeof(buf), &l, PROTOCOL_TOO_LARGE, "MaxRequestBytes", __LINE__);
}

static void test_depth(void) {
	RequestLimits l3 = { .max_bytes = 65536, .max_depth = 3 };
	RequestLimits l2 = { .max_bytes = 65536, .max_depth = 2 };
	char deep[1024], *p = deep;

	/* Depth counts objects and arrays: the usual request is depth 3. */
	subscription_free(
		parse_ok_limits("{\"subscribe\":{\"pid\":[1,2]},\"format\":\"json\"}", &l3, __LINE__));
	parse_fail_limits(
		"{\"subscribe\":{\"pid\":[[1]]}}",
		strlen("{\"subscribe\":{\"pid\":[[1]]}}"),
		&l3,
		PROTOCOL_TOO_DEEP,
		"nested deeper than 3 levels (MaxJsonDepth=)",
		__LINE__);
	subscription_free(parse_ok_limits("{\"subscribe\":{}}", &l2, __LINE__));
	parse_fail_limits(
		"{\"subscribe\":{\"pid\":[]}}",
		strlen("{\"subscribe\":{\"pid\":[]}}"),
		&l2,
		PROTOCOL_TOO_DEEP,
		"deeper than 2",
		__LINE__);

	/* Far deeper than the limit: refused as too deep, wherever it is. */
	for (int i = 0; i < 200; i++)
		*p++ = '[';
	for (int i = 0; i < 200; i++)
		*p++ = ']';
	*p = '\0';
	PARSE_FAIL(deep, PROTOCOL_TOO_DEEP, "deeper than 8");
	snprintf(deep, sizeof(deep), "{\"subscribe\":{\"x\":[[[[[[[[[[[[1]]]]]]]]]]]]}}");
	PARSE_FAIL(deep, PROTOCOL_TOO_DEEP, "deeper than 8");
	/* Brackets in strings do not count. */
	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":[\"[[[[[[[[[[[[[[[[[[[[\"]}}",
		PROTOCOL_BAD_REQUEST,
		"longer than 15 bytes");
	PARSE_FAIL(
		"{\"subscribe\":{\"comm\":[\"\\\"[[[[[[[[[[[[[[[[[[[[\"]}}",
		PROTOCOL_BAD_REQUEST,
		"longer than 15 bytes");
	PARSE_FAIL("{'x[[[[[[[[[[[[':1}", PROTOCOL_BAD_REQUEST, "");
	/* Empty containers count as much as full ones. */
	PARSE_FAIL("{\"a\":[[[[[[[[]]]]]]]]}", PROTOCOL_TOO_DEEP, "deeper than 8");
	PARSE_FAIL("{\"a\":[[[[[[[]]]]]]]}", PROTOCOL_BAD_REQUEST, "unknown key");
	/* Exactly at the limit of 8 it parses (and fails on content). */
	PARSE_FAIL(
		"{\"subscribe\":{\"pid\":[[[[[[1]]]]]]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.pid[0]: expected an integer");
	PARSE_FAIL("{\"subscribe\":{\"pid\":[[[[[[[1]]]]]]]}}", PROTOCOL_TOO_DEEP, "deeper than 8");
}

/* The filter text of ListClients: the request's own terms, sorted as parsed, and parsed back
 * it is the same subscription. */
static void test_ancestor(void) {
	Subscription *s = PARSE_OK(
		"{\"subscribe\":{\"ancestor\":{\"comm\":[\"sshd\",\"cron\",\"sshd\"],"
		"\"exec_id\":[\"00000000000000ff\",\"0123456789abcdef\"],\"unit\":[\"sshd.service\"]}}}");

	ASSERT(s && subscription_has_ancestor(s));
	ASSERT(s && s->ancestor->n_comms == 2 && streq(s->ancestor->comms[0], "cron") &&
	       streq(s->ancestor->comms[1], "sshd"));
	ASSERT(s && s->ancestor->n_exec_ids == 2 && s->ancestor->exec_ids[0] == 0xff &&
	       s->ancestor->exec_ids[1] == UINT64_C(0x0123456789abcdef));
	ASSERT(s && s->ancestor->n_units == 1 && streq(s->ancestor->units[0], "sshd.service"));
	subscription_free(s);
	/* One kind is enough; no ancestor filter without one. */
	s = PARSE_OK("{\"subscribe\":{\"ancestor\":{\"comm\":[\"sshd\"]}}}");
	ASSERT(s && subscription_has_ancestor(s) && s->ancestor->n_exec_ids == 0);
	subscription_free(s);
	s = PARSE_OK("{\"subscribe\":{\"comm\":[\"sshd\"]}}");
	ASSERT(s && !subscription_has_ancestor(s));
	subscription_free(s);

	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor: names no process");
	PARSE_FAIL("{\"subscribe\":{\"ancestor\":{\"comm\":[]}}}", PROTOCOL_BAD_REQUEST, "names no process");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":[\"sshd\"]}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor: expected an object");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"pid\":[1]}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor: unknown key \"pid\" (known: comm, exec_id, unit, incomplete)");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"comm\":[\"sshd\"],\"incomplete\":1}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor.incomplete: expected true or false");
	s = PARSE_OK("{\"subscribe\":{\"ancestor\":{\"comm\":[\"sshd\"],\"incomplete\":true}}}");
	ASSERT(s && s->ancestor->incomplete);
	subscription_free(s);
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"comm\":[\"1234567890123456\"]}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor.comm[0]: \"1234567890123456...\" is longer than 15 bytes");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"unit\":[\"sshd\"]}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor.unit[0]: \"sshd\" is not a unit");
	/* exec ids as events spell them: 16 lower-case hex digits, not 0. */
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"exec_id\":[\"0123456789ABCDEF\"]}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor.exec_id[0]: \"0123456789ABCDEF\" is not an exec_id");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"exec_id\":[\"123\"]}}}",
		PROTOCOL_BAD_REQUEST,
		"is not an exec_id");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"exec_id\":[\"0000000000000000\"]}}}",
		PROTOCOL_BAD_REQUEST,
		"is not an exec_id");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"exec_id\":[\"00000000000000001\"]}}}",
		PROTOCOL_BAD_REQUEST,
		"is longer than 16 bytes");
	PARSE_FAIL(
		"{\"subscribe\":{\"ancestor\":{\"exec_id\":[255]}}}",
		PROTOCOL_BAD_REQUEST,
		"subscribe.ancestor.exec_id[0]: expected a string");
}

static void test_to_json(void) {
	static const struct {
		const char *request, *json;
	} cases[] = {
		{ "{}", "{}" },
		{ "{\"subscribe\":{\"types\":[],\"pid\":[]}}", "{}" },
		{ "{\"subscribe\":{\"types\":[\"open\",\"exec\",40000,63,16]}}",
		  "{\"types\":[\"exec\",\"open\",\"bench\",63,40000]}" },
		{ "{\"subscribe\":{\"unit\":[\"b.service\",\"a.scope\"],\"comm\":[\"x/y\",\"a\\\"b\"],"
		  "\"uid\":[4294967295,0],\"pid\":[2,1]}}",
		  "{\"pid\":[1,2],\"uid\":[0,4294967295],\"comm\":[\"a\\\"b\",\"x/y\"],\"unit\":[\"a.scope\",\"b.service\"]}" },
		{ "{\"subscribe\":{\"ancestor\":{\"unit\":[\"b.service\",\"a.scope\"],\"exec_id\":[\"ffffffffffffffff\","
		  "\"0000000000000001\"],\"comm\":[\"sshd\"]}}}",
		  "{\"ancestor\":{\"comm\":[\"sshd\"],\"exec_id\":[\"0000000000000001\",\"ffffffffffffffff\"],"
		  "\"unit\":[\"a.scope\",\"b.service\"]}}" },
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		Subscription *s = PARSE_OK(cases[i].request), *again;
		_cleanup_free_ char *json = NULL, *request = NULL, *json2 = NULL;

		if (!s)
			continue;
		ASSERT(subscription_to_json(s, &json) == 0);
		if (json && !streq(json, cases[i].json)) {
			fprintf(stderr,
				"%s:%d: subscription_to_json(%s) = %s, expected %s\n",
				__FILE__,
				__LINE__,
				cases[i].request,
				json,
				cases[i].json);
			failures++;
		}
		if (json && asprintf(&request, "{\"subscribe\":%s}", json) > 0) {
			again = PARSE_OK(request);
			ASSERT(again && subscription_to_json(again, &json2) == 0 && streq(json, json2));
			subscription_free(again);
		}
		subscription_free(s);
	}
}

/* The history's keys (docs/history.md). */
static void test_history(void) {
	Subscription *s;

	s = PARSE_OK("{}");
	if (s && (s->history || !s->follow)) {
		fprintf(stderr, "%s:%d: a live request is not the history's, and follows\n", __FILE__, __LINE__);
		failures++;
	}
	subscription_free(s);
	s = PARSE_OK("{\"cursors\":true,\"after_cursor\":\"h=00;s=1\",\"until\":1.5,\"follow\":false}");
	if (s &&
	    (!s->history || !s->cursors || s->follow || !s->has_after_cursor ||
	     strcmp(s->after_cursor, "h=00;s=1") || !s->has_until || s->until_ns != 1500000000 ||
	     s->has_since)) {
		fprintf(stderr, "%s:%d: the history's keys as given\n", __FILE__, __LINE__);
		failures++;
	}
	subscription_free(s);
	s = PARSE_OK("{\"since\":1700000000}");
	if (s && (!s->history || !s->follow || s->since_ns != 1700000000ull * 1000000000ull)) {
		fprintf(stderr, "%s:%d: since in ns\n", __FILE__, __LINE__);
		failures++;
	}
	subscription_free(s);
	PARSE_FAIL("{\"since\":1,\"after_cursor\":\"x\"}", PROTOCOL_BAD_REQUEST, "both say where to begin");
	PARSE_FAIL(
		"{\"since\":1,\"subscribe\":{\"container\":[\"web\"]}}",
		PROTOCOL_BAD_REQUEST,
		"does not know containers");
	s = PARSE_OK("{\"subscribe\":{\"container\":[\"web\",\"nginx:1.27\",\"web\"]}}");
	if (s && (s->n_containers != 2 || strcmp(s->containers[0], "nginx:1.27") != 0)) {
		fprintf(stderr, "%s:%d: containers sorted, unique\n", __FILE__, __LINE__);
		failures++;
	}
	subscription_free(s);
	PARSE_FAIL("{\"subscribe\":{\"container\":[\"\"]}}", PROTOCOL_BAD_REQUEST, "an empty name");
	PARSE_FAIL("{\"subscribe\":{\"container\":[\"a b\"]}}", PROTOCOL_BAD_REQUEST, "is no container");
	PARSE_FAIL("{\"since\":-1}", PROTOCOL_BAD_REQUEST, "\"since\" is out of range");
	PARSE_FAIL("{\"until\":\"now\"}", PROTOCOL_BAD_REQUEST, "\"until\" must be a number");
	PARSE_FAIL("{\"after_cursor\":\"\"}", PROTOCOL_BAD_REQUEST, "is not a cursor");
	PARSE_FAIL("{\"after_cursor\":1}", PROTOCOL_BAD_REQUEST, "must be a string");
	PARSE_FAIL("{\"cursors\":1}", PROTOCOL_BAD_REQUEST, "\"cursors\" must be true or false");
	PARSE_FAIL("{\"follow\":false,\"shared\":true}", PROTOCOL_BAD_REQUEST, "not with");
	/* Binary history streams are served (with cursor frames). */
	s = PARSE_OK("{\"cursors\":true,\"format\":\"binary\"}");
	ASSERT(s->history && s->cursors && s->format == SUBSCRIPTION_FORMAT_BINARY);
	subscription_free(s);
	{
		char big[SUBSCRIPTION_CURSOR_MAX + 40];

		snprintf(big, sizeof(big), "{\"after_cursor\":\"%0*d\"}", (int) SUBSCRIPTION_CURSOR_MAX, 0);
		PARSE_FAIL(big, PROTOCOL_BAD_REQUEST, "is not a cursor");
	}
}

int main(void) {
	test_history();
	test_to_json();
	test_error_names();
	test_empty();
	test_demand();
	test_full();
	test_type_names();
	test_ids();
	test_list_bounds();
	test_comm();
	test_unit();
	test_ancestor();
	test_enums();
	test_structure();
	test_where();
	test_size();
	test_depth();

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return EXIT_FAILURE;
	}
	printf("test-request: all passed\n");
	return EXIT_SUCCESS;
}
