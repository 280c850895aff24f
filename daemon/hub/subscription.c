/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Subscription value (request.h): freeing it, and its JSON form in the request's terms
 * (the Filter of D-Bus monitors and ListClients()). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "decode/decode.h"
#include "json-util.h"
#include "macro.h"
#include "hub/subscription.h"

const char *subscription_format_to_string(SubscriptionFormat f) {
	return f == SUBSCRIPTION_FORMAT_BINARY ? "binary" : "json";
}

static void subscription_ancestor_free(SubscriptionAncestor *a) {
	if (!a)
		return;
	for (size_t i = 0; i < a->n_units; i++)
		free(a->units[i]);
	free(a);
}

Subscription *subscription_free(Subscription *s) {
	if (!s)
		return NULL;
	for (size_t i = 0; i < s->n_units; i++)
		free(s->units[i]);
	for (size_t i = 0; i < s->n_containers; i++)
		free(s->containers[i]);
	subscription_ancestor_free(s->ancestor);
	free(s);
	return NULL;
}

int subscription_dup(const Subscription *s, Subscription **ret) {
	_cleanup_(subscription_freep) Subscription *d = malloc(sizeof(*d));

	if (!d)
		return -ENOMEM;
	*d = *s;
	d->n_units = 0;
	for (size_t i = 0; i < s->n_units; i++) {
		d->units[i] = strdup(s->units[i]);
		if (!d->units[i])
			return -ENOMEM;
		d->n_units++;
	}
	d->n_containers = 0;
	for (size_t i = 0; i < s->n_containers; i++) {
		d->containers[i] = strdup(s->containers[i]);
		if (!d->containers[i])
			return -ENOMEM;
		d->n_containers++;
	}
	d->ancestor = NULL;
	if (s->ancestor) {
		d->ancestor = malloc(sizeof(SubscriptionAncestor));
		if (!d->ancestor)
			return -ENOMEM;
		*d->ancestor = *s->ancestor;
		d->ancestor->n_units = 0;
		for (size_t i = 0; i < s->ancestor->n_units; i++) {
			d->ancestor->units[i] = strdup(s->ancestor->units[i]);
			if (!d->ancestor->units[i])
				return -ENOMEM;
			d->ancestor->n_units++;
		}
	}
	*ret = TAKE_PTR(d);
	return 0;
}

/* Adds `value` (consumed, also on failure) under key; -ENOMEM if it is NULL or cannot be added. */
static int object_add(json_object *o, const char *key, json_object *value) {
	if (!value)
		return -ENOMEM;
	if (json_object_object_add(o, key, value) < 0) {
		json_object_put(value);
		return -ENOMEM;
	}
	return 0;
}

static int array_add(json_object *a, json_object *value) {
	if (!value)
		return -ENOMEM;
	if (json_object_array_add(a, value) < 0) {
		json_object_put(value);
		return -ENOMEM;
	}
	return 0;
}

static json_object *types_to_json(const Subscription *s) {
	_cleanup_(json_object_putp) json_object *a = json_object_new_array();

	if (!a)
		return NULL;
	for (uint16_t t = 0; t < SUBSCRIPTION_TYPE_MASK_BITS; t++) {
		const char *name;

		if (!(s->type_mask & (UINT64_C(1) << t)))
			continue;
		name = event_type_to_string(t);
		if (array_add(a, name ? json_object_new_string(name) : json_object_new_int(t)) < 0)
			return NULL;
	}
	for (size_t i = 0; i < s->n_types; i++)
		if (array_add(a, json_object_new_int(s->types[i])) < 0)
			return NULL;
	for (size_t i = 0; i < s->n_type_names; i++)
		if (array_add(a, json_object_new_string(s->type_names[i])) < 0)
			return NULL;
	return TAKE_PTR(a);
}

static json_object *where_to_json(const Subscription *s) {
	_cleanup_(json_object_putp) json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	for (size_t i = 0; i < s->n_where; i++) {
		const SubscriptionWhere *w = &s->where[i];
		json_object *v = w->is_string ? json_object_new_string_len(w->string, (int) w->string_len) :
			w->is_negative        ? json_object_new_int64(w->value.i) :
						json_object_new_uint64(w->value.u);

		if (!v || json_object_object_add(o, w->field, v) < 0) {
			json_object_put(v);
			return NULL;
		}
	}
	return TAKE_PTR(o);
}

