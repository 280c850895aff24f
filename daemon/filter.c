/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Event filtering for subscribers, on the readers' hot path. */
#include <string.h>

#include "filter.h"

SubscriptionAccess filter_access(
	uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups, const gid_t *allowed, size_t n_allowed) {
	if (uid == 0)
		return SUBSCRIPTION_ACCESS_ALL;
	for (size_t i = 0; i < n_allowed; i++) {
		if (allowed[i] == gid)
			return SUBSCRIPTION_ACCESS_ALL;
		for (size_t k = 0; k < n_groups; k++)
			if (allowed[i] == groups[k])
				return SUBSCRIPTION_ACCESS_ALL;
	}
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

bool filter_match(const Subscription *s, const DecodedEvent *ev, const char *unit) {
	uint16_t type = ev->hdr.type;

	switch (s->access) {
	case SUBSCRIPTION_ACCESS_ALL:
		break;
	case SUBSCRIPTION_ACCESS_UID:
		if (!ev->has_uid || ev->uid != s->access_uid)
			return false;
		break;
	default:
		return false;
	}

	if (s->type_mask != 0 || s->n_types > 0) {
		if (type < SUBSCRIPTION_TYPE_MASK_BITS) {
			if (!(s->type_mask & (UINT64_C(1) << type)))
				return false;
		} else if (!u16_in(s->types, s->n_types, type))
			return false;
	}
	if (s->n_pids > 0 && (!ev->has_pid || !u32_in(s->pids, s->n_pids, ev->pid)))
		return false;
	if (s->n_uids > 0 && (!ev->has_uid || !u32_in(s->uids, s->n_uids, ev->uid)))
		return false;
	if (s->n_comms > 0) {
		bool found = false;

		if (!ev->comm)
			return false;
		for (size_t i = 0; i < s->n_comms && !found; i++)
			found = strcmp(s->comms[i], ev->comm) == 0;
		if (!found)
			return false;
	}
	if (s->n_units > 0) {
		bool found = false;

		if (!unit)
			return false;
		for (size_t i = 0; i < s->n_units && !found; i++)
			found = strcmp(s->units[i], unit) == 0;
		if (!found)
			return false;
	}
	return true;
}
