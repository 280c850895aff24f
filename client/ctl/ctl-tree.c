/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl tree: the live processes of the daemon's process table (D-Bus ListProcesses())
 * as a forest, each under its parent, with its exec_id, like ps --forest or systemd-cgls; all
 * of them, the subtree of one pid, or the processes of one unit. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "ctl/ctl.h"
#include "json-util.h"

typedef struct Proc {
	uint64_t exec_id, parent_exec_id;
	uint32_t pid, uid;
	char *comm, *unit;
	size_t parent;      /* index of the parent in the list, or SIZE_MAX */
	size_t first, next; /* first child, next sibling (SIZE_MAX: none) */
	bool shown;
} Proc;

typedef struct Forest {
	Proc *p;
	size_t n;
	size_t *by_id;    /* indexes of p in exec_id order, for find() */
	const char *unit; /* --unit: only its processes */
	bool json;
	json_object *out;
} Forest;

static void tree_help(void) {
	printf("%s tree [OPTIONS...]\n\n"
	       "Show the live processes perfrelayd knows (D-Bus ListProcesses()) as a forest, each\n"
	       "under its parent, with its exec_id (docs/events.md, \"Process identity\").\n"
	       "Unprivileged callers see their own processes only.\n\n"
	       "  -p --pid=PID    Only the process PID and its descendants\n"
	       "     --unit=UNIT  Only the processes of the systemd unit UNIT\n"
	       "  -j --json       One JSON array, the processes in tree order with their depth\n"
	       "  -h --help       Show this help\n",
	       program);
}

