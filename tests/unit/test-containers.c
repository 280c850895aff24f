/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test for the containers' table (containers.c), the runtimes' state files
 * (container-state.c), and a container in events: the JSON line's "container" object and the
 * "container" filter. */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "decode/decode.h"
#include "features/containers/container-state.h"
#include "hub/encode.h"
#include "hub/filter.h"
#include "kernel/containers.h"

#include "unit-test.h"

#define ID  "3f9c0e1b2a4d5c6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e1"
#define ID2 "8a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e877"

static const char podman_json[] =
	"[{\"id\":\"" ID2
	"\",\"names\":[\"db\"],\"metadata\":\"{\\\"image-name\\\":\\\"localhost/db:2\\\"}\"},"
	"{\"id\":\"" ID
	"\",\"names\":[\"web\"],\"image\":\"abcd\","
	"\"metadata\":\"{\\\"image-name\\\":\\\"localhost/web:1\\\",\\\"image-id\\\":\\\"beef\\\",\\\"name\\\":\\\"web\\\"}\"}]";

static void test_podman(void) {
	ContainerNames *n = NULL;

	CHECK(container_state_podman(podman_json, strlen(podman_json), ID, &n) == 1 && n, "listed");
	if (n) {
		CHECK(strcmp(n->name, "web") == 0, "name %s", n->name);
		CHECK(strcmp(n->image, "localhost/web:1") == 0, "image %s", n->image);
		CHECK(strcmp(n->image_id, "beef") == 0, "image id %s", n->image_id);
	}
	n = container_names_free(n);
	CHECK(container_state_podman(podman_json, strlen(podman_json), ID2, &n) == 1 && n && !n->image_id,
	      "no image id: none");
	n = container_names_free(n);
	CHECK(container_state_podman(podman_json, strlen(podman_json), "ff", &n) == 0 && !n, "not listed");
	CHECK(container_state_podman("{}", 2, ID, &n) == -EBADMSG, "not a list");
	CHECK(container_state_podman("[", 1, ID, &n) == -EBADMSG, "cut short");
	/* Entries of the wrong shapes are passed over, not trusted. */
	static const char odd[] = "[1,\"x\",{\"id\":7},{\"id\":\"" ID "\",\"names\":[3],\"metadata\":\"[\"}]";
	CHECK(container_state_podman(odd, strlen(odd), ID, &n) == 1 && n && !n->name && !n->image,
	      "odd shapes");
	n = container_names_free(n);
}

static void test_docker(void) {
	static const char cfg[] = "{\"ID\":\"" ID
				  "\",\"Name\":\"/web\",\"Image\":\"sha256:beef\","
				  "\"Config\":{\"Image\":\"nginx:1.27\"}}";
	ContainerNames *n = NULL;

	CHECK(container_state_docker(cfg, strlen(cfg), ID, &n) == 1 && n, "found");
	if (n) {
		CHECK(strcmp(n->name, "web") == 0, "name %s", n->name);
		CHECK(strcmp(n->image, "nginx:1.27") == 0, "image %s", n->image);
		CHECK(strcmp(n->image_id, "beef") == 0, "image id %s", n->image_id);
	}
	n = container_names_free(n);
	CHECK(container_state_docker(cfg, strlen(cfg), ID2, &n) == 0 && !n, "another container's");
	CHECK(container_state_docker("[]", 2, ID, &n) == -EBADMSG, "not an object");
	CHECK(container_state_docker("{}", 2, ID, &n) == -EBADMSG, "no ID");
}

static void test_bounds(void) {
	char name[CONTAINER_NAME_MAX + 8];
	ContainerNames *n;

	/* 254 ASCII bytes, then a 3-byte character across the bound: cut before it. */
	memset(name, 'a', sizeof(name));
	memcpy(name + CONTAINER_NAME_MAX - 1, "\xe2\x82\xac", 3);
	name[CONTAINER_NAME_MAX + 2] = '\0';
	n = container_names_new(name, "", NULL);
	CHECK(n && strlen(n->name) == CONTAINER_NAME_MAX - 1,
	      "cut at a character: %zu",
	      n ? strlen(n->name) : 0);
	CHECK(n && !n->image && !n->image_id, "empty is none");
	container_names_free(n);
}

static int wakes;
static void on_wake(void *userdata) {
	wakes++;
}

