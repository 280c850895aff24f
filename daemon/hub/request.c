/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Parsing and validation of subscription requests: json-c does the syntax (with the depth
 * limit), this file checks every key, type and bound and names the field at fault. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "decode/decode.h"
#include "json-util.h"
#include "macro.h"
#include "hub/encode.h"
#include "hub/request.h"
#include "kernel/unitname.h"

static const char *const protocol_error_table[_PROTOCOL_ERROR_MAX] = {
	[PROTOCOL_OK] = "ok",
	[PROTOCOL_BAD_REQUEST] = "bad-request",
	[PROTOCOL_TOO_LARGE] = "too-large",
	[PROTOCOL_TOO_DEEP] = "too-deep",
	[PROTOCOL_TIMEOUT] = "timeout",
	[PROTOCOL_TOO_MANY_CLIENTS] = "too-many-clients",
	[PROTOCOL_FD_PASSED] = "fd-passed",
	[PROTOCOL_OVERFLOW] = "overflow",
	[PROTOCOL_ACCESS_REVOKED] = "access-revoked",
};

const char *protocol_error_to_string(ProtocolError e) {
	if ((unsigned) e >= ELEMENTSOF(protocol_error_table))
		return NULL;
	return protocol_error_table[e];
}

/* Client-supplied text quoted in messages is cut so that the message stays one short line. */
#define QUOTE_MAX 48

_printf_(3, 4) static int fail(RequestError *e, ProtocolError code, const char *fmt, ...) {
	va_list ap;

	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	/* Quoted client text may hold control bytes: the message stays one printable line,
	 * wherever it is shown or logged. */
	for (char *p = e->message; *p; p++)
		if ((unsigned char) *p < 0x20 || *p == 0x7f)
			*p = '?';
	return -EINVAL;
}

static int cmp_u32(const void *a, const void *b) {
	uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
	return (x > y) - (x < y);
}

static int cmp_u16(const void *a, const void *b) {
	uint16_t x = *(const uint16_t *) a, y = *(const uint16_t *) b;
	return (x > y) - (x < y);
}

static int cmp_comm(const void *a, const void *b) {
	return strcmp(a, b);
}

static int cmp_str_ptr(const void *a, const void *b) {
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Sorts and removes duplicates; returns the new count. */
static size_t sort_unique(
	void *base, size_t n, size_t size, int (*cmp)(const void *, const void *), void (*drop)(void *)) {
	uint8_t *b = base;
	size_t k = 0;

	if (n == 0)
		return 0;
	qsort(base, n, size, cmp);
	for (size_t i = 1; i < n; i++) {
		if (cmp(b + k * size, b + i * size) == 0) {
			if (drop)
				drop(b + i * size);
			continue;
		}
		k++;
		if (k != i)
			memcpy(b + k * size, b + i * size, size);
	}
	return k + 1;
}

static void drop_str_ptr(void *p) {
	free(*(char **) p);
}

/* The array under `key` of the subscribe object; NULL value is not allowed (wrong type). */
static int get_array(json_object *v, const char *key, RequestError *e, size_t *ret_n) {
	size_t n;

	if (!json_object_is_type(v, json_type_array))
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.%s: expected an array", key);
	n = json_object_array_length(v);
	if (n > SUBSCRIPTION_MAX_ENTRIES)
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.%s: %zu entries, at most %u are allowed",
			key,
			n,
			SUBSCRIPTION_MAX_ENTRIES);
	*ret_n = n;
	return 0;
}

/* An integer in 0..max; json-c keeps integers as int64 or, above INT64_MAX, as uint64. */
static int get_uint(
	json_object *v, const char *key, size_t i, uint64_t min, uint64_t max, RequestError *e, uint64_t *ret) {
	uint64_t u;

	if (!json_object_is_type(v, json_type_int))
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.%s[%zu]: expected an integer", key, i);
	if (json_object_get_int64(v) < 0)
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.%s[%zu]: %" PRId64 " is out of range (%" PRIu64 "..%" PRIu64 ")",
			key,
			i,
			json_object_get_int64(v),
			min,
			max);
	u = json_object_get_uint64(v);
	if (u < min || u > max)
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.%s[%zu]: %" PRIu64 " is out of range (%" PRIu64 "..%" PRIu64 ")",
			key,
			i,
			u,
			min,
			max);
	*ret = u;
	return 0;
}

