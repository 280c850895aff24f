/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Socket clients on the shared path (docs/shared-ring.md): the ring set of a subscription,
 * found by what decides its bytes or made under MaxSharedRings= and MaxSharedRingsPerUid=,
 * joined by each client that asks the same, and freed by the last one to leave. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "hub/filter.h"
#include "base/log.h"
#include "api/server-internal.h"

static bool match_shared(const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	return filter_match_in(filter, ev, origin->unit, origin->container, lineage);
}

/* Everything that decides which bytes the ring holds; clients with the same key read the same
 * ring. The access class is part of it, so no client shares a ring with one that may see more. */
static int shared_key(const Subscription *sub, char **ret) {
	_cleanup_free_ char *filter = NULL;
	char *key;
	int r;

	r = subscription_to_json(sub, &filter);
	if (r < 0)
		return r;
	if (asprintf(
		    &key,
		    "%s units=%d access=%s uid=%" PRIu32 " %s",
		    subscription_format_to_string(sub->format),
		    sub->unit_frames && sub->format == SUBSCRIPTION_FORMAT_BINARY,
		    sub->access == SUBSCRIPTION_ACCESS_ALL ? "all" : "uid",
		    sub->access == SUBSCRIPTION_ACCESS_ALL ? 0 : sub->access_uid,
		    filter) < 0)
		return -ENOMEM;
	*ret = key;
	return 0;
}

static void shared_entry_free(SharedEntry *e) {
	Server *s = e->server;

	if (e->client) {
		hub_client_detach(s->hub, e->client);
		hub_client_free(e->client);
	}
	if (e->ring) {
		s->stats.shared_rings--;
		s->stats.shared_bytes -= shared_ring_bytes(e->ring);
	}
	if (e->charged > 0)
		users_release(s->users, e->creator, e->pooled, 0, e->charged);
	/* Its last member left: a client that keeps its mapping keeps no page of the daemon's. At
	 * shutdown the members read on what they had not read yet; a retired set's last member is
	 * a revoked client, which reads on what it had before the reload (its memory, once per
	 * revocation, is the one bounded by the administrator rather than a quota). */
	if (e->ring && !s->shutting_down && !e->retired) {
		int r = shared_ring_release(e->ring);

		if (r < 0)
			log_warning_errno(r, "Failed to free the memory of a shared ring set: %m");
	}
	shared_ring_free(e->ring);
	subscription_free(e->sub);
	free(e->key);
	LIST_REMOVE(entries, s->shared_entries, e);
	s->n_shared_entries--;
	free(e);
}

static size_t count_rings_of(const Server *s, uid_t uid) {
	size_t n = 0;

	LIST_FOREACH(entries, e, s->shared_entries)
		n += e->creator == uid;
	return n;
}

/* A ring set is memory the daemon holds for the uid that made it: its bytes are charged to that
 * uid (and its pool) like queue bytes, while it lives, or it is refused (-EDQUOT, *ret_refusal). */
static int shared_entry_new(
	Server *s,
	const Subscription *sub,
	char *key,
	uid_t creator,
	bool pooled,
	HubFlushFn flush,
	SharedEntry **ret,
	UsersRefusal *ret_refusal) {
	_cleanup_free_ char *k = key;
	UsersLimits limits = s->o.users;
	SharedEntry *e;
	HubClientOptions o;
	int r;

	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->server = s;
	e->key = TAKE_PTR(k);
	e->creator = creator;
	e->pooled = pooled;
	e->flush = flush;
	LIST_PREPEND(entries, s->shared_entries, e);
	s->n_shared_entries++;

	r = subscription_dup(sub, &e->sub);
	if (r >= 0)
		r = shared_ring_new(
			hub_n_slots(s->hub), hub_n_small_slots(s->hub), s->o.shared_ring_bytes, &e->ring);
	if (r < 0) {
		shared_entry_free(e);
		return r;
	}
	s->stats.shared_rings++;
	s->stats.shared_bytes += shared_ring_bytes(e->ring);
	r = users_charge(s->users, &limits, creator, pooled, 0, shared_ring_bytes(e->ring), ret_refusal);
	if (r < 0) {
		shared_entry_free(e);
		return r;
	}
	e->charged = shared_ring_bytes(e->ring);
	o = (HubClientOptions){
		.format = sub->format == SUBSCRIPTION_FORMAT_BINARY ? HUB_FORMAT_BINARY : HUB_FORMAT_JSON,
		.overflow = HUB_OVERFLOW_DROP,
		.unit_frames = sub->unit_frames && sub->format == SUBSCRIPTION_FORMAT_BINARY,
		.match = match_shared,
		.filter = e->sub,
		.userdata = e,
		.flush = flush,
		.shared = e->ring,
		.redact = sub->access != SUBSCRIPTION_ACCESS_ALL,
		.redact_uid = sub->access_uid,
		.demand = subscription_demand(sub),
	};
	r = hub_client_new(s->hub, -EBADF, &o, &e->client);
	if (r >= 0) {
		r = hub_client_attach(s->hub, e->client);
		if (r < 0)
			e->client = hub_client_free(e->client);
	}
	if (r < 0) {
		shared_entry_free(e);
		return r;
	}
	*ret = e;
	return 0;
}