static void test_table_and_events(void) {
	ContainerTable *t = NULL;
	ContainerRef ref = { .runtime = CONTAINER_PODMAN, .owner = (uid_t) -1, .id = ID };
	ContainerTableStats st;
	Container *c, *again, *due[4];
	struct perfrelay_exec rec = {};
	DecodedEvent ev = {};
	char line[ENCODE_JSON_MAX];
	json_object *o, *k;
	ssize_t len;

	ASSERT(container_table_new(on_wake, NULL, &t) == 0);
	c = container_table_get(t, &ref);
	again = container_table_get(t, &ref);
	CHECK(c && c == again && wakes == 1, "one entry, one wake");
	CHECK(container_table_get(t, &(ContainerRef){ .runtime = CONTAINER_NONE }) == NULL, "none");
	CHECK(container_names(c) == NULL, "not named yet");

	/* An exec record in the container, before and after it is named. */
	rec.hdr = (struct perfrelay_hdr){ .magic = PERFRELAY_MAGIC,
					  .version = PERFRELAY_VERSION,
					  .type = PERFRELAY_TYPE_EXEC,
					  .size = sizeof(rec) };
	rec.cgroup_id = 42;
	ASSERT(decode_event(&rec, sizeof(rec), &ev) == 0);
	len = encode_json_in(&ev, "libpod-x.scope", c, line, sizeof(line));
	o = len > 0 ? json_tokener_parse(line) : NULL;
	CHECK(o && json_object_object_get_ex(o, "container", &k), "a container: %s", line);
	CHECK(o && strstr(line, "\"container\":{\"id\":\"" ID "\",\"runtime\":\"podman\"}"),
	      "id only: %s",
	      line);
	json_object_put(o);

	CHECK(container_table_due(t, 0, due, 4) == 1 && due[0] == c, "due at once");
	CHECK(container_tries(c) == 1, "one try");
	CHECK(container_table_due(t, 0, due, 4) == 0, "not due again until told");
	container_table_retry(t, c, 10);
	CHECK(container_table_next_due(t) == 10, "next at 10");
	CHECK(container_table_due(t, 10, due, 4) == 1, "due again");
	container_table_named(t, c, container_names_new("web", "localhost/web:1", NULL));
	container_unref(due[0]);
	container_unref(due[0]);
	len = encode_json_in(&ev, NULL, c, line, sizeof(line));
	CHECK(len > 0 &&
		      strstr(line,
			     "\"container\":{\"id\":\"" ID "\",\"runtime\":\"podman\",\"name\":\"web\","
			     "\"image\":\"localhost/web:1\"}"),
	      "named: %s",
	      line);

	/* The filter: by name, image, id prefix of 12 or more; nothing without a container. */
	CHECK(filter_container_named("web", c) && filter_container_named("localhost/web:1", c), "name, image");
	CHECK(filter_container_named("3f9c0e1b2a4d", c) && filter_container_named(ID, c), "id prefix, id");
	CHECK(!filter_container_named("3f9c0e1b2a4", c) && !filter_container_named("db", c),
	      "too short, other");
	{
		Subscription s = { .access = SUBSCRIPTION_ACCESS_ALL, .n_containers = 1 };

		s.containers[0] = (char *) "web";
		CHECK(filter_match_in(&s, &ev, NULL, c, NULL), "matches its container");
		CHECK(!filter_match_in(&s, &ev, NULL, NULL, NULL), "no container, no match");
	}

	container_table_get_stats(t, &st);
	CHECK(st.known == 1 && st.pending == 0 && st.seen == 1 && st.lookups == 2, "stats");
	CHECK(st.lookup_failures[CONTAINER_PODMAN] == 1,
	      "one failed try: %" PRIu64,
	      st.lookup_failures[CONTAINER_PODMAN]);

	/* Held by two "caches": never swept; released, swept after the linger. */
	container_table_sweep(t, 1);
	container_table_sweep(t, 1 + CONTAINER_TABLE_LINGER_SEC * UINT64_C(1000000));
	container_table_get_stats(t, &st);
	CHECK(st.swept == 0, "held: kept");
	container_unref(c);
	container_unref(again);
	container_table_sweep(t, 100);
	container_table_sweep(t, 100 + CONTAINER_TABLE_LINGER_SEC * UINT64_C(1000000));
	container_table_get_stats(t, &st);
	CHECK(st.swept == 1 && st.known == 0, "released: swept");
	container_table_free(t);
}