/* A string without NUL bytes of 0..max bytes (json-c already checked it is UTF-8). */
static int get_string(
	json_object *v, const char *key, size_t i, size_t max, RequestError *e, const char **ret, size_t *ret_len) {
	const char *s;
	size_t len;

	if (!json_object_is_type(v, json_type_string))
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.%s[%zu]: expected a string", key, i);
	s = json_object_get_string(v);
	len = (size_t) json_object_get_string_len(v);
	if (strlen(s) != len)
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.%s[%zu]: contains a NUL character", key, i);
	if (len > max)
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.%s[%zu]: \"%.*s...\" is longer than %zu bytes",
			key,
			i,
			QUOTE_MAX,
			s,
			max);
	*ret = s;
	*ret_len = len;
	return 0;
}

static bool identifier_is_valid(const char *s, size_t max) {
	size_t n = strlen(s);

	if (n == 0 || n > max || !(isalpha((unsigned char) s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char) s[i]) || s[i] == '_'))
			return false;
	return true;
}

static int parse_types(Subscription *s, json_object *v, RequestError *e) {
	size_t n;
	int r;

	r = get_array(v, "types", e, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		json_object *t = json_object_array_get_idx(v, i);
		uint64_t id = 0;

		if (json_object_is_type(t, json_type_string)) {
			const char *name = json_object_get_string(t);

			if (strlen(name) != (size_t) json_object_get_string_len(t))
				return fail(
					e,
					PROTOCOL_BAD_REQUEST,
					"subscribe.types[%zu]: contains a NUL character",
					i);
			for (uint16_t k = 1; k < SUBSCRIPTION_TYPE_MASK_BITS; k++) {
				const char *known = event_type_to_string(k);

				if (known && streq(known, name)) {
					id = k;
					break;
				}
			}
			if (id == 0) {
				/* A built-in type's name spelled with other letter case ("EXEC"): a
				 * typo, not a third-party name. */
				const char *builtin = event_type_like(name);

				if (builtin)
					return fail(
						e,
						PROTOCOL_BAD_REQUEST,
						"subscribe.types[%zu]: unknown event type \"%.*s\" (did you mean "
						"\"%s\"?)",
						i,
						QUOTE_MAX,
						name,
						builtin);
				if (event_type_name_is_daemons(name))
					return fail(
						e,
						PROTOCOL_BAD_REQUEST,
						"subscribe.types[%zu]: unknown event type \"%s\" (a line the daemon "
						"makes, not an event type; third-party records without a decoder are "
						"selected by their numeric type id)",
						i,
						name);
				/* Not built in: the name of a third-party type, matched against the
				 * names in producers' BTF declarations as events arrive. */
				if (!identifier_is_valid(name, SUBSCRIPTION_NAME_MAX))
					return fail(
						e,
						PROTOCOL_BAD_REQUEST,
						"subscribe.types[%zu]: \"%.*s\" is neither a built-in type (exec, "
						"exit, fork, open, connect, bench, counters) nor a third-party type name (a C "
						"identifier of at most %u characters), nor a numeric type id",
						i,
						QUOTE_MAX,
						name,
						SUBSCRIPTION_NAME_MAX);
				if (s->n_type_names >= SUBSCRIPTION_MAX_ENTRIES)
					return fail(
						e,
						PROTOCOL_BAD_REQUEST,
						"subscribe.types: more than %u type names",
						SUBSCRIPTION_MAX_ENTRIES);
				strcpy(s->type_names[s->n_type_names++], name);
				continue;
			}
		} else if (json_object_is_type(t, json_type_int)) {
			r = get_uint(t, "types", i, 1, UINT16_MAX, e, &id);
			if (r < 0)
				return r;
		} else
			return fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe.types[%zu]: expected a type name or a numeric type id",
				i);

		if (id < SUBSCRIPTION_TYPE_MASK_BITS)
			s->type_mask |= UINT64_C(1) << id;
		else
			s->types[s->n_types++] = (uint16_t) id;
	}
	s->n_types = sort_unique(s->types, s->n_types, sizeof(s->types[0]), cmp_u16, NULL);
	return 0;
}

