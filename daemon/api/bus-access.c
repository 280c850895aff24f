/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Who calls, and what they may see and do (docs/security.md): the sender's uid and groups, the
 * root and ControlGroups= checks of the methods that act, the access class of subscriptions,
 * and the a{sv} filters of Subscribe() and Snapshot(). Used by the bus's own objects and the
 * features'; calls nothing else of the bus. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/bus-internal.h"
#include "hub/filter.h"
#include "base/log.h"

uint64_t bus_now(Bus *b) {
	uint64_t t = 0;

	(void) sd_event_now(b->event, CLOCK_MONOTONIC, &t);
	return t;
}

int bus_sender_euid(sd_bus_message *message, uid_t *ret) {
	_cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
	int r;

	r = sd_bus_query_sender_creds(message, SD_BUS_CREDS_EUID | SD_BUS_CREDS_AUGMENT, &creds);
	if (r >= 0)
		r = sd_bus_creds_get_euid(creds, ret);
	return r;
}

/* Methods that change state need root. The bus policy says so too; this is the check that does
 * not depend on the policy file being installed right. No uid, no access. */
int bus_check_root(sd_bus_message *message, const char *what, sd_bus_error *error) {
	uid_t euid = (uid_t) -1; /* nobody until the bus says otherwise */
	int r;

	r = bus_sender_euid(message, &euid);
	if (r < 0) {
		log_debug_errno(
			r,
			"%s from %s: cannot determine the caller's uid (%m), refusing",
			what,
			strna(sd_bus_message_get_sender(message)));
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root; the caller's user id could not be determined",
			what);
	}
	if (euid != 0)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root (the caller is uid %u)",
			what,
			(unsigned) euid);
	return 0;
}

uid_t bus_viewer(sd_bus_message *message) {
	uid_t uid;

	return bus_sender_euid(message, &uid) >= 0 ? uid : BUS_VIEWER_NOBODY;
}

/* Reads one a{sv} filter value: an array of strings or of uint32 into a JSON array. */
static int read_filter_list(
	sd_bus_message *message, const char *key, char kind, json_object **ret, sd_bus_error *error) {
	_cleanup_(json_object_putp) json_object *a = json_object_new_array();
	const char *contents = NULL, *want = kind == 's' ? "as" : "au";
	char type;
	size_t n = 0;
	int r;

	if (!a)
		return -ENOMEM;
	r = sd_bus_message_peek_type(message, &type, &contents);
	if (r < 0)
		return r;
	if (type != 'v' || !contents || !streq(contents, want))
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_INVALID_ARGS,
			"filter \"%s\": expected a variant of type %s, "
			"got %s",
			key,
			want,
			strna(contents));
	r = sd_bus_message_enter_container(message, 'v', want);
	if (r >= 0)
		r = sd_bus_message_enter_container(message, 'a', want + 1);
	if (r < 0)
		return r;
	for (;;) {
		json_object *v;

		if (kind == 's') {
			const char *s;

			r = sd_bus_message_read(message, "s", &s);
			if (r <= 0)
				break;
			/* Types may be given by number too, as on the socket ("32768"). */
			if (streq(key, "types") && s[0] >= '0' && s[0] <= '9' &&
			    strspn(s, "0123456789") == strlen(s) && strlen(s) <= 10)
				v = json_object_new_int64(strtoll(s, NULL, 10));
			else
				v = json_object_new_string(s);
		} else {
			uint32_t u;

			r = sd_bus_message_read(message, "u", &u);
			if (r <= 0)
				break;
			v = json_object_new_int64(u);
		}
		if (!v || json_object_array_add(a, v) < 0) {
			json_object_put(v);
			return -ENOMEM;
		}
		/* Bounded before it is all copied; request_parse() names the limit. */
		if (++n > SUBSCRIPTION_MAX_ENTRIES)
			return sd_bus_error_setf(
				error,
				SD_BUS_ERROR_INVALID_ARGS,
				"filter \"%s\": more than %u entries",
				key,
				SUBSCRIPTION_MAX_ENTRIES);
	}
	if (r < 0)
		return r;
	r = sd_bus_message_exit_container(message);
	if (r >= 0)
		r = sd_bus_message_exit_container(message);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(a);
	return 0;
}

