/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test of users.c: per-uid limits hold for every uid, root's included; the users' pool
 * (MaxClients=, MaxQueueBytes=) holds only what unprivileged uids charge, so that no number of
 * them crowds out root or a member of AllowGroups=; releases give back exactly what was taken. */

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/users.h"

#include "unit-test.h"

static const UsersLimits limits = {
	.max_clients = 4,
	.max_clients_per_uid = 2,
	.max_bytes = 1000,
	.max_bytes_per_uid = 600,
};

static void test_pool(void) {
	_cleanup_(users_freep) Users *u = NULL;
	UsersRefusal why;
	UsersStats st;

	ASSERT(users_new(&u) == 0);
	/* Two unprivileged uids fill the pool's clients (a user's subordinate uids are such). */
	for (uid_t uid = 1000; uid < 1002; uid++)
		for (unsigned i = 0; i < 2; i++)
			ASSERT(users_charge(u, &limits, uid, true, 1, 0, NULL) == 0);
	ASSERT(users_charge(u, &limits, 1002, true, 1, 0, &why) == -EDQUOT && why == USERS_CLIENTS);
	/* Outside the pool: root, and an AllowGroups= member; each within its own limits. */
	ASSERT(users_charge(u, &limits, 0, true, 2, 600, NULL) == 0); /* root is never pooled */
	ASSERT(users_charge(u, &limits, 0, false, 1, 0, &why) == -EDQUOT && why == USERS_CLIENTS_PER_UID);
	ASSERT(users_charge(u, &limits, 2000, false, 1, 600, NULL) == 0);
	ASSERT(users_charge(u, &limits, 2000, false, 0, 1, &why) == -EDQUOT && why == USERS_BYTES_PER_UID);
	users_get_stats(u, &st);
	ASSERT(st.clients == 7 && st.bytes == 1200 && st.pool_clients == 4 && st.pool_bytes == 0);
	ASSERT(st.uids == 4);

	/* Pool bytes: a uid's own limit first, then the pool's. */
	ASSERT(users_charge(u, &limits, 1000, true, 0, 600, NULL) == 0);
	ASSERT(users_charge(u, &limits, 1001, true, 0, 500, &why) == -EDQUOT && why == USERS_BYTES);
	ASSERT(users_charge(u, &limits, 1001, true, 0, 400, NULL) == 0);
	users_get_stats(u, &st);
	ASSERT(st.pool_bytes == 1000 && st.refused[USERS_BYTES] == 1 && st.refused[USERS_CLIENTS] == 1);

	/* Releases give back to the pool what was charged to it, and nothing else. */
	users_release(u, 2000, false, 1, 600);
	users_release(u, 0, false, 2, 600);
	users_get_stats(u, &st);
	ASSERT(st.pool_clients == 4 && st.pool_bytes == 1000 && st.uids == 2);
	users_release(u, 1000, true, 2, 600);
	users_release(u, 1001, true, 2, 400);
	users_get_stats(u, &st);
	ASSERT(st.clients == 0 && st.bytes == 0 && st.pool_clients == 0 && st.pool_bytes == 0 && st.uids == 0);
}

/* A double release is a bug of the caller's: it aborts (assertions are on in every build of the
 * project), rather than hiding the leak or the underflow it would cause. */
static void test_double_release_aborts(void) {
	int status = 0;
	pid_t pid = fork();

	ASSERT(pid >= 0);
	if (pid == 0) {
		Users *u = NULL;

		(void) !freopen("/dev/null", "w", stderr); /* the assertion's message is expected */
		if (users_new(&u) < 0 || users_charge(u, &limits, 1000, true, 1, 100, NULL) < 0)
			_exit(2);
		users_release(u, 1000, true, 1, 100);
		users_release(u, 1000, true, 1, 100);
		_exit(0);
	}
	ASSERT(waitpid(pid, &status, 0) == pid);
	ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

int main(void) {
	test_pool();
	test_double_release_aborts();
	return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