static int parse_ids(json_object *v, const char *key, uint32_t *ids, size_t *ret_n, RequestError *e) {
	size_t n;
	int r;

	r = get_array(v, key, e, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		uint64_t id;

		r = get_uint(json_object_array_get_idx(v, i), key, i, 0, UINT32_MAX, e, &id);
		if (r < 0)
			return r;
		ids[i] = (uint32_t) id;
	}
	*ret_n = sort_unique(ids, n, sizeof(ids[0]), cmp_u32, NULL);
	return 0;
}

/* A boolean value: true or false, else `message` (which names the key) fails the request. */
static int parse_bool(json_object *v, const char *message, RequestError *e, bool *ret) {
	if (!json_object_is_type(v, json_type_boolean))
		return fail(e, PROTOCOL_BAD_REQUEST, "%s", message);
	*ret = json_object_get_boolean(v);
	return 0;
}

/* A time of "since" or "until": seconds since the epoch, a fraction allowed, into ns. */
static int parse_time(json_object *v, const char *key, RequestError *e, uint64_t *ret) {
	double d;

	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return fail(e, PROTOCOL_BAD_REQUEST, "\"%s\" must be a number of seconds since the epoch", key);
	d = json_object_get_double(v);
	if (!(d >= 0) || d > 17179869184.0) /* 2514 */
		return fail(e, PROTOCOL_BAD_REQUEST, "\"%s\" is out of range (seconds since the epoch)", key);
	*ret = (uint64_t) (d * 1e9);
	return 0;
}

static int parse_cursor(json_object *v, Subscription *s, RequestError *e) {
	const char *c;
	size_t n;

	if (!json_object_is_type(v, json_type_string))
		return fail(
			e, PROTOCOL_BAD_REQUEST, "\"after_cursor\" must be a string (a cursor the daemon gave)");
	c = json_object_get_string(v);
	n = (size_t) json_object_get_string_len(v);
	if (n == 0 || n >= sizeof(s->after_cursor) || memchr(c, '\0', n))
		return fail(e, PROTOCOL_BAD_REQUEST, "\"after_cursor\" is not a cursor (its length)");
	memcpy(s->after_cursor, c, n + 1);
	s->has_after_cursor = true;
	return 0;
}

static int parse_comms(
	json_object *v,
	const char *key,
	char (*comms)[SUBSCRIPTION_COMM_MAX + 1],
	size_t *ret_n,
	RequestError *e) {
	size_t n;
	int r;

	r = get_array(v, key, e, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		const char *c;
		size_t len;

		r = get_string(json_object_array_get_idx(v, i), key, i, SUBSCRIPTION_COMM_MAX, e, &c, &len);
		if (r < 0)
			return r;
		memcpy(comms[i], c, len + 1);
	}
	*ret_n = sort_unique(comms, n, sizeof(comms[0]), cmp_comm, NULL);
	return 0;
}

/* Checks entry i of list `key` (s, len bytes): 0, or fail()'s error. */
typedef int (*StringCheckFn)(const char *key, size_t i, const char *s, size_t len, RequestError *e);

/* A list of strings of at most max bytes, each passing check, copied into out (sorted, unique). */
static int parse_strings(
	json_object *v,
	const char *key,
	size_t max,
	StringCheckFn check,
	char **out,
	size_t *ret_n,
	RequestError *e) {
	size_t n;
	int r;

	r = get_array(v, key, e, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		const char *s;
		size_t len;

		r = get_string(json_object_array_get_idx(v, i), key, i, max, e, &s, &len);
		if (r < 0)
			return r;
		r = check(key, i, s, len, e);
		if (r < 0)
			return r;
		out[*ret_n] = strdup(s);
		if (!out[*ret_n])
			return -ENOMEM;
		(*ret_n)++;
	}
	*ret_n = sort_unique(out, *ret_n, sizeof(out[0]), cmp_str_ptr, drop_str_ptr);
	return 0;
}

static int check_unit(const char *key, size_t i, const char *u, size_t len, RequestError *e) {
	if (!unit_name_is_attributable(u, len))
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.%s[%zu]: \"%.*s\" is not a unit events can belong to (a name "
			"like sshd.service or session-1.scope; slices own no events)",
			key,
			i,
			QUOTE_MAX,
			u);
	return 0;
}

static int parse_units(json_object *v, const char *key, char **units, size_t *ret_n, RequestError *e) {
	return parse_strings(v, key, SUBSCRIPTION_UNIT_MAX, check_unit, units, ret_n, e);
}