/* ContainerNames=no: entries are unnamed, never due. */
static void test_no_lookups(void) {
	ContainerTable *t = NULL;
	ContainerRef ref = { .runtime = CONTAINER_DOCKER, .owner = (uid_t) -1, .id = ID };
	ContainerTableStats st;
	Container *c, *due[1];

	ASSERT(container_table_new(NULL, NULL, &t) == 0);
	container_table_no_lookups(t);
	c = container_table_get(t, &ref);
	CHECK(c && container_state(c) == CONTAINER_UNNAMED, "unnamed");
	CHECK(container_table_due(t, UINT64_MAX - 1, due, 1) == 0, "never due");
	container_table_get_stats(t, &st);
	CHECK(st.unnamed == 1 && st.pending == 0, "counted unnamed");
	container_unref(c);
	container_table_free(t);
}

static void test_table_full(void) {
	ContainerTable *t = NULL;
	Container **held = calloc(CONTAINER_TABLE_MAX, sizeof(*held));
	ContainerTableStats st;

	ASSERT(container_table_new(NULL, NULL, &t) == 0 && held);
	for (unsigned i = 0; i < CONTAINER_TABLE_MAX; i++) {
		ContainerRef ref = { .runtime = CONTAINER_DOCKER, .owner = (uid_t) -1 };

		snprintf(ref.id, sizeof(ref.id), "%064x", i);
		held[i] = container_table_get(t, &ref);
	}
	CHECK(container_table_get(t, &(ContainerRef){ .runtime = CONTAINER_DOCKER, .id = "x" }) == NULL,
	      "full");
	container_table_get_stats(t, &st);
	CHECK(st.full == 1 && st.seen == CONTAINER_TABLE_MAX, "counted");
	for (unsigned i = 0; i < CONTAINER_TABLE_MAX; i++)
		container_unref(held[i]);
	container_table_free(t);
	free(held);
}

/* Readers that take and drop references and read names while the main thread names, retries
 * and sweeps: what ThreadSanitizer checks (scripts/test runs the unit suite under it). */
#define RACE_IDS    64
#define RACE_ROUNDS 2000

static ContainerTable *race_table;
static bool race_stop;
static uint64_t race_reads;

static void race_ref(unsigned i, ContainerRef *ref) {
	*ref = (ContainerRef){ .runtime = CONTAINER_PODMAN, .owner = (uid_t) -1 };
	snprintf(ref->id, sizeof(ref->id), "%064x", i);
}

static void *race_reader(void *arg) {
	unsigned seed = (unsigned) (uintptr_t) arg;
	size_t names = 0;

	while (!__atomic_load_n(&race_stop, __ATOMIC_ACQUIRE)) {
		ContainerRef ref;
		Container *c;
		const ContainerNames *n;

		race_ref((seed = seed * 1103515245u + 12345u) % RACE_IDS, &ref);
		c = container_table_get(race_table, &ref);
		if (!c)
			continue;
		n = container_names(c);
		if (n && n->name)
			names += strlen(n->name);
		container_unref(c);
		__atomic_add_fetch(&race_reads, 1, __ATOMIC_RELAXED);
	}
	return (void *) names;
}

static void test_table_threads(void) {
	pthread_t t[2];
	uint64_t now = 1;

	ASSERT(container_table_new(NULL, NULL, &race_table) == 0);
	for (unsigned k = 0; k < 2; k++)
		ASSERT(pthread_create(&t[k], NULL, race_reader, (void *) (uintptr_t) (k + 1)) == 0);
	/* Until the readers have done their share too (they may start late). */
	for (unsigned round = 0;
	     round < RACE_ROUNDS || __atomic_load_n(&race_reads, __ATOMIC_RELAXED) < 100000;
	     round++) {
		Container *due[RACE_IDS];
		size_t n = container_table_due(race_table, now, due, RACE_IDS);

		for (size_t i = 0; i < n; i++) {
			if (i % 2)
				container_table_named(
					race_table, due[i], container_names_new("web", "img", NULL));
			else
				container_table_retry(race_table, due[i], now + 1);
			container_unref(due[i]);
		}
		/* A long linger each round: entries no reader holds go, and come back. */
		container_table_sweep(race_table, now);
		now += CONTAINER_TABLE_LINGER_SEC * UINT64_C(1000000);
	}
	__atomic_store_n(&race_stop, true, __ATOMIC_RELEASE);
	for (unsigned k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	{
		ContainerTableStats st;

		container_table_get_stats(race_table, &st);
		CHECK(st.known + st.pending + st.failed + st.unnamed <= RACE_IDS, "at most one entry per id");
		CHECK(st.seen >= st.swept, "seen %" PRIu64 ", swept %" PRIu64, st.seen, st.swept);
	}
	race_table = container_table_free(race_table);
}

int main(void) {
	test_podman();
	test_docker();
	test_bounds();
	test_table_and_events();
	test_table_full();
	test_no_lookups();
	test_table_threads();
	return failures ? 1 : 0;
}
