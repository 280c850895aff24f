/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Which events a subscriber receives: its subscription's filters and the access rule. Pure and
 * cheap: filter_match() runs on reader threads for every event and every client, so it neither
 * allocates nor takes locks, and scans at most SUBSCRIPTION_MAX_ENTRIES sorted entries. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "config/config.h"
#include "decode/decode.h"
#include "hub/proctable.h"
#include "hub/request.h"
#include "kernel/containers.h"

/* True if the primary group `gid` ((gid_t) -1: none) or one of `groups` is in `listed`. */
bool groups_include(gid_t gid, const gid_t *groups, size_t n_groups, const gid_t *listed, size_t n_listed);

/* The access rule of docs/protocol.md from a peer's credentials (uid, primary group or
 * (gid_t) -1, supplementary groups): root and members of a group of AllowGroups= or of
 * ControlGroups= (which act on every user's events, so see them) see every event, everybody
 * else only events that carry their own uid. The one rule for the socket and the bus. */
SubscriptionAccess filter_access(
	uid_t uid,
	gid_t gid,
	const gid_t *groups,
	size_t n_groups,
	const GroupList *allow,
	const GroupList *control);

/* True if the client with subscription s receives ev. `unit` is the unit of the event's cgroup,
 * or NULL if the event has no cgroup id or it belongs to no unit. `lineage` is the event's
 * (lineage_init()), walked only if an "ancestor" filter asks; NULL: no ancestors are known, and
 * such a filter matches nothing. */
bool filter_match_in(
	const Subscription *s,
	const DecodedEvent *ev,
	const char *unit,
	const Container *container,
	Lineage *lineage);
/* The same, for an event in no container. */
static inline bool
	filter_match(const Subscription *s, const DecodedEvent *ev, const char *unit, Lineage *lineage) {
	return filter_match_in(s, ev, unit, NULL, lineage);
}

/* Whether a "container" filter entry names container c: its name, its image, or its id (the
 * first 12 hex digits or more, or a machine's whole name). */
bool filter_container_named(const char *entry, const Container *c);

/* Whether subscription s takes records of any of `types` (n of them), or with third_party of any
 * third-party type: its type filter alone, for notices about those types (hub.h, HubNotice). */
bool filter_wants_types(const Subscription *s, const uint16_t *types, size_t n, bool third_party);