/* "container": names, images or ids of containers: printable, without a quote or backslash
 * (none of the runtimes allows one in a name), at most SUBSCRIPTION_CONTAINER_MAX bytes. */
static int check_container(const char *key, size_t i, const char *c, size_t len, RequestError *e) {
	if (len == 0)
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.%s[%zu]: an empty name", key, i);
	for (size_t k = 0; k < len; k++)
		if ((unsigned char) c[k] <= ' ' || c[k] == 0x7f || c[k] == '"' || c[k] == '\\')
			return fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe.%s[%zu]: \"%.*s\" is no container's name, image or id (a space, "
				"quote, backslash or control character at byte %zu)",
				key,
				i,
				QUOTE_MAX,
				c,
				k);
	return 0;
}

static int cmp_u64(const void *a, const void *b) {
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
	return (x > y) - (x < y);
}

/* exec ids as events show them: 16 lower-case hex digits, not all zero. */
static int parse_exec_ids(json_object *v, const char *key, uint64_t *ids, size_t *ret_n, RequestError *e) {
	size_t n;
	int r;

	r = get_array(v, key, e, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		const char *x;
		size_t len;
		uint64_t id = 0;

		r = get_string(json_object_array_get_idx(v, i), key, i, 16, e, &x, &len);
		if (r < 0)
			return r;
		for (size_t k = 0; k < len; k++) {
			char c = x[k];

			if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
				len = 0;
				break;
			}
			id = id << 4 | (uint64_t) (c <= '9' ? c - '0' : c - 'a' + 10);
		}
		if (len != 16 || id == 0)
			return fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe.%s[%zu]: \"%.*s\" is not an exec_id (16 lower-case hex digits, as "
				"events carry them)",
				key,
				i,
				QUOTE_MAX,
				x);
		ids[i] = id;
	}
	*ret_n = sort_unique(ids, n, sizeof(ids[0]), cmp_u64, NULL);
	return 0;
}

/* "ancestor": {"comm": [...], "exec_id": [...], "unit": [...]}, at least one of them, and
 * "incomplete": a boolean. */
static int parse_ancestor(Subscription *s, json_object *v, RequestError *e) {
	SubscriptionAncestor *a;
	int r = 0;

	if (!json_object_is_type(v, json_type_object))
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.ancestor: expected an object");
	if (!s->ancestor) {
		s->ancestor = calloc(1, sizeof(SubscriptionAncestor));
		if (!s->ancestor)
			return -ENOMEM;
	}
	a = s->ancestor;
	json_object_object_foreach(v, key, value) {
		if (streq(key, "comm"))
			r = parse_comms(value, "ancestor.comm", a->comms, &a->n_comms, e);
		else if (streq(key, "exec_id"))
			r = parse_exec_ids(value, "ancestor.exec_id", a->exec_ids, &a->n_exec_ids, e);
		else if (streq(key, "unit"))
			r = parse_units(value, "ancestor.unit", a->units, &a->n_units, e);
		else if (streq(key, "incomplete"))
			r = parse_bool(
				value,
				"subscribe.ancestor.incomplete: expected true or false",
				e,
				&a->incomplete);
		else
			r = fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe.ancestor: unknown key \"%.*s\" (known: comm, exec_id, unit, incomplete)",
				QUOTE_MAX,
				key);
		if (r < 0)
			return r;
	}
	if (a->n_comms + a->n_exec_ids + a->n_units == 0)
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.ancestor: names no process (give comm, exec_id or unit, each a non-empty "
			"array)");
	return 0;
}