int bus_read_filter(
	Bus *b,
	sd_bus_message *message,
	BusFilterExtraFn extra,
	void *userdata,
	Subscription **ret,
	sd_bus_error *error) {
	_cleanup_(json_object_putp) json_object *root = json_object_new_object(),
						*sub = json_object_new_object(),
						*ancestor = json_object_new_object();
	RequestLimits limits = { .max_bytes = b->o.max_request_bytes, .max_depth = FILTER_JSON_DEPTH };
	RequestError e;
	const char *text;
	int r;

	if (!root || !sub || !ancestor)
		return -ENOMEM;
	r = sd_bus_message_enter_container(message, 'a', "{sv}");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_enter_container(message, 'e', "sv")) > 0) {
		json_object *list = NULL, *into = sub;
		const char *key;
		char kind;

		r = sd_bus_message_read(message, "s", &key);
		if (r < 0)
			return r;
		if (extra) {
			r = extra(message, key, userdata, error);
			if (r < 0)
				return r;
			if (r > 0) {
				r = sd_bus_message_exit_container(message);
				if (r < 0)
					return r;
				continue;
			}
		}
		if (streq(key, "types") || streq(key, "comm") || streq(key, "unit"))
			kind = 's';
		else if (streq(key, "pid") || streq(key, "uid"))
			kind = 'u';
		else if (streq(key, "ancestor_comm") || streq(key, "ancestor_exec_id") || streq(key, "ancestor_unit")) {
			/* The request's "ancestor": {"comm": [...], ...} */
			kind = 's';
			into = ancestor;
		} else
			return sd_bus_error_setf(
				error,
				SD_BUS_ERROR_INVALID_ARGS,
				"unknown filter \"%s\" (known: types as, pid au, uid au, comm as, unit as, "
				"ancestor_comm as, ancestor_exec_id as, ancestor_unit as)",
				key);
		r = read_filter_list(message, key, kind, &list, error);
		if (r < 0)
			return r;
		if (json_object_object_add(into, into == ancestor ? key + strlen("ancestor_") : key, list) <
		    0) {
			json_object_put(list);
			return -ENOMEM;
		}
		r = sd_bus_message_exit_container(message);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	r = sd_bus_message_exit_container(message);
	if (r < 0)
		return r;

	if (json_object_object_length(ancestor) > 0) {
		if (json_object_object_add(sub, "ancestor", ancestor) < 0)
			return -ENOMEM;
		ancestor = NULL; /* owned by sub now */
	}
	if (json_object_object_add(root, "subscribe", sub) < 0)
		return -ENOMEM;
	sub = NULL; /* owned by root now */
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
	if (!text)
		return -ENOMEM;
	r = request_parse(text, strlen(text), &limits, ret, &e);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "%s", e.message);
	return 0;
}

void bus_senders_free(Bus *b) {
	for (size_t i = 0; i < BUS_SENDERS_KEPT; i++) {
		free(b->senders[i].groups);
		b->senders[i].groups = NULL;
	}
}

/* Reads UnixUserID and UnixGroupIDs of a GetConnectionCredentials reply into *e. */
static int read_credentials(sd_bus_message *reply, BusSender *e) {
	bool have_uid = false;
	int r;

	r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *key, *contents = NULL;
		char type;

		r = sd_bus_message_read(reply, "s", &key);
		if (r >= 0)
			r = sd_bus_message_peek_type(reply, &type, &contents);
		if (r < 0)
			return r;
		if (streq(key, "UnixUserID") && contents && streq(contents, "u")) {
			uint32_t uid;

			r = sd_bus_message_read(reply, "v", "u", &uid);
			e->uid = (uid_t) uid;
			have_uid = true;
		} else if (streq(key, "UnixGroupIDs") && contents && streq(contents, "au")) {
			const void *a;
			size_t size;

			r = sd_bus_message_enter_container(reply, 'v', "au");
			if (r >= 0)
				r = sd_bus_message_read_array(reply, 'u', &a, &size);
			if (r >= 0) {
				free(e->groups);
				e->n_groups = size / sizeof(uint32_t);
				e->groups = memdup_array(a, e->n_groups, sizeof(gid_t)); /* gid_t is uint32_t */
				if (e->n_groups > 0 && !e->groups)
					return -ENOMEM;
				r = sd_bus_message_exit_container(reply);
			}
		} else
			r = sd_bus_message_skip(reply, "v");
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	if (r < 0)
		return r;
	return have_uid ? 0 : -ENODATA;
}

/* The sender's entry: kept from an earlier call, or asked of the bus now (its uid and groups as
 * the bus recorded them when it connected: SO_PEERCRED, SO_PEERGROUPS). */
static int sender_lookup(Bus *b, const char *sender, const BusSender **ret) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	BusSender *e;
	int r;

	if (!sender || strlen(sender) >= sizeof(e->name))
		return -EINVAL;
	for (size_t i = 0; i < BUS_SENDERS_KEPT; i++)
		if (streq(b->senders[i].name, sender)) {
			*ret = &b->senders[i];
			return 0;
		}
	r = sd_bus_call_method(
		b->bus,
		"org.freedesktop.DBus",
		"/org/freedesktop/DBus",
		"org.freedesktop.DBus",
		"GetConnectionCredentials",
		NULL,
		&reply,
		"s",
		sender);
	if (r < 0)
		return r;
	e = &b->senders[b->next_sender];
	free(e->groups);
	*e = (BusSender){};
	r = read_credentials(reply, e);
	if (r < 0) {
		free(e->groups);
		*e = (BusSender){};
		return r;
	}
	strcpy(e->name, sender);
	b->next_sender = (b->next_sender + 1) % BUS_SENDERS_KEPT;
	*ret = e;
	return 0;
}