static int cmp_pid(const void *a, const void *b) {
	const Proc *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static int cmp_exec_id(const void *a, const void *b, void *userdata) {
	const Proc *p = userdata;
	uint64_t x = p[*(const size_t *) a].exec_id, y = p[*(const size_t *) b].exec_id;

	return (x > y) - (x < y);
}

/* The index of the process with exec_id (a binary search of by_id: the table has up to 32768
 * of them), or SIZE_MAX. */
static size_t find(const Forest *f, uint64_t exec_id) {
	size_t lo = 0, hi = f->n;

	while (exec_id != 0 && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t id = f->p[f->by_id[mid]].exec_id;

		if (id == exec_id)
			return f->by_id[mid];
		if (id < exec_id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

static bool wanted(const Forest *f, const Proc *p) {
	return !f->unit || (p->unit && strcmp(p->unit, f->unit) == 0);
}

/* Deeper than this, a branch is not drawn (a real tree is far shallower: pid_max bounds it). */
#define TREE_DEPTH_MAX 4096u

/* `prefix` is the drawing of the levels above (at most 64 levels are drawn). */
static void show(Forest *f, size_t i, unsigned depth, char *prefix, bool last) {
	Proc *p = &f->p[i];
	size_t len = strlen(prefix);

	/* The daemon's list has no cycle and no chain longer than the table, but a list is input:
	 * a process is drawn once, and the recursion is bounded. */
	if (p->shown || depth > TREE_DEPTH_MAX)
		return;
	p->shown = true;
	if (f->json) {
		json_object *o = json_object_new_object();
		char hex[17];

		snprintf(hex, sizeof(hex), "%016" PRIx64, p->exec_id);
		json_object_object_add(o, "exec_id", json_object_new_string(hex));
		if (p->parent_exec_id) {
			snprintf(hex, sizeof(hex), "%016" PRIx64, p->parent_exec_id);
			json_object_object_add(o, "parent_exec_id", json_object_new_string(hex));
		}
		json_object_object_add(o, "pid", json_object_new_int64(p->pid));
		if (p->uid != UINT32_MAX)
			json_object_object_add(o, "uid", json_object_new_int64(p->uid));
		json_object_object_add(o, "comm", json_object_new_string(p->comm));
		if (p->unit && p->unit[0])
			json_object_object_add(o, "unit", json_object_new_string(p->unit));
		json_object_object_add(o, "depth", json_object_new_int(depth));
		json_object_array_add(f->out, o);
	} else {
		char uid[16] = "-";

		if (p->uid != UINT32_MAX)
			snprintf(uid, sizeof(uid), "%" PRIu32, p->uid);
		printf("%016" PRIx64 " %7" PRIu32 " %6s %-24s %s%s%s\n",
		       p->exec_id,
		       p->pid,
		       uid,
		       p->unit && p->unit[0] ? p->unit : "-",
		       prefix,
		       depth == 0 ? "" : (last ? "└─" : "├─"),
		       p->comm);
	}
	if (depth > 0 && depth < 64) {
		strcpy(prefix + len, last ? "  " : "│ ");
	}
	for (size_t c = p->first; c != SIZE_MAX; c = f->p[c].next)
		show(f, c, depth + 1, prefix, f->p[c].next == SIZE_MAX);
	prefix[len] = 0;
}

static int read_processes(Forest *f) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	size_t cap = 0;
	int r;

	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = bus_call(bus, "ListProcesses", &reply, NULL);
	if (r < 0)
		return r;
	r = sd_bus_message_enter_container(reply, 'a', "(ttuuss)");
	if (r < 0)
		return error_errno(r, "ListProcesses(): unexpected answer");
	for (;;) {
		Proc p = { .parent = SIZE_MAX, .first = SIZE_MAX, .next = SIZE_MAX };
		const char *comm, *unit;

		r = sd_bus_message_read(
			reply, "(ttuuss)", &p.exec_id, &p.parent_exec_id, &p.pid, &p.uid, &comm, &unit);
		if (r < 0)
			return error_errno(r, "ListProcesses(): unexpected answer");
		if (r == 0)
			break;
		if (f->n == cap) {
			Proc *np = reallocarray(f->p, cap ? cap * 2 : 256, sizeof(Proc));

			if (!np)
				return -ENOMEM;
			f->p = np;
			cap = cap ? cap * 2 : 256;
		}
		p.comm = strdup(comm);
		p.unit = strdup(unit);
		if (!p.comm || !p.unit) {
			free(p.comm);
			free(p.unit);
			return -ENOMEM;
		}
		f->p[f->n++] = p;
	}
	return 0;
}

int verb_tree(int argc, char *argv[]) {
	enum { ARG_UNIT = 0x100 };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 { "pid", required_argument, NULL, 'p' },
						 { "unit", required_argument, NULL, ARG_UNIT },
						 {} };
	Forest f = {};
	uint32_t pid = 0;
	char prefix[2 * 64 * 4 + 1] = "";
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "hjp:", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			tree_help();
			return 0;
		case 'j':
			f.json = true;
			break;
		case 'p':
			if (parse_u32(optarg, &pid) < 0 || pid == 0)
				return error_msg("tree: --pid: '%s' is not a process id", optarg);
			break;
		case ARG_UNIT:
			f.unit = optarg;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("tree: unexpected argument '%s'", argv[optind]);

	r = read_processes(&f);
	if (r < 0)
		goto out;
	f.by_id = malloc(sizeof(size_t) * (f.n ?: 1));
	if (!f.by_id) {
		r = -ENOMEM;
		goto out;
	}
	if (f.n > 0) /* qsort() wants a non-NULL array even for none */
		qsort(f.p, f.n, sizeof(Proc), cmp_pid);
	for (size_t i = 0; i < f.n; i++)
		f.by_id[i] = i;
	if (f.n > 0)
		qsort_r(f.by_id, f.n, sizeof(size_t), cmp_exec_id, f.p);
	/* Children in pid order: linked from the last so that each list comes out ascending. A
	 * process is a root when its parent is not shown (not known, or not of --unit). */
	for (size_t i = f.n; i-- > 0;) {
		size_t up = find(&f, f.p[i].parent_exec_id);

		if (up != SIZE_MAX && up != i && wanted(&f, &f.p[up]) == wanted(&f, &f.p[i])) {
			f.p[i].parent = up;
			f.p[i].next = f.p[up].first;
			f.p[up].first = i;
		}
	}
	if (f.json)
		f.out = json_object_new_array();
	if (!f.json)
		printf("%-16s %7s %6s %-24s %s\n", "EXEC_ID", "PID", "UID", "UNIT", "COMMAND");
	r = 0;
	/* The roots, or with --pid the subtree of that process wherever it is. */
	for (size_t i = 0; i < f.n; i++)
		if (wanted(&f, &f.p[i]) && (pid != 0 ? f.p[i].pid == pid : f.p[i].parent == SIZE_MAX))
			show(&f, i, 0, prefix, true);
	if (pid != 0) {
		bool any = false;

		for (size_t i = 0; i < f.n; i++)
			any |= f.p[i].shown;
		if (!any)
			r = error_msg(
				"tree: no process %" PRIu32 " in the daemon's table%s",
				pid,
				f.unit ? " of that unit" : "");
	}
	if (f.json && r >= 0)
		puts(json_object_to_json_string_ext(
			f.out, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
out:
	json_object_put(f.out);
	for (size_t i = 0; i < f.n; i++) {
		free(f.p[i].comm);
		free(f.p[i].unit);
	}
	free(f.p);
	free(f.by_id);
	return r;
}