/* "where": {"field": value, ...}, equality on integers and strings. */
static int parse_where(Subscription *s, json_object *v, RequestError *e) {
	if (!json_object_is_type(v, json_type_object))
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.where: expected an object of field names and values");
	if (json_object_object_length(v) == 0)
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe.where: no conditions");
	if ((size_t) json_object_object_length(v) > SUBSCRIPTION_MAX_WHERE)
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"subscribe.where: more than %u conditions",
			SUBSCRIPTION_MAX_WHERE);
	json_object_object_foreach(v, key, value) {
		SubscriptionWhere *w = &s->where[s->n_where];

		if (!identifier_is_valid(key, SUBSCRIPTION_NAME_MAX))
			return fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe.where: \"%.*s\" is not a field name (a C identifier of at most %u "
				"characters)",
				QUOTE_MAX,
				key,
				SUBSCRIPTION_NAME_MAX);
		*w = (SubscriptionWhere){};
		strcpy(w->field, key);
		if (json_object_is_type(value, json_type_string)) {
			size_t len = (size_t) json_object_get_string_len(value);
			const char *str = json_object_get_string(value);

			if (len > SUBSCRIPTION_WHERE_STRING_MAX || strlen(str) != len)
				return fail(
					e,
					PROTOCOL_BAD_REQUEST,
					"subscribe.where.%s: a string of at most %u bytes without NUL characters",
					w->field,
					SUBSCRIPTION_WHERE_STRING_MAX);
			w->is_string = true;
			memcpy(w->string, str, len);
			w->string_len = len;
		} else if (json_object_is_type(value, json_type_int)) {
			int64_t i = json_object_get_int64(value);

			if (i < 0) {
				w->is_negative = true;
				w->value.i = i;
			} else
				w->value.u = json_object_get_uint64(value);
		} else
			return fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe.where.%s: expected an integer or a string",
				w->field);
		s->n_where++;
	}
	return 0;
}

static int parse_subscribe(Subscription *s, json_object *sub, RequestError *e) {
	int r = 0;

	if (!json_object_is_type(sub, json_type_object))
		return fail(e, PROTOCOL_BAD_REQUEST, "subscribe: expected an object");

	json_object_object_foreach(sub, key, v) {
		if (streq(key, "types"))
			r = parse_types(s, v, e);
		else if (streq(key, "pid"))
			r = parse_ids(v, "pid", s->pids, &s->n_pids, e);
		else if (streq(key, "uid"))
			r = parse_ids(v, "uid", s->uids, &s->n_uids, e);
		else if (streq(key, "comm"))
			r = parse_comms(v, "comm", s->comms, &s->n_comms, e);
		else if (streq(key, "unit"))
			r = parse_units(v, "unit", s->units, &s->n_units, e);
		else if (streq(key, "container"))
			r = parse_strings(
				v,
				"container",
				SUBSCRIPTION_CONTAINER_MAX,
				check_container,
				s->containers,
				&s->n_containers,
				e);
		else if (streq(key, "ancestor"))
			r = parse_ancestor(s, v, e);
		else if (streq(key, "where"))
			r = parse_where(s, v, e);
		else if (streq(key, "capture"))
			r = parse_ids(v, "capture", s->captures, &s->n_captures, e);
		else
			r = fail(
				e,
				PROTOCOL_BAD_REQUEST,
				"subscribe: unknown key \"%.*s\" (known: types, pid, uid, comm, unit, container, "
				"ancestor, where, capture)",
				QUOTE_MAX,
				key);
		if (r < 0)
			return r;
	}
	return 0;
}

static int parse_enum(json_object *v, const char *key, const char *a, const char *b, RequestError *e, int *ret) {
	const char *s;

	if (!json_object_is_type(v, json_type_string))
		return fail(e, PROTOCOL_BAD_REQUEST, "%s: expected \"%s\" or \"%s\"", key, a, b);
	s = json_object_get_string(v);
	if (streq(s, a))
		*ret = 0;
	else if (streq(s, b))
		*ret = 1;
	else
		return fail(
			e,
			PROTOCOL_BAD_REQUEST,
			"%s: \"%.*s\" is neither \"%s\" nor \"%s\"",
			key,
			QUOTE_MAX,
			s,
			a,
			b);
	return 0;
}

/* The deepest nesting of objects and arrays in text, counting stops early once above `stop`.
 * Brackets inside strings do not count; json-c's lenient single-quoted strings are strings too. */
static unsigned nesting_depth(const char *text, size_t len, unsigned stop) {
	unsigned depth = 0, max = 0;
	char quote = 0;

	for (size_t i = 0; i < len; i++) {
		char c = text[i];

		if (quote) {
			if (c == '\\')
				i++;
			else if (c == quote)
				quote = 0;
		} else if (c == '"' || c == '\'')
			quote = c;
		else if (c == '{' || c == '[') {
			if (++depth > max && (max = depth) > stop)
				break;
		} else if ((c == '}' || c == ']') && depth > 0)
			depth--;
	}
	return max;
}