static json_object *ids_to_json(const uint32_t *ids, size_t n) {
	_cleanup_(json_object_putp) json_object *a = json_object_new_array();

	if (!a)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (array_add(a, json_object_new_int64(ids[i])) < 0)
			return NULL;
	return TAKE_PTR(a);
}

static json_object *comms_to_json(const char (*comms)[SUBSCRIPTION_COMM_MAX + 1], size_t n) {
	_cleanup_(json_object_putp) json_object *a = json_object_new_array();

	if (!a)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (array_add(a, json_object_new_string(comms[i])) < 0)
			return NULL;
	return TAKE_PTR(a);
}

static json_object *strings_to_json(char *const *v, size_t n) {
	_cleanup_(json_object_putp) json_object *a = json_object_new_array();

	if (!a)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (array_add(a, json_object_new_string(v[i])) < 0)
			return NULL;
	return TAKE_PTR(a);
}

static json_object *ancestor_to_json(const SubscriptionAncestor *anc) {
	_cleanup_(json_object_putp) json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	if (anc->n_comms > 0 && object_add(o, "comm", comms_to_json(anc->comms, anc->n_comms)) < 0)
		return NULL;
	if (anc->n_exec_ids > 0) {
		_cleanup_(json_object_putp) json_object *a = json_object_new_array();

		for (size_t i = 0; a && i < anc->n_exec_ids; i++) {
			char hex[17];

			snprintf(hex, sizeof(hex), "%016" PRIx64, anc->exec_ids[i]);
			if (array_add(a, json_object_new_string(hex)) < 0)
				return NULL;
		}
		if (object_add(o, "exec_id", TAKE_PTR(a)) < 0)
			return NULL;
	}
	if (anc->n_units > 0 && object_add(o, "unit", strings_to_json(anc->units, anc->n_units)) < 0)
		return NULL;
	if (anc->incomplete && object_add(o, "incomplete", json_object_new_boolean(true)) < 0)
		return NULL;
	return TAKE_PTR(o);
}

int subscription_to_json(const Subscription *s, char **ret) {
	_cleanup_(json_object_putp) json_object *o = json_object_new_object();
	const char *text;
	char *copy;

	if (!o)
		return -ENOMEM;
	if ((s->type_mask != 0 || s->n_types > 0 || s->n_type_names > 0) &&
	    object_add(o, "types", types_to_json(s)) < 0)
		return -ENOMEM;
	if (s->n_where > 0 && object_add(o, "where", where_to_json(s)) < 0)
		return -ENOMEM;
	if (s->n_pids > 0 && object_add(o, "pid", ids_to_json(s->pids, s->n_pids)) < 0)
		return -ENOMEM;
	if (s->n_uids > 0 && object_add(o, "uid", ids_to_json(s->uids, s->n_uids)) < 0)
		return -ENOMEM;
	if (s->n_captures > 0 && object_add(o, "capture", ids_to_json(s->captures, s->n_captures)) < 0)
		return -ENOMEM;
	if (s->n_comms > 0 && object_add(o, "comm", comms_to_json(s->comms, s->n_comms)) < 0)
		return -ENOMEM;
	if (s->n_units > 0 && object_add(o, "unit", strings_to_json(s->units, s->n_units)) < 0)
		return -ENOMEM;
	if (s->n_containers > 0 &&
	    object_add(o, "container", strings_to_json(s->containers, s->n_containers)) < 0)
		return -ENOMEM;
	if (subscription_has_ancestor(s) && object_add(o, "ancestor", ancestor_to_json(s->ancestor)) < 0)
		return -ENOMEM;
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text)
		return -ENOMEM;
	copy = strdup(text);
	if (!copy)
		return -ENOMEM;
	*ret = copy;
	return 0;
}

uint64_t subscription_demand(const Subscription *s) {
	if (s->type_mask != 0 || s->n_types > 0 || s->n_type_names > 0)
		return s->type_mask;
	return subscription_demand_all();
}

uint64_t subscription_demand_all(void) {
	uint64_t mask = 0;

	for (unsigned t = 0; t < SUBSCRIPTION_TYPE_MASK_BITS; t++)
		if (!event_type_on_request((uint16_t) t))
			mask |= UINT64_C(1) << t;
	return mask;
}
