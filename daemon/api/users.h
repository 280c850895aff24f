/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What each user makes the daemon hold, across the event socket and the bus together (as
 * dbus-broker's user accounting charges every resource to its owner): connections and the bytes
 * of their event queues. A charge is refused when it would take the uid over its own limits
 * (MaxClientsPerUid=, MaxQueueBytesPerUid=) or the users together over theirs (MaxClients=,
 * MaxQueueBytes=). Those limits are the pool of unprivileged users: root's charges, and those
 * of the members of AllowGroups= and ControlGroups= (the exporter, admins), count against their
 * own per-uid limits only, so that no number of other uids (a user's subordinate uids make many
 * cheap) can lock them out. Main thread only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

typedef struct Users Users;

typedef struct UsersLimits {
	unsigned max_clients;         /* the pool's uids together */
	unsigned max_clients_per_uid; /* each uid, root too */
	uint64_t max_bytes;           /* queue and ring bytes, the pool's uids together */
	uint64_t max_bytes_per_uid;   /* queue and ring bytes, each uid, root too */
} UsersLimits;

typedef enum UsersRefusal {
	USERS_CLIENTS,         /* MaxClients= */
	USERS_CLIENTS_PER_UID, /* MaxClientsPerUid= */
	USERS_BYTES,           /* MaxQueueBytes= */
	USERS_BYTES_PER_UID,   /* MaxQueueBytesPerUid= */
	_USERS_REFUSAL_MAX,
} UsersRefusal;

typedef struct UsersStats {
	uint64_t refused[_USERS_REFUSAL_MAX];
	unsigned uids;         /* uids holding anything now */
	unsigned clients;      /* connections and bus monitors now, root's included */
	uint64_t bytes;        /* queue bytes charged now, root's included */
	uint64_t bytes_max;    /* the most charged at once */
	unsigned pool_clients; /* of those, the users' pool's (MaxClients=) */
	uint64_t pool_bytes;   /* and its bytes (MaxQueueBytes=) */
} UsersStats;

int users_new(Users **ret);
Users *users_free(Users *u);
DEFINE_TRIVIAL_CLEANUP_FUNC(Users *, users_free);

/* Charges `clients` connections and `bytes` of queues (or shared rings) to uid, and to the pool
 * of unprivileged users too if `pooled` (never for root): 0, or -EDQUOT with *ret_refusal (may
 * be NULL) saying which limit, and nothing charged; -ENOMEM. */
int users_charge(
	Users *u,
	const UsersLimits *l,
	uid_t uid,
	bool pooled,
	unsigned clients,
	uint64_t bytes,
	UsersRefusal *ret_refusal);
/* Gives back what users_charge() took (in any pieces, each with the `pooled` it was taken with).
 * Giving back more than was taken (a double release) fails an assertion. */
void users_release(Users *u, uid_t uid, bool pooled, unsigned clients, uint64_t bytes);
/* What uid holds now. */
void users_get(const Users *u, uid_t uid, unsigned *ret_clients, uint64_t *ret_bytes);
void users_get_stats(const Users *u, UsersStats *ret);
const char *users_refusal_to_string(UsersRefusal r); /* the config key, e.g. "MaxClientsPerUid=" */
