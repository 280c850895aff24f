/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The mmapped "received" map and the crash accounting at start. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "kernel/ledger.h"
#include "macro.h"
#include "base/stat.h"

struct Ledger {
	struct perfrelay_received *entries;
	size_t map_size;
	unsigned n_cpus;
};

int ledger_open(int map_fd, unsigned n_cpus, Ledger **ret) {
	long page = sysconf(_SC_PAGESIZE);
	Ledger *l;
	void *p;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->n_cpus = n_cpus;
	l->map_size = ALIGN_TO(
		sizeof(struct perfrelay_received) * PERFRELAY_MAX_PRODUCERS * n_cpus, (size_t) page);
	p = mmap(NULL, l->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
	if (p == MAP_FAILED) {
		int r = negative_errno();
		free(l);
		return r;
	}
	l->entries = p;
	*ret = l;
	return 0;
}

Ledger *ledger_free(Ledger *l) {
	if (!l)
		return NULL;
	if (l->entries)
		munmap(l->entries, l->map_size);
	free(l);
	return NULL;
}

struct perfrelay_received *ledger_entry(Ledger *l, uint32_t producer, unsigned cpu) {
	return &l->entries[(size_t) producer * l->n_cpus + cpu];
}

unsigned ledger_n_cpus(const Ledger *l) {
	return l->n_cpus;
}

uint64_t ledger_accepted(const struct perfrelay_counters *reads, size_t n) {
	uint64_t best = 0;

	for (size_t i = 0; i < n; i++)
		if (reads[i].attempts >= reads[i].failures)
			best = MAX(best, reads[i].attempts - reads[i].failures);
	return best;
}

uint64_t ledger_settle_entry(struct perfrelay_received *e, uint64_t accepted) {
	uint64_t seen = STAT_LOAD(e->received) + STAT_LOAD(e->malformed) + STAT_LOAD(e->crash_lost);

	/* Below: records of this id that its counters never saw (a producer that writes
	 * without perfrelay_emit(), or forges the id); nothing to settle. */
	if (accepted <= seen)
		return 0;
	STAT_STORE(e->crash_lost, STAT_LOAD(e->crash_lost) + (accepted - seen));
	return accepted - seen;
}

int64_t ledger_settle(Ledger *l, int counters_fd, uint64_t *ret_lost) {
	/* LEDGER_SETTLE_READS reads of every CPU's pair, by CPU: reads[cpu * READS + k]. */
	_cleanup_free_ struct perfrelay_counters *v = calloc(l->n_cpus, sizeof(*v)),
						 *reads = calloc(
							 (size_t) l->n_cpus * LEDGER_SETTLE_READS,
							 sizeof(*reads));
	int64_t total = 0;

	if (!v || !reads)
		return -ENOMEM;
	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		ret_lost[id] = 0;
		for (unsigned k = 0; k < LEDGER_SETTLE_READS; k++) {
			if (bpf_map_lookup_elem(counters_fd, &id, v) < 0)
				return negative_errno();
			for (unsigned cpu = 0; cpu < l->n_cpus; cpu++)
				reads[(size_t) cpu * LEDGER_SETTLE_READS + k] = v[cpu];
		}
		for (unsigned cpu = 0; cpu < l->n_cpus; cpu++) {
			uint64_t lost = ledger_settle_entry(
				ledger_entry(l, id, cpu),
				ledger_accepted(
					reads + (size_t) cpu * LEDGER_SETTLE_READS, LEDGER_SETTLE_READS));

			ret_lost[id] += lost;
			total += (int64_t) lost;
		}
	}
	return total;
}

int64_t ledger_adopt(Ledger *l, int counters_fd) {
	_cleanup_free_ struct perfrelay_counters *v = calloc(l->n_cpus, sizeof(*v));
	int64_t total = 0;

	if (!v)
		return -ENOMEM;
	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		if (bpf_map_lookup_elem(counters_fd, &id, v) < 0)
			return negative_errno();
		for (unsigned cpu = 0; cpu < l->n_cpus; cpu++) {
			struct perfrelay_received *e = ledger_entry(l, id, cpu);
			uint64_t accepted = v[cpu].attempts >= v[cpu].failures ?
				v[cpu].attempts - v[cpu].failures :
				0;

			*e = (struct perfrelay_received){
				.received = accepted,
				.seq_next = v[cpu].attempts,
				.seq_gaps = v[cpu].failures,
			};
			total += (int64_t) accepted;
		}
	}
	return total;
}

int ledger_end_downtime(const LedgerDowntimeOps *ops, void *userdata, uint64_t *failures_at_start) {
	for (uint32_t id = 0; id < PERFRELAY_MAX_PRODUCERS; id++) {
		uint64_t failures;

		if (ops->read_failures(userdata, id, &failures) >= 0)
			failures_at_start[id] = failures;
	}
	return ops->clear_idle(userdata);
}

void ledger_reset(Ledger *l) {
	memset(l->entries, 0, sizeof(struct perfrelay_received) * PERFRELAY_MAX_PRODUCERS * l->n_cpus);
}
