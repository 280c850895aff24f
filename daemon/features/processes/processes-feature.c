/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The process table's face (docs/events.md, "Process identity"): seeded at start with the
 * processes alive then, from a BPF task iterator (tasks.bpf.c, Linux 5.8), so that the lineage
 * of a process that started before the daemon is known; ListProcesses() (perfrelayctl tree);
 * GetStats()' "processes" section. The table itself is the hub's (proctable.h): the readers feed
 * it and the "ancestor" filters read it. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "api/bus-figures.h"
#include "event.h"
#include "features/feature-table.h"
#include "base/log.h"
#include "core/manager.h"
#include "tasks.h"
#include "tasks.skel.h"
#include "time-util.h"

/* The answer of one ListProcesses(): the table holds at most PROC_TABLE_DEFAULT entries. */
#define PROCESSES_LIST_MAX PROC_TABLE_DEFAULT

typedef struct ProcessesFeature {
	Feature feature;
	uint64_t seed_usec; /* how long the seed took */
} ProcessesFeature;

/* Reads the task iterator's records into the table. Returns how many processes it added, or a
 * negative errno. */
static int seed_from_iterator(ProcTable *t) {
	_cleanup_close_ int iter_fd = -EBADF;
	struct tasks_bpf *skel;
	struct bpf_link *link = NULL;
	struct perfrelay_task_seed buf[256];
	size_t have = 0;
	int n = 0, r;

	skel = tasks_bpf__open_and_load();
	if (!skel)
		return negative_errno();
	link = bpf_program__attach_iter(skel->progs.seed_tasks, NULL);
	if (!link) {
		r = negative_errno();
		goto out;
	}
	iter_fd = bpf_iter_create(bpf_link__fd(link));
	if (iter_fd < 0) {
		r = negative_errno();
		goto out;
	}
	for (;;) {
		ssize_t k = read(iter_fd, (char *) buf + have, sizeof(buf) - have);

		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			r = negative_errno();
			goto out;
		}
		if (k == 0)
			break;
		have += (size_t) k;
		for (size_t i = 0; i < have / sizeof(buf[0]); i++) {
			ProcEntry e = {
				.exec_id = buf[i].exec_id,
				.parent_exec_id = buf[i].parent_exec_id,
				.cgroup_id = buf[i].cgroup_id,
				.pid = buf[i].pid,
				.uid = buf[i].uid,
			};

			memcpy(e.comm, buf[i].comm, PROC_COMM_LEN);
			e.comm[PROC_COMM_LEN - 1] = 0;
			/* Events the readers already took are newer than the seed; a process also
			 * comes as its children's parent. */
			n += proc_table_put(t, &e, true);
		}
		/* A record split across reads (seq_file writes whole records, but be safe). */
		memmove(buf, (char *) buf + have / sizeof(buf[0]) * sizeof(buf[0]), have % sizeof(buf[0]));
		have %= sizeof(buf[0]);
	}
	r = n;
out:
	bpf_link__destroy(link);
	tasks_bpf__destroy(skel);
	return r;
}

static int processes_setup(Feature *f) {
	ProcessesFeature *pf = (ProcessesFeature *) f;
	ProcTable *t = hub_procs(manager_hub(f->manager));
	uint64_t start = now_usec(CLOCK_MONOTONIC);
	int r;

	r = seed_from_iterator(t);
	pf->seed_usec = now_usec(CLOCK_MONOTONIC) - start;
	if (r < 0) {
		/* Not fatal: the table fills from events; ancestors of older processes are misses. */
		log_warning_errno(
			r,
			"Cannot read the running processes from a BPF task iterator (Linux 5.8): %m; "
			"the lineage of processes started before the daemon is not known");
		return 0;
	}
	proc_table_count_seeded(t, (uint64_t) r);
	log_debug("Process table seeded with %d processes in %" PRIu64 " us", r, pf->seed_usec);
	return 0;
}

static int append_process(sd_bus_message *reply, Manager *m, const ProcEntry *e) {
	char unit[256];
	const char *u = e->cgroup_id ? manager_cgroup_unit(m, e->cgroup_id, unit, sizeof(unit), NULL, NULL) :
				       NULL;

	return sd_bus_message_append(
		reply, "(ttuuss)", e->exec_id, e->parent_exec_id, e->pid, e->uid, e->comm, u ?: "");
}

/* ListProcesses(): the live processes the table holds. Root, AllowGroups= and ControlGroups=
 * members see all of them, anyone else the processes of their own uid, as events. */
static int method_list_processes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_free_ ProcEntry *list = NULL;
	ProcessesFeature *pf = userdata;
	Manager *m = pf->feature.manager;
	SubscriptionAccess access;
	size_t n;
	uid_t uid;
	int r;

	r = bus_require_read(manager_bus(m), message, "ListProcesses", &uid, &access, error);
	if (r < 0)
		return r;
	list = malloc(sizeof(ProcEntry) * PROCESSES_LIST_MAX);
	if (!list)
		return -ENOMEM;
	n = proc_table_list(hub_procs(manager_hub(m)), list, PROCESSES_LIST_MAX);
	r = sd_bus_message_new_method_return(message, &reply);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "(ttuuss)");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		if (access != SUBSCRIPTION_ACCESS_ALL && list[i].uid != (uint32_t) uid)
			continue;
		r = append_process(reply, m, &list[i]);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

/* "processes": the table's figures (docs/dbus.md). */
static int processes_stats_append(Feature *f, sd_bus_message *m) {
	ProcessesFeature *pf = (ProcessesFeature *) f;
	ProcTableStats st;
	int r;

	proc_table_get_stats(hub_procs(manager_hub(f->manager)), &st);
	r = open_section(m, "processes");
	if (r >= 0)
		r = APPEND_FIGURES(
			m,
			{ "capacity", st.capacity },
			{ "bytes", st.bytes },
			{ "entries", st.entries },
			{ "live", st.live },
			{ "inserted", st.inserted },
			{ "seeded", st.seeded },
			{ "seed_usec", pf->seed_usec },
			{ "exited", st.exited },
			{ "evicted", st.evicted },
			{ "evicted_live", st.evicted_live },
			{ "lineage_misses", st.misses },
			{ "lineage_incomplete_matched", st.incomplete },
			{ "read_retries", st.retries });
	return r < 0 ? r : close_entry(m);
}

/* The table follows every process: its exec, fork and exit records are always wanted. */
static uint64_t processes_demand(Feature *f) {
	return (UINT64_C(1) << PERFRELAY_TYPE_EXEC) | (UINT64_C(1) << PERFRELAY_TYPE_FORK) |
		(UINT64_C(1) << PERFRELAY_TYPE_EXIT);
}

/* clang-format off */
static const sd_bus_vtable processes_bus_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("ListProcesses",
	                         NULL, "",
	                         "a(ttuuss)", SD_BUS_PARAM(processes),
	                         method_list_processes, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */

const FeatureVtable processes_feature = {
	.name = "processes",
	.object_size = sizeof(ProcessesFeature),
	.setup = processes_setup,
	.bus_vtable = processes_bus_vtable,
	.stats_append = processes_stats_append,
	.demand = processes_demand,
};