static bool only_whitespace(const char *s, size_t n) {
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

/* json-c 0.18 (Debian 13) takes a byte >= 0x80 in a string for a control character under
 * JSON_TOKENER_STRICT and refuses valid UTF-8 (json-c#892). A line with such bytes is checked
 * here as UTF-8 and handed to json-c with each sequence as a \u escape (a surrogate pair above
 * U+FFFF), which every json-c reads as the same string; outside a string an escape is as much
 * a syntax error as the byte was. *ret: NULL for a plain ASCII line; *ret_bad: where the UTF-8
 * is not valid (-EILSEQ). */
static int ascii_line(const char *text, size_t len, char **ret, size_t *ret_len, size_t *ret_bad) {
	const uint8_t *t = (const uint8_t *) text;
	size_t n = 0, k, plain = 0;
	char *out;

	*ret = NULL;
	while (plain < len && t[plain] < 0x80)
		plain++;
	if (plain == len)
		return 0;
	/* At most 12 bytes of escapes (a surrogate pair) for 4 bytes of UTF-8, 6 for 2 or 3. */
	out = malloc(len * 3 + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < len; i += k) {
		uint32_t cp;

		if (t[i] < 0x80) {
			out[n++] = (char) t[i];
			k = 1;
			continue;
		}
		k = encode_utf8_sequence_len(t + i, len - i);
		if (k == 0) {
			free(out);
			*ret_bad = i;
			return -EILSEQ;
		}
		cp = k == 2 ? (t[i] & 0x1fu) : k == 3 ? (t[i] & 0x0fu) : (t[i] & 0x07u);
		for (size_t j = 1; j < k; j++)
			cp = cp << 6 | (t[i + j] & 0x3fu);
		if (cp >= 0x10000) {
			cp -= 0x10000;
			n += (size_t) sprintf(
				out + n, "\\u%04x\\u%04x", 0xd800u + (cp >> 10), 0xdc00u + (cp & 0x3ffu));
		} else
			n += (size_t) sprintf(out + n, "\\u%04x", cp);
	}
	out[n] = 0;
	*ret = out;
	*ret_len = n;
	return 0;
}

int request_parse(
	const char *text, size_t len, const RequestLimits *limits, Subscription **ret, RequestError *ret_error) {
	_cleanup_free_ char *ascii = NULL;
	size_t ascii_len = 0, bad = 0;
	_cleanup_(json_tokener_freep) struct json_tokener *tok = NULL;
	_cleanup_(json_object_putp) json_object *root = NULL;
	_cleanup_(subscription_freep) Subscription *s = NULL;
	enum json_tokener_error je;
	RequestError e = { .code = PROTOCOL_BAD_REQUEST };
	int r;

	/* Before json-c sees a byte: the limit is what bounds the parser's work and memory. The
	 * line's '\n' counts too. */
	if (len >= limits->max_bytes) {
		fail(&e,
		     PROTOCOL_TOO_LARGE,
		     "the request is longer than %zu bytes (MaxRequestBytes=)",
		     limits->max_bytes);
		*ret_error = e;
		return -EINVAL;
	}

	/* Our depth counts objects and arrays, so that a flat request is depth 1 whatever it
	 * holds. json-c counts every value as a level, scalars included, and lets an empty
	 * container one level deeper through: its limit is only the backstop that bounds the
	 * parser's stack, this scan is the rule. */
	if (nesting_depth(text, len, limits->max_depth) > limits->max_depth) {
		fail(&e,
		     PROTOCOL_TOO_DEEP,
		     "the request is nested deeper than %u levels (MaxJsonDepth=)",
		     limits->max_depth);
		*ret_error = e;
		return -EINVAL;
	}
	r = ascii_line(text, len, &ascii, &ascii_len, &bad);
	if (r == -EILSEQ) {
		fail(&e, PROTOCOL_BAD_REQUEST, "malformed JSON at byte %zu: invalid utf-8 string", bad);
		*ret_error = e;
		return -EINVAL;
	}
	if (r < 0)
		return r;
	if (ascii) {
		text = ascii;
		len = ascii_len;
	}
	tok = json_tokener_new_ex((int) limits->max_depth + 1);
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, text, (int) len);
	je = json_tokener_get_error(tok);
	if (!root || je != json_tokener_success) {
		if (je == json_tokener_error_depth)
			fail(&e,
			     PROTOCOL_TOO_DEEP,
			     "the request is nested deeper than %u levels (MaxJsonDepth=)",
			     limits->max_depth);
		else if (je == json_tokener_continue || je == json_tokener_success)
			fail(&e,
			     PROTOCOL_BAD_REQUEST,
			     "malformed JSON: the request line is not a complete JSON object");
		else
			fail(&e,
			     PROTOCOL_BAD_REQUEST,
			     "malformed JSON at byte %zu: %s",
			     json_tokener_get_parse_end(tok),
			     json_tokener_error_desc(je));
		*ret_error = e;
		return -EINVAL;
	}
	if (!only_whitespace(text + json_tokener_get_parse_end(tok), len - json_tokener_get_parse_end(tok))) {
		fail(&e,
		     PROTOCOL_BAD_REQUEST,
		     "malformed JSON: text after the request object at byte %zu",
		     json_tokener_get_parse_end(tok));
		*ret_error = e;
		return -EINVAL;
	}
	if (!json_object_is_type(root, json_type_object)) {
		fail(&e, PROTOCOL_BAD_REQUEST, "the request must be a JSON object");
		*ret_error = e;
		return -EINVAL;
	}

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->access = SUBSCRIPTION_ACCESS_NONE;
	s->follow = true;

	json_object_object_foreach(root, key, v) {
		int x;

		if (streq(key, "subscribe"))
			r = parse_subscribe(s, v, &e);
		else if (streq(key, "format")) {
			r = parse_enum(v, "format", "json", "binary", &e, &x);
			if (r >= 0)
				s->format = x ? SUBSCRIPTION_FORMAT_BINARY : SUBSCRIPTION_FORMAT_JSON;
		} else if (streq(key, "on_overflow")) {
			r = parse_enum(v, "on_overflow", "drop", "disconnect", &e, &x);
			if (r >= 0)
				s->overflow = x ? SUBSCRIPTION_OVERFLOW_DISCONNECT :
						  SUBSCRIPTION_OVERFLOW_DROP;
		} else if (streq(key, "units"))
			r = parse_bool(v, "\"units\" must be true or false", &e, &s->unit_frames);
		else if (streq(key, "shared"))
			r = parse_bool(v, "\"shared\" must be true or false", &e, &s->shared);
		else if (streq(key, "notices"))
			r = parse_bool(v, "\"notices\" must be true or false", &e, &s->notices);
		else if (streq(key, "cursors")) {
			r = parse_bool(v, "\"cursors\" must be true or false", &e, &s->cursors);
			s->history = true;
		} else if (streq(key, "follow")) {
			r = parse_bool(v, "\"follow\" must be true or false", &e, &s->follow);
			s->history = true;
		} else if (streq(key, "after_cursor")) {
			r = parse_cursor(v, s, &e);
			s->history = true;
		} else if (streq(key, "since")) {
			r = parse_time(v, "since", &e, &s->since_ns);
			s->has_since = s->history = true;
		} else if (streq(key, "until")) {
			r = parse_time(v, "until", &e, &s->until_ns);
			s->has_until = s->history = true;
		} else
			r = fail(
				&e,
				PROTOCOL_BAD_REQUEST,
				"unknown key \"%.*s\" (known: subscribe, format, on_overflow, units, shared, notices, "
				"after_cursor, since, until, cursors, follow)",
				QUOTE_MAX,
				key);
		if (r == -ENOMEM)
			return r;
		if (r < 0) {
			*ret_error = e;
			return r;
		}
	}

	if (s->history && s->shared) {
		fail(&e,
		     PROTOCOL_BAD_REQUEST,
		     "the history (after_cursor, since, until, cursors, follow) is served on the socket: "
		     "not with \"shared\"");
		*ret_error = e;
		return -EINVAL;
	}
	if (s->history && s->n_containers > 0) {
		/* The history keeps each record's unit, not its container (docs/containers.md). */
		fail(&e,
		     PROTOCOL_BAD_REQUEST,
		     "subscribe.container: the history (after_cursor, since, until, cursors, follow) "
		     "does not know containers; filter the live stream");
		*ret_error = e;
		return -EINVAL;
	}
	if (s->has_after_cursor && s->has_since) {
		fail(&e,
		     PROTOCOL_BAD_REQUEST,
		     "\"after_cursor\" and \"since\" both say where to begin: give one");
		*ret_error = e;
		return -EINVAL;
	}
	*ret = TAKE_PTR(s);
	return 0;
}