/* The caller's supplementary groups as the bus recorded them when it connected (SO_PEERGROUPS,
 * "UnixGroupIDs" of GetConnectionCredentials; sd-bus does not ask for them). Returns the count,
 * 0 if the bus does not say, or a negative errno. */
int bus_sender_groups(Bus *b, const char *sender, gid_t **ret) {
	const BusSender *e;
	int r = sender_lookup(b, sender, &e);

	if (r < 0)
		return r;
	*ret = memdup_array(e->groups, e->n_groups, sizeof(gid_t));
	if (e->n_groups > 0 && !*ret)
		return -ENOMEM;
	return (int) MIN(e->n_groups, (size_t) INT32_MAX);
}

/* The caller's uid, what it may see (filter_access()), and whether one of its groups is in
 * ControlGroups=. The
 * uid and groups are what the bus recorded when the caller connected, never read from /proc, where
 * a caller that execs a set-uid or set-gid program right after its call could pass for someone
 * else. Without groups from the bus, no group applies (fail closed). */
static int sender_identity(
	Bus *b,
	sd_bus_message *message,
	const char *method,
	uid_t *ret_uid,
	SubscriptionAccess *ret_access,
	bool *ret_control,
	sd_bus_error *error) {
	const ApiOptions *c = &b->o;
	const char *sender = sd_bus_message_get_sender(message);
	const BusSender *e;
	int r;

	r = sender_lookup(b, sender, &e);
	if (r < 0) {
		log_debug_errno(
			r, "%s from %s: no credentials from the bus (%m), refusing", method, strna(sender));
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s: the caller's user id could not be determined",
			method);
	}
	_Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");
	*ret_uid = e->uid;
	*ret_access = filter_access(
		e->uid, (gid_t) -1, e->groups, e->n_groups, &c->allow_groups, &c->control_groups);
	*ret_control = groups_include(
		(gid_t) -1, e->groups, e->n_groups, c->control_groups.gids, c->control_groups.n);
	return 0;
}

/* Root, AllowGroups= and ControlGroups= members see everything, others their own uid, as on the
 * socket. */
int bus_sender_access(
	Bus *b, sd_bus_message *message, uid_t *ret_uid, SubscriptionAccess *ret_access, sd_bus_error *error) {
	bool control;

	return sender_identity(b, message, "Subscribe", ret_uid, ret_access, &control, error);
}

/* The uid's window, a free one, or one whose window is over; NULL when BUS_READERS_KEPT uids
 * read within the last second (the caller is then served unlimited). */
static BusReader *reader_for(Bus *b, uid_t uid, uint64_t now) {
	BusReader *over = NULL;

	for (size_t i = 0; i < b->n_readers; i++) {
		if (b->readers[i].uid == uid)
			return &b->readers[i];
		if (!over && ratelimit_window_over(&b->readers[i].rate, now))
			over = &b->readers[i];
	}
	if (!over && b->n_readers < BUS_READERS_KEPT)
		over = &b->readers[b->n_readers++];
	if (over)
		*over = (BusReader){ .uid = uid, .rate = { .interval = USEC_PER_SEC } };
	return over;
}

int bus_require_read(
	Bus *b,
	sd_bus_message *message,
	const char *method,
	uid_t *ret_uid,
	SubscriptionAccess *ret_access,
	sd_bus_error *error) {
	uint64_t now = bus_now(b);
	BusReader *rd;
	bool control;
	int r;

	r = sender_identity(b, message, method, ret_uid, ret_access, &control, error);
	if (r < 0 || *ret_uid == 0)
		return r;
	rd = reader_for(b, *ret_uid, now);
	if (!rd)
		return 0;
	if (ratelimit_window_over(&rd->rate, now))
		ratelimit_start(&rd->rate, now, BUS_READS_PER_SECOND);
	if (ratelimit_take(&rd->rate))
		return 0;
	b->reads_limited++;
	return sd_bus_error_setf(
		error,
		SD_BUS_ERROR_LIMITS_EXCEEDED,
		"%s: more than %u calls a second from this user; try again in a second",
		method,
		BUS_READS_PER_SECOND);
}

int bus_require_control(Bus *b, sd_bus_message *message, const char *method, uid_t *ret_uid, sd_bus_error *error) {
	SubscriptionAccess access;
	bool control;
	uid_t uid;
	int r;

	r = sender_identity(b, message, method, &uid, &access, &control, error);
	if (r < 0)
		return r;
	if (uid != 0 && !control)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root or a group of ControlGroups= (the caller is uid %u; AllowGroups= lets a "
			"group see events, not act)",
			method,
			(unsigned) uid);
	if (ret_uid)
		*ret_uid = uid;
	return 0;
}
