/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Event filtering for subscribers, on the readers' hot path. */
#include <string.h>

#include "decode/btfrec.h"
#include "hub/filter.h"
#include "macro.h"

bool groups_include(gid_t gid, const gid_t *groups, size_t n_groups, const gid_t *listed, size_t n_listed) {
	for (size_t i = 0; i < n_listed; i++) {
		if (listed[i] == gid)
			return true;
		for (size_t k = 0; k < n_groups; k++)
			if (listed[i] == groups[k])
				return true;
	}
	return false;
}

SubscriptionAccess filter_access(
	uid_t uid,
	gid_t gid,
	const gid_t *groups,
	size_t n_groups,
	const GroupList *allow,
	const GroupList *control) {
	if (uid == 0 || groups_include(gid, groups, n_groups, allow->gids, allow->n) ||
	    groups_include(gid, groups, n_groups, control->gids, control->n))
		return SUBSCRIPTION_ACCESS_ALL;
	return SUBSCRIPTION_ACCESS_UID;
}

static bool u32_in(const uint32_t *a, size_t n, uint32_t v) {
	/* Sorted, at most 64 entries: a binary search is 6 steps. */
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (a[mid] == v)
			return true;
		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static bool u16_in(const uint16_t *a, size_t n, uint16_t v) {
	for (size_t i = 0; i < n && a[i] <= v; i++)
		if (a[i] == v)
			return true;
	return false;
}

static bool type_name_in(const Subscription *s, const DecodedEvent *ev) {
	const char *name;

	if (s->n_type_names == 0 || !ev->btf)
		return false;
	name = btfrec_name(ev->btf);
	for (size_t i = 0; i < s->n_type_names; i++)
		if (streq(s->type_names[i], name))
			return true;
	return false;
}

static bool where_one(const SubscriptionWhere *w, const BtfRecValue *v) {
	switch (v->kind) {
	case BTFREC_UINT:
		return !w->is_string && !w->is_negative && v->value.u == w->value.u;
	case BTFREC_INT:
		if (w->is_string)
			return false;
		return w->is_negative ? v->value.i == w->value.i :
					v->value.i >= 0 && (uint64_t) v->value.i == w->value.u;
	case BTFREC_ENUM:
		if (w->is_string)
			return v->enum_name && streq(v->enum_name, w->string);
		if (v->is_signed)
			return w->is_negative ? v->value.i == w->value.i :
						v->value.i >= 0 && (uint64_t) v->value.i == w->value.u;
		return !w->is_negative && v->value.u == w->value.u;
	case BTFREC_STRING:
		return w->is_string && v->len == w->string_len && memcmp(v->bytes, w->string, v->len) == 0;
	default:
		return false;
	}
}

/* Every condition names a top-level field of the event's decoder, and the record has that value. */
static bool where_match(const Subscription *s, const DecodedEvent *ev) {
	if (!ev->btf)
		return false;
	for (size_t i = 0; i < s->n_where; i++) {
		int step = btfrec_find_field(ev->btf, s->where[i].field);
		BtfRecValue v;

		if (step < 0)
			return false;
		btfrec_get(ev->btf, ev->record, (unsigned) step, &v);
		if (!where_one(&s->where[i], &v))
			return false;
	}
	return true;
}

static bool u64_in(const uint64_t *v, size_t n, uint64_t x) {
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

static bool comm_in(const char (*comms)[SUBSCRIPTION_COMM_MAX + 1], size_t n, const char *comm) {
	for (size_t i = 0; i < n; i++)
		if (strcmp(comms[i], comm) == 0)
			return true;
	return false;
}

static bool unit_in(char *const *units, size_t n, const char *unit) {
	for (size_t i = 0; unit && i < n; i++)
		if (strcmp(units[i], unit) == 0)
			return true;
	return false;
}

/* Whether one of the event's ancestors is a process the "ancestor" filter names (or, with
 * "incomplete", whether the walk could not reach the lineage's end, or, for "unit", an
 * ancestor's cgroup is not known: counted in the table's figures). The lineage is walked by the first filter
 * that asks, and kept for the others. */
static bool ancestor_match(const SubscriptionAncestor *s, Lineage *l) {
	uint64_t last_cgroup = 0;
	bool last_in = false, unit_unknown = false;

	if (!l)
		return false;
	lineage_walk(l);
	for (unsigned i = 0; i < l->n; i++) {
		const ProcEntry *a = &l->a[i];

		if (u64_in(s->exec_ids, s->n_exec_ids, a->exec_id) || comm_in(s->comms, s->n_comms, a->comm))
			return true;
		/* An ancestor the table learnt from an exec record (after it was pushed out) has no
		 * cgroup: whether it runs in a named unit cannot be told. */
		if (s->n_units > 0 && a->cgroup_id == 0)
			unit_unknown = true;
		if (s->n_units > 0 && a->cgroup_id != 0 && l->unit_of) {
			/* Ancestors mostly share cgroups: resolve each run once. */
			if (a->cgroup_id != last_cgroup) {
				last_cgroup = a->cgroup_id;
				last_in = unit_in(
					s->units, s->n_units, l->unit_of(l->unit_userdata, a->cgroup_id));
			}
			if (last_in)
				return true;
		}
	}
	if (s->incomplete && (!l->complete || unit_unknown) && l->table) {
		proc_table_count_incomplete(l->table);
		l->incomplete_matched = true;
		return true;
	}
	return false;
}

bool filter_wants_types(const Subscription *s, const uint16_t *types, size_t n, bool third_party) {
	if (s->type_mask == 0 && s->n_types == 0 && s->n_type_names == 0) {
		for (size_t i = 0; i < n; i++)
			if (!event_type_on_request(types[i]))
				return true;
		return third_party;
	}
	for (size_t i = 0; i < n; i++)
		if (types[i] < SUBSCRIPTION_TYPE_MASK_BITS ? s->type_mask & (UINT64_C(1) << types[i]) :
							     u16_in(s->types, s->n_types, types[i]))
			return true;
	if (!third_party)
		return false;
	if (s->n_type_names > 0)
		return true;
	for (size_t i = 0; i < s->n_types; i++)
		if (s->types[i] >= PERFRELAY_TYPE_THIRD_PARTY_MIN)
			return true;
	return false;
}

#define CONTAINER_ID_PREFIX_MIN 12u /* docker ps' short id */

bool filter_container_named(const char *entry, const Container *c) {
	const ContainerRef *ref = container_ref(c);
	const ContainerNames *n = container_names(c);
	size_t len = strlen(entry);

	if (streq(entry, ref->id) ||
	    (len >= CONTAINER_ID_PREFIX_MIN && ref->runtime != CONTAINER_NSPAWN &&
	     strncmp(ref->id, entry, len) == 0))
		return true;
	return n && ((n->name && streq(n->name, entry)) || (n->image && streq(n->image, entry)));
}

static bool container_in(char *const *entries, size_t n, const Container *c) {
	for (size_t i = 0; c && i < n; i++)
		if (filter_container_named(entries[i], c))
			return true;
	return false;
}

bool filter_match_in(
	const Subscription *s,
	const DecodedEvent *ev,
	const char *unit,
	const Container *container,
	Lineage *lineage) {
	uint16_t type = ev->hdr.type;

	switch (s->access) {
	case SUBSCRIPTION_ACCESS_ALL:
		break;
	case SUBSCRIPTION_ACCESS_UID:
		/* Both the real and the effective uid must be the client's: a set-uid program its
		 * user runs (sudo) acts as someone else; nor may it run set-gid or with file
		 * capabilities (non-dumpable: hidden from its user's /proc). Records of older
		 * probes have no euid. */
		if (!ev->has_uid || ev->uid != s->access_uid ||
		    (ev->has_euid && ev->euid != s->access_uid) || ev->privileged)
			return false;
		break;
	default:
		return false;
	}

	if (s->type_mask != 0 || s->n_types > 0 || s->n_type_names > 0) {
		if (type < SUBSCRIPTION_TYPE_MASK_BITS) {
			if (!(s->type_mask & (UINT64_C(1) << type)))
				return false;
		} else if (!u16_in(s->types, s->n_types, type) && !type_name_in(s, ev))
			return false;
	} else if (event_type_on_request(type))
		return false;
	if (s->n_captures > 0 && type == PERFRELAY_TYPE_PACKET &&
	    !u32_in(s->captures, s->n_captures, ev->capture_id))
		return false;
	if (s->n_where > 0 && !where_match(s, ev))
		return false;
	if (s->n_pids > 0 && (!ev->has_pid || !u32_in(s->pids, s->n_pids, ev->pid)))
		return false;
	if (s->n_uids > 0 && (!ev->has_uid || !u32_in(s->uids, s->n_uids, ev->uid)))
		return false;
	if (s->n_comms > 0 && (!ev->comm || !comm_in(s->comms, s->n_comms, ev->comm)))
		return false;
	if (s->n_units > 0 && !unit_in(s->units, s->n_units, unit))
		return false;
	if (s->n_containers > 0 && !container_in(s->containers, s->n_containers, container))
		return false;
	/* Last: the only test that may take more than a scan of the subscription. */
	if (s->ancestor && !ancestor_match(s->ancestor, lineage))
		return false;
	return true;
}
