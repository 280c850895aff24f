/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Per-user accounting (users.h). A few hundred uids at most hold anything (MaxClients=), so a
 * plain array searched linearly, on connect and subscribe only, is enough. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "api/users.h"

typedef struct UserCharge {
	uid_t uid;
	unsigned clients;
	uint64_t bytes;
} UserCharge;

struct Users {
	UserCharge *entries;
	size_t n, allocated;
	unsigned others_clients; /* the pool: unprivileged uids */
	uint64_t others_bytes;
	UsersStats stats;
};

int users_new(Users **ret) {
	Users *u = calloc(1, sizeof(*u));

	if (!u)
		return -ENOMEM;
	*ret = u;
	return 0;
}

Users *users_free(Users *u) {
	if (!u)
		return NULL;
	free(u->entries);
	free(u);
	return NULL;
}

static UserCharge *find(const Users *u, uid_t uid) {
	for (size_t i = 0; i < u->n; i++)
		if (u->entries[i].uid == uid)
			return &u->entries[i];
	return NULL;
}

int users_charge(
	Users *u,
	const UsersLimits *l,
	uid_t uid,
	bool pooled,
	unsigned clients,
	uint64_t bytes,
	UsersRefusal *ret_refusal) {
	UserCharge *c = find(u, uid);
	unsigned have_clients = c ? c->clients : 0;
	uint64_t have_bytes = c ? c->bytes : 0;
	int refusal = -1;

	pooled = pooled && uid != 0;
	if (have_clients + clients > l->max_clients_per_uid)
		refusal = USERS_CLIENTS_PER_UID;
	else if (have_bytes + bytes > l->max_bytes_per_uid)
		refusal = USERS_BYTES_PER_UID;
	else if (pooled && u->others_clients + clients > l->max_clients)
		refusal = USERS_CLIENTS;
	else if (pooled && u->others_bytes + bytes > l->max_bytes)
		refusal = USERS_BYTES;
	if (refusal >= 0) {
		u->stats.refused[refusal]++;
		if (ret_refusal)
			*ret_refusal = (UsersRefusal) refusal;
		return -EDQUOT;
	}
	if (!c) {
		if (u->n == u->allocated) {
			size_t n = u->allocated ? u->allocated * 2 : 16;
			UserCharge *e = reallocarray(u->entries, n, sizeof(*e));

			if (!e)
				return -ENOMEM;
			u->entries = e;
			u->allocated = n;
		}
		c = &u->entries[u->n++];
		*c = (UserCharge){ .uid = uid };
		u->stats.uids++;
	}
	c->clients += clients;
	c->bytes += bytes;
	if (pooled) {
		u->others_clients += clients;
		u->others_bytes += bytes;
	}
	u->stats.clients += clients;
	u->stats.bytes += bytes;
	if (u->stats.bytes > u->stats.bytes_max)
		u->stats.bytes_max = u->stats.bytes;
	return 0;
}

void users_release(Users *u, uid_t uid, bool pooled, unsigned clients, uint64_t bytes) {
	UserCharge *c;

	if (clients == 0 && bytes == 0)
		return;
	c = find(u, uid);
	/* Only what was charged comes back: more is a double release, a bug of the caller's
	 * bookkeeping. It aborts where assertions are on; elsewhere the counts stay clamped at 0. */
	assert(c && clients <= c->clients && bytes <= c->bytes);
	assert(!pooled || uid == 0 || (clients <= u->others_clients && bytes <= u->others_bytes));
	if (!c)
		return;
	clients = MIN(clients, c->clients);
	bytes = MIN(bytes, c->bytes);
	c->clients -= clients;
	c->bytes -= bytes;
	if (pooled && uid != 0) {
		u->others_clients -= MIN(clients, u->others_clients);
		u->others_bytes -= MIN(bytes, u->others_bytes);
	}
	u->stats.clients -= clients;
	u->stats.bytes -= bytes;
	if (c->clients == 0 && c->bytes == 0) {
		*c = u->entries[--u->n];
		u->stats.uids--;
	}
}

void users_get(const Users *u, uid_t uid, unsigned *ret_clients, uint64_t *ret_bytes) {
	const UserCharge *c = find(u, uid);

	*ret_clients = c ? c->clients : 0;
	*ret_bytes = c ? c->bytes : 0;
}

void users_get_stats(const Users *u, UsersStats *ret) {
	*ret = u->stats;
	ret->pool_clients = u->others_clients;
	ret->pool_bytes = u->others_bytes;
}

const char *users_refusal_to_string(UsersRefusal r) {
	static const char *const names[_USERS_REFUSAL_MAX] = {
		[USERS_CLIENTS] = "MaxClients=",
		[USERS_CLIENTS_PER_UID] = "MaxClientsPerUid=",
		[USERS_BYTES] = "MaxQueueBytes=",
		[USERS_BYTES_PER_UID] = "MaxQueueBytesPerUid=",
	};

	return r < _USERS_REFUSAL_MAX ? names[r] : "?";
}