int connection_join_shared(
	Connection *c, Subscription **sub, HubFlushFn flush, int ret_fds[2], char *extra, size_t extra_size) {
	Server *s = c->server;
	const ApiOptions *cfg = &s->o;
	_cleanup_free_ char *key = NULL;
	_cleanup_(shared_member_freep) SharedMember *m = NULL;
	_cleanup_close_ int ro = -EBADF;
	SharedEntry *e = NULL;
	UsersRefusal refusal;
	int r;

	/* on_overflow=disconnect asks to be closed at its first loss: the socket does that. */
	if (cfg->shared_ring_bytes == 0 || (*sub)->overflow != SUBSCRIPTION_OVERFLOW_DROP ||
	    hub_n_slots(s->hub) > PERFRELAY_SHARED_RINGS_MAX)
		return 0;
	r = shared_key(*sub, &key);
	if (r < 0)
		goto fallback;
	LIST_FOREACH(entries, i, s->shared_entries)
		if (!i->retired && streq(i->key, key)) {
			e = i;
			break;
		}
	if (!e) {
		if (s->n_shared_entries >= cfg->max_shared_rings ||
		    count_rings_of(s, c->cred.uid) >= cfg->max_shared_rings_per_uid) {
			log_debug(
				"Client %" PRIu64
				" (uid %u): no shared ring left (MaxSharedRings=%u, "
				"MaxSharedRingsPerUid=%u), serving it over the socket",
				c->id,
				(unsigned) c->cred.uid,
				cfg->max_shared_rings,
				cfg->max_shared_rings_per_uid);
			goto fallback;
		}
		r = shared_entry_new(s, *sub, TAKE_PTR(key), c->cred.uid, c->pooled, flush, &e, &refusal);
		if (r == -EDQUOT) {
			log_debug(
				"Client %" PRIu64
				" (uid %u): a shared ring would pass %s, serving it over the socket",
				c->id,
				(unsigned) c->cred.uid,
				users_refusal_to_string(refusal));
			goto fallback;
		}
		if (r < 0) {
			log_warning_errno(r, "Client %" PRIu64 ": failed to make a shared ring: %m", c->id);
			goto fallback;
		}
	}

	r = shared_member_new(e->ring, c->fd, &m);
	if (r >= 0)
		r = ro = shared_ring_open_readonly(e->ring);
	if (r >= 0) {
		hub_lock_all(s->hub);
		r = shared_ring_attach_locked(e->ring, m);
		hub_unlock_all(s->hub);
	}
	if (r < 0) {
		log_warning_errno(r, "Client %" PRIu64 ": failed to join a shared ring: %m", c->id);
		if (shared_ring_n_members(e->ring) == 0)
			shared_entry_free(e);
		goto fallback;
	}
	c->shared = e;
	c->member = TAKE_PTR(m);
	c->sub = TAKE_PTR(*sub);
	s->stats.pending--;
	s->stats.clients++;
	s->stats.shared_clients++;

	(void) snprintf(
		extra,
		extra_size,
		",\"shared\":{\"rings\":%u,\"bytes\":%" PRIu64 "}",
		shared_ring_n_slots(e->ring),
		shared_ring_bytes(e->ring));
	ret_fds[0] = TAKE_FD(ro);
	ret_fds[1] = shared_member_fd(c->member);
	return 1;

fallback:
	s->stats.shared_fallbacks++;
	return 0;
}

