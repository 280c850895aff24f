/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Flight recorder snapshots as JSON lines (snapshot.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "hub/encode.h"
#include "hub/filter.h"
#include "macro.h"
#include "features/recorder/snapshot.h"

typedef struct Entry {
	DecodedEvent ev; /* points into the copies */
	unsigned copy;
} Entry;

typedef struct CopyStats {
	uint64_t records, events, first_ts, last_ts;
} CopyStats;

typedef struct Collect {
	Entry *entries;
	size_t n, cap;
	unsigned copy;
	CopyStats *stats;
	uint64_t malformed;
	int error;
} Collect;

static void collect(const uint8_t *rec, uint32_t size, void *userdata) {
	Collect *c = userdata;
	CopyStats *st = &c->stats[c->copy];
	PerfRecordView v;
	DecodedEvent ev;

	st->records++;
	decode_perf_record(rec, size, &v);
	if (v.kind != PERF_REC_SAMPLE)
		return;
	if (decode_event(v.raw, v.raw_size, &ev) != DECODE_OK) {
		c->malformed++;
		return;
	}
	if (c->n == c->cap) {
		size_t cap = MAX(c->cap * 2, (size_t) 1024);
		Entry *e = reallocarray(c->entries, cap, sizeof(*e));

		if (!e) {
			c->error = -ENOMEM;
			return;
		}
		c->entries = e;
		c->cap = cap;
	}
	/* Newest first within a ring: the first seen is the newest. */
	if (st->events == 0)
		st->last_ts = ev.hdr.ts_ns;
	st->first_ts = ev.hdr.ts_ns;
	st->events++;
	c->entries[c->n++] = (Entry){ .ev = ev, .copy = c->copy };
}

static int entry_compare(const void *a, const void *b) {
	const DecodedEvent *x = &((const Entry *) a)->ev, *y = &((const Entry *) b)->ev;

	if (x->hdr.ts_ns != y->hdr.ts_ns)
		return x->hdr.ts_ns < y->hdr.ts_ns ? -1 : 1;
	if (x->hdr.cpu != y->hdr.cpu)
		return x->hdr.cpu < y->hdr.cpu ? -1 : 1;
	return (x->hdr.seq > y->hdr.seq) - (x->hdr.seq < y->hdr.seq);
}

static int seen_compare(const void *a, const void *b) {
	const SnapshotSeen *x = a, *y = b;

	if (x->producer != y->producer)
		return x->producer < y->producer ? -1 : 1;
	if (x->cpu != y->cpu)
		return x->cpu < y->cpu ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/* LineageUnitFn over the options' unit resolver. */
static const char *snapshot_lineage_unit(void *userdata, uint64_t cgroup_id) {
	const SnapshotOptions *o = userdata;

	return o->unit ? o->unit(cgroup_id, o->userdata) : NULL;
}

int snapshot_write(const RecorderCopy *copies, size_t n, const SnapshotOptions *o, FILE *f, SnapshotSummary *ret) {
	_cleanup_free_ CopyStats *stats = calloc(n ?: 1, sizeof(CopyStats));
	_cleanup_free_ char *buf = malloc(ENCODE_JSON_MAX);
	Collect c = { .stats = stats };
	SnapshotSummary sum = {};
	_cleanup_free_ SnapshotSeen *seen = NULL;
	size_t n_seen = 0;

	if (!stats || !buf)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		c.copy = (unsigned) i;
		(void) recorder_copy_walk(&copies[i], collect, &c);
		sum.records += stats[i].records;
	}
	if (c.error < 0) {
		free(c.entries);
		return c.error;
	}
	sum.malformed = c.malformed;
	if (c.n > 0) /* qsort() wants a non-NULL array even for none */
		qsort(c.entries, c.n, sizeof(Entry), entry_compare);
	if (o->history) {
		/* Complete from the latest of the rings' oldest records on (each ring lost what
		 * came before its own oldest); the history tells what came before. */
		uint64_t window = c.n > 0 ? 0 : UINT64_MAX;
		int64_t k;

		for (size_t i = 0; i < n; i++)
			if (stats[i].events > 0)
				window = MAX(window, stats[i].first_ts);
		k = o->history(f, window, o->userdata, &seen, &n_seen);
		if (k < 0) {
			free(c.entries);
			return (int) k;
		}
		sum.history = (uint64_t) k;
		if (n_seen > 0)
			qsort(seen, n_seen, sizeof(*seen), seen_compare);
	}

	for (size_t i = 0; i < c.n; i++) {
		DecodedEvent *ev = &c.entries[i].ev;
		const char *unit = NULL;
		ssize_t len;

		if ((o->since_ns && ev->hdr.ts_ns < o->since_ns) ||
		    (o->until_ns && ev->hdr.ts_ns > o->until_ns))
			continue;
		if (n_seen > 0) {
			SnapshotSeen key = { ev->hdr.producer, ev->hdr.cpu, ev->hdr.seq };

			if (bsearch(&key, seen, n_seen, sizeof(key), seen_compare))
				continue; /* in the history's part */
		}
		if (ev->cgroup_id != 0 && o->unit)
			unit = o->unit(ev->cgroup_id, o->userdata);
		if (!ev->known && o->decoder) {
			const ProducerType *t = o->decoder(ev->hdr.type, o->userdata);

			if (t && t->rec && ev->hdr.size >= btfrec_size(t->rec)) {
				ev->btf = t->rec;
				ev->producer_name = t->producer_name;
				ev->producer_type = t;
			}
		}
		if (o->filter) {
			Lineage lineage;

			lineage_init(&lineage, o->procs, ev, snapshot_lineage_unit, (void *) o);
			if (!filter_match(o->filter, ev, unit, &lineage))
				continue;
		}
		len = ev->btf ?
			encode_json_btf(ev, ev->btf, ev->producer_name, unit, NULL, buf, ENCODE_JSON_MAX) :
			encode_json(ev, unit, buf, ENCODE_JSON_MAX);
		if (len <= 0)
			continue;
		fwrite(buf, 1, (size_t) len, f);
		sum.events++;
	}
	free(c.entries);

	fprintf(f,
		"{\"type\":\"snapshot\",\"events\":%" PRIu64 ",\"records\":%" PRIu64
		",\"malformed\":%" PRIu64 ",\"history\":%" PRIu64 ",\"cpus\":[",
		sum.events,
		sum.records,
		sum.malformed,
		sum.history);
	for (size_t i = 0; i < n; i++)
		fprintf(f,
			"%s{\"cpu\":%u,\"records\":%" PRIu64 ",\"from_ns\":%" PRIu64 ",\"to_ns\":%" PRIu64
			",\"written\":%" PRIu64 ",\"overwritten\":%" PRIu64 ",\"pause_ns\":%" PRIu64
			",\"bytes\":%" PRIu64 "}",
			i ? "," : "",
			copies[i].cpu,
			stats[i].records,
			stats[i].first_ts,
			stats[i].last_ts,
			copies[i].written,
			copies[i].written > stats[i].records ? copies[i].written - stats[i].records : 0,
			copies[i].pause_ns,
			copies[i].size);
	fputs("]}\n", f);
	if (fflush(f) != 0 || ferror(f))
		return -errno ?: -EIO;
	if (ret)
		*ret = sum;
	return 0;
}
