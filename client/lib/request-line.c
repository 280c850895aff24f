/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The subscription request of libperfrelay: a struct perfrelay_subscription checked and written
 * as the protocol's JSON request line (docs/protocol.md). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "lib/request-line.h"

static int add_string_array(json_object *obj, const char *key, const char *const *v, size_t n, bool numbers) {
	json_object *a;

	if (n == 0)
		return 0;
	if (!v)
		return -EINVAL;
	a = json_object_new_array_ext((int) n);
	if (!a)
		return -ENOMEM;
	/* Added first so that `a` is freed with obj on any later failure. */
	if (json_object_object_add(obj, key, a) < 0) {
		json_object_put(a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		json_object *e = NULL;
		char *end;

		if (!v[i])
			return -EINVAL;
		/* Type ids travel as JSON integers, type names as strings. */
		if (numbers && v[i][0] >= '0' && v[i][0] <= '9') {
			unsigned long long id;

			errno = 0;
			id = strtoull(v[i], &end, 10);
			if (errno == 0 && *end == '\0' && id <= INT64_MAX)
				e = json_object_new_int64((int64_t) id);
		}
		if (!e)
			e = json_object_new_string(v[i]);
		if (!e)
			return -ENOMEM;
		if (json_object_array_add(a, e) < 0) {
			json_object_put(e);
			return -ENOMEM;
		}
	}
	return 0;
}

static int add_u32_array(json_object *obj, const char *key, const uint32_t *v, size_t n) {
	json_object *a;

	if (n == 0)
		return 0;
	if (!v)
		return -EINVAL;
	a = json_object_new_array_ext((int) n);
	if (!a)
		return -ENOMEM;
	if (json_object_object_add(obj, key, a) < 0) {
		json_object_put(a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_new_int64(v[i]);

		if (!e)
			return -ENOMEM;
		if (json_object_array_add(a, e) < 0) {
			json_object_put(e);
			return -ENOMEM;
		}
	}
	return 0;
}

static int add_string(json_object *obj, const char *key, const char *value) {
	json_object *s = json_object_new_string(value);

	if (!s)
		return -ENOMEM;
	if (json_object_object_add(obj, key, s) < 0) {
		json_object_put(s);
		return -ENOMEM;
	}
	return 0;
}

static int add_bool(json_object *obj, const char *key, bool value) {
	json_object *b = json_object_new_boolean(value);

	if (!b || json_object_object_add(obj, key, b) < 0) {
		json_object_put(b);
		return -ENOMEM;
	}
	return 0;
}

static int add_true(json_object *obj, const char *key) {
	return add_bool(obj, key, true);
}

/* Seconds with their fraction, as "since" and "until" take them: json-c writes 17 significant
 * digits, microseconds of a date in this century. */
static int add_double(json_object *obj, const char *key, double value) {
	json_object *d = json_object_new_double(value);

	if (!d || json_object_object_add(obj, key, d) < 0) {
		json_object_put(d);
		return -ENOMEM;
	}
	return 0;
}

/* The request line, '\n' included, in a string the caller frees. json-c does the escaping.
 * `containers` (perfrelay_client_set_containers()) go in as "container". */
int request_line_build(
	const struct perfrelay_subscription *sub,
	const char *const *containers,
	size_t n_containers,
	char **ret,
	size_t *ret_len) {
	_cleanup_(json_object_putp) json_object *req = NULL;
	json_object *filter;
	const char *text;
	size_t len;
	char *line;
	int r;

	req = json_object_new_object();
	if (!req)
		return -ENOMEM;
	filter = json_object_new_object();
	if (!filter)
		return -ENOMEM;
	if (json_object_object_add(req, "subscribe", filter) < 0) {
		json_object_put(filter);
		return -ENOMEM;
	}
	if ((r = add_string_array(filter, "types", sub->types, sub->n_types, true)) < 0 ||
	    (r = add_u32_array(filter, "pid", sub->pids, sub->n_pids)) < 0 ||
	    (r = add_u32_array(filter, "uid", sub->uids, sub->n_uids)) < 0 ||
	    (r = add_string_array(filter, "comm", sub->comms, sub->n_comms, false)) < 0 ||
	    (r = add_string_array(filter, "unit", sub->units, sub->n_units, false)) < 0 ||
	    (r = add_string_array(filter, "container", containers, n_containers, false)) < 0)
		return r;
	if (sub->n_ancestor_comms + sub->n_ancestor_exec_ids + sub->n_ancestor_units > 0) {
		json_object *ancestor = json_object_new_object();

		if (!ancestor)
			return -ENOMEM;
		if (json_object_object_add(filter, "ancestor", ancestor) < 0) {
			json_object_put(ancestor);
			return -ENOMEM;
		}
		if ((r = add_string_array(
			     ancestor, "comm", sub->ancestor_comms, sub->n_ancestor_comms, false)) < 0 ||
		    (r = add_string_array(
			     ancestor, "exec_id", sub->ancestor_exec_ids, sub->n_ancestor_exec_ids, false)) <
			    0 ||
		    (r = add_string_array(
			     ancestor, "unit", sub->ancestor_units, sub->n_ancestor_units, false)) < 0)
			return r;
		if ((sub->flags & PERFRELAY_SUBSCRIBE_ANCESTOR_INCOMPLETE) &&
		    (r = add_true(ancestor, "incomplete")) < 0)
			return r;
	}
	r = add_string(req, "format", sub->format == PERFRELAY_FORMAT_BINARY ? "binary" : "json");
	if (r < 0)
		return r;
	r = add_string(
		req, "on_overflow", sub->on_overflow == PERFRELAY_OVERFLOW_DISCONNECT ? "disconnect" : "drop");
	if (r < 0)
		return r;
	if ((sub->flags & PERFRELAY_SUBSCRIBE_UNITS) && (r = add_true(req, "units")) < 0)
		return r;
	if (sub->history) {
		const struct perfrelay_history *h = sub->history;

		if (h->after_cursor && (r = add_string(req, "after_cursor", h->after_cursor)) < 0)
			return r;
		if (h->since_ns && (r = add_double(req, "since", (double) h->since_ns / 1e9)) < 0)
			return r;
		if (h->until_ns && (r = add_double(req, "until", (double) h->until_ns / 1e9)) < 0)
			return r;
		if ((h->flags & PERFRELAY_HISTORY_CURSORS) && (r = add_true(req, "cursors")) < 0)
			return r;
		if ((r = add_bool(req, "follow", !(h->flags & PERFRELAY_HISTORY_NO_FOLLOW))) < 0)
			return r;
	}
	/* The shared path suits clients that lose their own events when slow; one that asked
	 * to be disconnected instead is served by the socket anyway. The history is not shared. */
	if (!sub->history && !(sub->flags & PERFRELAY_SUBSCRIBE_STREAM) &&
	    sub->on_overflow == PERFRELAY_OVERFLOW_DROP &&
	    ((r = add_true(req, "shared")) < 0 || (r = add_true(req, "notices")) < 0))
		return r;

	text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	line = malloc(len + 2);
	if (!line)
		return -ENOMEM;
	memcpy(line, text, len);
	line[len] = '\n';
	line[len + 1] = '\0';
	*ret = line;
	*ret_len = len + 1;
	return 0;
}

int request_line_check(const struct perfrelay_subscription *sub) {
	if (sub->format != PERFRELAY_FORMAT_JSON && sub->format != PERFRELAY_FORMAT_BINARY)
		return -EINVAL;
	if (sub->on_overflow != PERFRELAY_OVERFLOW_DROP && sub->on_overflow != PERFRELAY_OVERFLOW_DISCONNECT)
		return -EINVAL;
	if (sub->flags &
	    ~(uint64_t) (PERFRELAY_SUBSCRIBE_UNITS | PERFRELAY_SUBSCRIBE_STREAM | PERFRELAY_SUBSCRIBE_ANCESTOR_INCOMPLETE))
		return -EINVAL;
	if (sub->history) {
		const struct perfrelay_history *h = sub->history;

		if ((h->flags & ~(uint64_t) (PERFRELAY_HISTORY_CURSORS | PERFRELAY_HISTORY_NO_FOLLOW)) ||
		    (h->after_cursor && h->since_ns))
			return -EINVAL;
		for (size_t i = 0; i < ELEMENTSOF(h->reserved); i++)
			if (h->reserved[i] != 0)
				return -EINVAL;
	}
	return 0;
}