void connection_shared_stats(const Connection *c, HubClientStats *ret) {
	const HubClientStats *b = &c->shared_before;
	SharedMemberStats st;

	shared_member_get_stats(c->member, &st);
	*ret = (HubClientStats){
		.offered = b->offered + st.offered,
		.sent = b->sent + st.sent,
		.dropped = b->dropped + st.dropped,
		.queued = b->queued + st.offered,
	};
}

void connection_leave_shared(Connection *c, HubClientStats *ret) {
	Server *s = c->server;
	SharedEntry *e = c->shared;
	HubClientStats st;

	/* After this no writer touches the member. At shutdown, or from a retired ring set, what
	 * it has not read stays in its mapping for good: it is sent, not dropped. */
	hub_lock_all(s->hub);
	shared_ring_detach_locked(e->ring, c->member, s->shutting_down || e->retired);
	hub_unlock_all(s->hub);
	connection_shared_stats(c, &st);
	s->stats.gone_offered += st.offered;
	s->stats.gone_sent += st.sent;
	s->stats.gone_dropped += st.dropped;
	s->stats.shared_clients--;
	s->stats.clients--;
	if (ret)
		*ret = st;
	log_debug(
		"Client %" PRIu64 " left its shared ring: %" PRIu64 " events offered, %" PRIu64
		" sent, %" PRIu64 " dropped",
		c->id,
		st.offered,
		st.sent,
		st.dropped);
	c->member = shared_member_free(c->member);
	c->shared = NULL;
	if (shared_ring_n_members(e->ring) == 0)
		shared_entry_free(e);
}

int connection_shared_replace(SharedEntry *e, SharedEntry **ret) {
	char *key = strdup(e->key);

	if (!key)
		return -ENOMEM;
	/* A replacement, not one more: it takes over the old set's charge (the old set is never
	 * written again, and its pages go with its last member). */
	users_release(e->server->users, e->creator, e->pooled, 0, e->charged);
	e->charged = 0;
	return shared_entry_new(e->server, e->sub, key, e->creator, e->pooled, e->flush, ret, NULL);
}

int connection_move_shared(Connection *c, SharedEntry *to, char *line, size_t size, int *ret_ro) {
	Server *s = c->server;
	_cleanup_(shared_member_freep) SharedMember *m = NULL;
	_cleanup_close_ int ro = -EBADF;
	int r;

	r = shared_member_new(to->ring, c->fd, &m);
	if (r < 0)
		return r;
	ro = shared_ring_open_readonly(to->ring);
	if (ro < 0)
		return ro;
	/* Attached there at the head and detached here in one step under every slot lock: each
	 * event is in exactly one of the two sets for it, and what it has not read here stays
	 * readable (this set is never written again). */
	hub_lock_all(s->hub);
	r = shared_ring_attach_locked(to->ring, m);
	if (r >= 0)
		shared_ring_detach_locked(c->shared->ring, c->member, true);
	hub_unlock_all(s->hub);
	if (r < 0)
		return r;
	connection_shared_stats(c, &c->shared_before);
	shared_member_free(c->member);
	c->member = TAKE_PTR(m);
	c->shared = to;
	s->stats.shared_moved++;
	r = snprintf(
		line,
		size,
		"{\"type\":\"reshared\",\"shared\":{\"rings\":%u,\"bytes\":%" PRIu64 "}}\n",
		shared_ring_n_slots(to->ring),
		shared_ring_bytes(to->ring));
	if (r < 0 || (size_t) r >= size)
		return -ENOBUFS;
	*ret_ro = TAKE_FD(ro);
	return r;
}

void connection_shared_stop(SharedEntry *e) {
	hub_client_detach(e->server->hub, e->client);
	e->client = hub_client_free(e->client);
}
