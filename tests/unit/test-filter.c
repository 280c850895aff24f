/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of filter.c: every filter field alone and combined, events that lack a field,
 * and the access rule for root, allowed groups and everybody else. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/filter.h"
#include "macro.h"

#include "unit-test.h"

static Subscription *sub(const char *json, SubscriptionAccess access, uint32_t uid) {
	RequestLimits l = { .max_bytes = 65536, .max_depth = 8 };
	Subscription *s = NULL;
	RequestError e;

	if (request_parse(json, strlen(json), &l, &s, &e) < 0) {
		fprintf(stderr, "bad test request %s: %s\n", json, e.message);
		exit(EXIT_FAILURE);
	}
	s->access = access;
	s->access_uid = uid;
	return s;
}

static DecodedEvent event(uint16_t type, uint32_t pid, uint32_t uid, const char *comm) {
	return (DecodedEvent){
		.hdr = { .type = type },
		.known = type < 0x8000,
		.has_pid = true,
		.has_uid = true,
		.pid = pid,
		.uid = uid,
		.comm = comm,
	};
}

/* A third-party record: no pid, uid or comm. */
static DecodedEvent opaque(uint16_t type) {
	return (DecodedEvent){ .hdr = { .type = type } };
}

static void test_everything(void) {
	Subscription *s = sub("{}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent e = event(PERFRELAY_TYPE_EXEC, 10, 1000, "bash"), o = opaque(0x9000);

	ASSERT(filter_match(s, &e, NULL, NULL));
	ASSERT(filter_match(s, &e, "sshd.service", NULL));
	ASSERT(filter_match(s, &o, NULL, NULL));
	subscription_free(s);
}

static void test_types(void) {
	Subscription *s = sub(
		"{\"subscribe\":{\"types\":[\"exec\",\"open\",40000]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent exec = event(PERFRELAY_TYPE_EXEC, 1, 0, "a"),
		     open = event(PERFRELAY_TYPE_OPEN, 1, 0, "a");
	DecodedEvent fork = event(PERFRELAY_TYPE_FORK, 1, 0, "a"), bench = opaque(PERFRELAY_TYPE_BENCH);
	DecodedEvent t40000 = opaque(40000), t40001 = opaque(40001), t39999 = opaque(39999), t63 = opaque(63);

	ASSERT(filter_match(s, &exec, NULL, NULL));
	ASSERT(filter_match(s, &open, NULL, NULL));
	ASSERT(!filter_match(s, &fork, NULL, NULL));
	ASSERT(!filter_match(s, &bench, NULL, NULL));
	ASSERT(filter_match(s, &t40000, NULL, NULL));
	ASSERT(!filter_match(s, &t40001, NULL, NULL));
	ASSERT(!filter_match(s, &t39999, NULL, NULL));
	ASSERT(!filter_match(s, &t63, NULL, NULL));
	subscription_free(s);

	/* Only ids above the mask: built-in types do not match. */
	s = sub("{\"subscribe\":{\"types\":[65535, 64]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent t64 = opaque(64), tmax = opaque(65535);
	ASSERT(!filter_match(s, &exec, NULL, NULL));
	ASSERT(filter_match(s, &t64, NULL, NULL));
	ASSERT(filter_match(s, &tmax, NULL, NULL));
	ASSERT(!filter_match(s, &t63, NULL, NULL));
	subscription_free(s);

	/* Only mask bits: an unknown type does not match. */
	s = sub("{\"subscribe\":{\"types\":[\"bench\", 63]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	ASSERT(filter_match(s, &bench, NULL, NULL));
	ASSERT(filter_match(s, &t63, NULL, NULL));
	ASSERT(!filter_match(s, &t40000, NULL, NULL));
	ASSERT(!filter_match(s, &exec, NULL, NULL));
	subscription_free(s);
}

static void test_pid_uid_comm(void) {
	Subscription *s = sub("{\"subscribe\":{\"pid\":[5, 1, 900, 70000, 3]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	uint32_t yes[] = { 1, 3, 5, 900, 70000 }, no[] = { 0, 2, 4, 6, 899, 901, 69999, 4294967295u };
	DecodedEvent o = opaque(0x8001);

	for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
		DecodedEvent e = event(PERFRELAY_TYPE_OPEN, yes[i], 0, "x");
		ASSERT(filter_match(s, &e, NULL, NULL));
	}
	for (size_t i = 0; i < ELEMENTSOF(no); i++) {
		DecodedEvent e = event(PERFRELAY_TYPE_OPEN, no[i], 0, "x");
		ASSERT(!filter_match(s, &e, NULL, NULL));
	}
	/* An event without a pid does not match a pid filter. */
	ASSERT(!filter_match(s, &o, NULL, NULL));
	subscription_free(s);

	/* 64 pids: the binary search finds each and nothing between them. */
	char req[2048], *p = req;
	p += sprintf(p, "{\"subscribe\":{\"pid\":[");
	for (int i = 0; i < 64; i++)
		p += sprintf(p, "%s%d", i ? "," : "", (63 - i) * 10);
	strcpy(p, "]}}");
	s = sub(req, SUBSCRIPTION_ACCESS_ALL, 0);
	for (uint32_t pid = 0; pid < 700; pid++) {
		DecodedEvent e = event(PERFRELAY_TYPE_OPEN, pid, 0, "x");
		ASSERT(filter_match(s, &e, NULL, NULL) == (pid % 10 == 0 && pid <= 630));
	}
	subscription_free(s);

	s = sub("{\"subscribe\":{\"uid\":[1000, 0]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent u0 = event(PERFRELAY_TYPE_EXIT, 1, 0, "x"),
		     u1000 = event(PERFRELAY_TYPE_EXIT, 1, 1000, "x");
	DecodedEvent u1 = event(PERFRELAY_TYPE_EXIT, 1, 1, "x");
	ASSERT(filter_match(s, &u0, NULL, NULL) && filter_match(s, &u1000, NULL, NULL) &&
	       !filter_match(s, &u1, NULL, NULL));
	ASSERT(!filter_match(s, &o, NULL, NULL));
	subscription_free(s);

	s = sub("{\"subscribe\":{\"comm\":[\"bash\", \"\", \"sshd\"]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent bash = event(PERFRELAY_TYPE_EXEC, 1, 0, "bash"),
		     bas = event(PERFRELAY_TYPE_EXEC, 1, 0, "bas");
	DecodedEvent bashx = event(PERFRELAY_TYPE_EXEC, 1, 0, "bashx"),
		     empty = event(PERFRELAY_TYPE_EXEC, 1, 0, "");
	DecodedEvent sshd = event(PERFRELAY_TYPE_EXEC, 1, 0, "sshd"),
		     nocomm = event(PERFRELAY_TYPE_EXEC, 1, 0, NULL);
	ASSERT(filter_match(s, &bash, NULL, NULL) && filter_match(s, &sshd, NULL, NULL) &&
	       filter_match(s, &empty, NULL, NULL));
	ASSERT(!filter_match(s, &bas, NULL, NULL) && !filter_match(s, &bashx, NULL, NULL));
	ASSERT(!filter_match(s, &nocomm, NULL, NULL) && !filter_match(s, &o, NULL, NULL));
	subscription_free(s);
}

static void test_unit(void) {
	Subscription *s = sub(
		"{\"subscribe\":{\"unit\":[\"sshd.service\",\"session-1.scope\"]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent e = event(PERFRELAY_TYPE_EXEC, 1, 0, "x");

	ASSERT(filter_match(s, &e, "sshd.service", NULL));
	ASSERT(filter_match(s, &e, "session-1.scope", NULL));
	ASSERT(!filter_match(s, &e, "sshd.socket", NULL));
	ASSERT(!filter_match(s, &e, "sshd.servic", NULL));
	/* No unit (no cgroup id, or a cgroup outside any unit): no match. */
	ASSERT(!filter_match(s, &e, NULL, NULL));
	subscription_free(s);
}

static void test_combined(void) {
	/* OR within a field, AND across fields. */
	Subscription *s = sub(
		"{\"subscribe\":{\"types\":[\"exec\",\"exit\"],\"pid\":[10,11],\"uid\":[1000],"
		"\"comm\":[\"bash\"],\"unit\":[\"a.service\"]}}",
		SUBSCRIPTION_ACCESS_ALL,
		0);
	DecodedEvent ok = event(PERFRELAY_TYPE_EXIT, 11, 1000, "bash");
	DecodedEvent bad_type = event(PERFRELAY_TYPE_OPEN, 11, 1000, "bash");
	DecodedEvent bad_pid = event(PERFRELAY_TYPE_EXIT, 12, 1000, "bash");
	DecodedEvent bad_uid = event(PERFRELAY_TYPE_EXIT, 11, 1001, "bash");
	DecodedEvent bad_comm = event(PERFRELAY_TYPE_EXIT, 11, 1000, "zsh");

	ASSERT(filter_match(s, &ok, "a.service", NULL));
	ASSERT(!filter_match(s, &ok, "b.service", NULL));
	ASSERT(!filter_match(s, &ok, NULL, NULL));
	ASSERT(!filter_match(s, &bad_type, "a.service", NULL));
	ASSERT(!filter_match(s, &bad_pid, "a.service", NULL));
	ASSERT(!filter_match(s, &bad_uid, "a.service", NULL));
	ASSERT(!filter_match(s, &bad_comm, "a.service", NULL));
	subscription_free(s);
}

static void test_access_match(void) {
	Subscription *own = sub("{}", SUBSCRIPTION_ACCESS_UID, 1000);
	Subscription *none = sub("{}", SUBSCRIPTION_ACCESS_NONE, 0);
	Subscription *all = sub("{}", SUBSCRIPTION_ACCESS_ALL, 1000);
	DecodedEvent mine = event(PERFRELAY_TYPE_EXEC, 1, 1000, "x"),
		     roots = event(PERFRELAY_TYPE_EXEC, 1, 0, "x");
	DecodedEvent other = event(PERFRELAY_TYPE_OPEN, 1, 1001, "x"), o = opaque(0x8000);
	DecodedEvent bench = opaque(PERFRELAY_TYPE_BENCH);

	ASSERT(filter_match(own, &mine, NULL, NULL));
	ASSERT(!filter_match(own, &roots, NULL, NULL));
	ASSERT(!filter_match(own, &other, NULL, NULL));
	/* No uid in the event: root and allowed groups only. */
	ASSERT(!filter_match(own, &o, NULL, NULL));
	ASSERT(!filter_match(own, &bench, NULL, NULL));
	ASSERT(filter_match(all, &o, NULL, NULL) && filter_match(all, &roots, NULL, NULL) &&
	       filter_match(all, &other, NULL, NULL));
	/* A subscription the server never vetted sees nothing. */
	ASSERT(!filter_match(none, &mine, NULL, NULL) && !filter_match(none, &o, NULL, NULL));

	/* A set-uid program its user runs: real uid theirs, effective uid root's. Only clients of
	 * both see it; a record of an older probe (no euid) goes by the real uid. */
	DecodedEvent setuid = mine, same = mine, old = mine;
	setuid.has_euid = same.has_euid = true;
	setuid.euid = 0;
	same.euid = 1000;
	ASSERT(!filter_match(own, &setuid, NULL, NULL));
	ASSERT(filter_match(own, &same, NULL, NULL) && filter_match(own, &old, NULL, NULL));
	ASSERT(filter_match(all, &setuid, NULL, NULL));
	DecodedEvent sudo_to_me = roots; /* root's real uid, this user's euid: not theirs either */
	sudo_to_me.has_euid = true;
	sudo_to_me.euid = 1000;
	ASSERT(!filter_match(own, &sudo_to_me, NULL, NULL));
	/* Set-gid or file capabilities: its user's uids, but the kernel hides it from them. */
	DecodedEvent setgid = same;
	setgid.privileged = true;
	ASSERT(!filter_match(own, &setgid, NULL, NULL) && filter_match(all, &setgid, NULL, NULL));

	/* The uid filter cannot widen access. */
	Subscription *wide = sub("{\"subscribe\":{\"uid\":[0, 1000]}}", SUBSCRIPTION_ACCESS_UID, 1000);
	ASSERT(filter_match(wide, &mine, NULL, NULL) && !filter_match(wide, &roots, NULL, NULL));
	subscription_free(wide);
	subscription_free(own);
	subscription_free(none);
	subscription_free(all);
}

static void test_access_rule(void) {
	gid_t allowed[] = { 50, 60 }, groups[] = { 10, 60 }, others[] = { 10, 11 };
	const GroupList none = {}, allow = { .gids = allowed, .n = 2 };

	ASSERT(filter_access(0, 0, NULL, 0, &none, &none) == SUBSCRIPTION_ACCESS_ALL);
	ASSERT(filter_access(0, 1, others, 2, &allow, &none) == SUBSCRIPTION_ACCESS_ALL);
	ASSERT(filter_access(1000, 1000, NULL, 0, &none, &none) == SUBSCRIPTION_ACCESS_UID);
	ASSERT(filter_access(1000, 1000, others, 2, &allow, &none) == SUBSCRIPTION_ACCESS_UID);
	/* A supplementary group or the primary group may be the allowed one. */
	ASSERT(filter_access(1000, 1000, groups, 2, &allow, &none) == SUBSCRIPTION_ACCESS_ALL);
	ASSERT(filter_access(1000, 50, others, 2, &allow, &none) == SUBSCRIPTION_ACCESS_ALL);
	ASSERT(filter_access(1000, 50, NULL, 0, &allow, &none) == SUBSCRIPTION_ACCESS_ALL);
	/* Group 0 is not root. */
	ASSERT(filter_access(1000, 0, NULL, 0, &none, &none) == SUBSCRIPTION_ACCESS_UID);
	/* ControlGroups= members see every event too. */
	ASSERT(filter_access(1000, 1000, groups, 2, &none, &allow) == SUBSCRIPTION_ACCESS_ALL);
	ASSERT(filter_access(1000, 1000, others, 2, &none, &allow) == SUBSCRIPTION_ACCESS_UID);
}

/* Units' counters and packets go only to those who name them; "capture" picks packets. */
static void test_asked_for_only(void) {
	Subscription *all = sub("{}", SUBSCRIPTION_ACCESS_ALL, 0);
	Subscription *pk = sub(
		"{\"subscribe\":{\"types\":[\"packet\"],\"capture\":[5,9]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	Subscription *ct = sub(
		"{\"subscribe\":{\"types\":[\"counters\",\"exec\"]}}", SUBSCRIPTION_ACCESS_ALL, 0);
	DecodedEvent p5 = { .hdr = { .type = PERFRELAY_TYPE_PACKET }, .known = true, .capture_id = 5 };
	DecodedEvent p6 = { .hdr = { .type = PERFRELAY_TYPE_PACKET }, .known = true, .capture_id = 6 };
	DecodedEvent c = { .hdr = { .type = PERFRELAY_TYPE_COUNTERS }, .known = true };
	DecodedEvent e = event(PERFRELAY_TYPE_EXEC, 10, 1000, "bash");

	ASSERT(!filter_match(all, &p5, NULL, NULL));
	ASSERT(!filter_match(all, &c, NULL, NULL));
	ASSERT(filter_match(pk, &p5, NULL, NULL));
	ASSERT(!filter_match(pk, &p6, NULL, NULL));
	ASSERT(!filter_match(pk, &e, NULL, NULL));
	ASSERT(filter_match(ct, &c, "nginx.service", NULL));
	ASSERT(filter_match(ct, &e, NULL, NULL));
	ASSERT(!filter_match(ct, &p5, NULL, NULL));
	subscription_free(all);
	subscription_free(pk);
	subscription_free(ct);
}

int main(void) {
	test_everything();
	test_asked_for_only();
	test_types();
	test_pid_uid_comm();
	test_unit();
	test_combined();
	test_access_match();
	test_access_rule();

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return EXIT_FAILURE;
	}
	printf("test-filter: all passed\n");
	return EXIT_SUCCESS;
}
