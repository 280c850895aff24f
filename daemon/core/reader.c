/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reader threads: epoll over a CPU group's rings, batch draining, decoding, hand-off to the hub. */
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perfrelay-config.h"

#include "kernel/cgroup.h"
#include "decode/decode.h"
#include "kernel/ledger.h"
#include "macro.h"
#include "core/reader.h"
#include "kernel/seqgap.h"
#include "time-util.h"

/* Per (ring, producer): the sequence-gap detector (seqgap.h) and what the current batch read,
 * not yet in the ledger. The reader thread's own. */
typedef struct SeqState {
	SeqGap gap;
	uint64_t received;  /* this batch's valid records */
	uint64_t malformed; /* this batch's rejected records naming the producer */
} SeqState;

/* Per ring: a SeqState per producer id and the ids touched in the current batch. */
typedef struct RingSeq {
	struct perfrelay_received *ledger; /* the ledger entry of (producer 0, this CPU) */
	unsigned stride;                   /* entries between two producers of one CPU */
	uint32_t n_dirty;
	uint16_t dirty[PERFRELAY_MAX_PRODUCERS];
	uint8_t is_dirty[PERFRELAY_MAX_PRODUCERS];
	SeqState seq[PERFRELAY_MAX_PRODUCERS];
} RingSeq;

struct Reader {
	unsigned id;
	pid_t tid; /* the thread's, set before it posts tid_known */
	/* ReaderPriority= (reader_rt_check()): the priority the thread got (0: none; set by
	 * reader_start()), its nice value for the rest of a window, and the thread's own state. */
	unsigned rt_priority;
	int nice;
	uint64_t rt_budget_ns;
	bool rt_demoted;
	uint64_t rt_window_usec;
	uint64_t rt_window_cpu_ns;
	sem_t tid_known;
	CpuSet cpus;
	Ring **rings;       /* NULL: a CPU offline since the start, parked until it comes online */
	unsigned *slot_cpu; /* the CPU of each ring slot, in the order of `cpus` */
	size_t n_rings;
	CpuStats *cpu_stats; /* one per ring; written by the thread */
	RingSeq *seqs;       /* one per ring; the thread's (its ledger entries: see ledger.h) */
	/* One per ring, then one per protected lane (index n_rings + i): the thread's. */
	uint64_t *drained_usec; /* when it last consumed records */
	uint64_t *held_usec;    /* since when it holds a record, or 0 */
	bool hold_ok;           /* the thread's: records may be held (not while stopping) */
	bool holding;           /* the thread's: the last drain_all() left a record held */
	ReaderStats *stats;     /* written by the thread */
	Hub *hub;
	Decoders *decoders;       /* third-party decoders; NULL: none */
	const ProducerScan *scan; /* held from decoders during a batch */
	CgroupCache *units;       /* the thread's own: cgroup id -> unit; NULL without cgroup2 */
	/* The same for ancestors' cgroups ("ancestor" filters by unit): a cache of its own, as a
	 * lookup may reuse the string of the one before, and the event's unit is still in use. */
	CgroupCache *lineage_units;
	ProcTable *procs; /* the hub's */
	Lineage lineage;  /* the thread's: the current event's, walked if a filter asks */
	unsigned flush_interval_ms;
	int epoll_fd;
	int stop_fd; /* eventfd: the main thread asks the thread to finish */
	/* CPU hotplug hand-over (reader_replace_ring()): the main thread queues commands under
	 * cmd_lock and signals cmd_fd; the thread runs them and queues the rings it let go in
	 * `retired`, under the same lock, for the main thread to free. rings[i] is stored by the
	 * thread with release semantics and read by the main thread (reader_ring()) with acquire. */
	int cmd_fd;
	pthread_mutex_t cmd_lock;
	struct ReaderCmd *cmds;
	size_t n_cmds;
	Ring **retired;
	size_t n_retired;
	cpu_set_t allowed; /* the daemon's CPUs when the thread started, for re-pinning */
	bool has_allowed;
	pthread_t thread;
	bool started;
	atomic_int frozen;       /* fault injection only */
	atomic_bool until_empty; /* set by the main thread before the stop request */
};

/* What the record callback needs; lives on the thread's stack for one drain. */
typedef struct DrainCtx {
	Reader *reader;
	CpuStats *cpu;
	RingSeq *seq;
	bool has_clients; /* the hub slot's, fixed for the batch (its lock is held) */
	bool wants_all;   /* likewise: else its clients take only the types of want_types */
	uint64_t want_types;
	uint64_t *held_usec; /* the ring's */
	uint64_t now;        /* CLOCK_MONOTONIC µs of the batch */
	bool held;           /* the drain stopped at a record held for its decoder */
	uint64_t records, received, lost, malformed, other;
} DrainCtx;

/* CPU hotplug, below. */
/* The slice the reader asks of EEVDF: the kernel's minimum (reader_schedule()). */
#define READER_SLICE_NS (100u * 1000u)
#define READER_CMD_KEY  UINT64_MAX /* epoll data of cmd_fd; rings use their index, stop_fd n_rings */
static int reader_hotplug_init(Reader *r);
static void reader_hotplug_free(Reader *r);
static void reader_run_commands(Reader *r);
static int drain_all(Reader *r, uint64_t now, bool *ret_any, bool *ret_trickle);

/* LineageUnitFn: an ancestor's unit, from the thread's own cache for them. */
static const char *reader_lineage_unit(void *userdata, uint64_t cgroup_id) {
	Reader *r = userdata;

	return r->lineage_units ? cgroup_cache_lookup(r->lineage_units, cgroup_id) : NULL;
}

void reader_set_containers(Reader *r, ContainerTable *t) {
	if (r->units)
		cgroup_cache_set_containers(r->units, t);
}

/* The container of an event without a cgroup of its own (open, connect, fork, exit): that of its
 * process image's cgroup in the process table (the exec's, or its parent's at fork). Only while
 * the host has containers: a table lookup per event otherwise spent for nothing. */
static const Container *process_container(Reader *r, uint64_t exec_id) {
	const Container *container = NULL;
	ProcEntry p;

	if (proc_table_get(r->procs, exec_id, &p) && p.cgroup_id != 0)
		(void) cgroup_cache_resolve(r->units, p.cgroup_id, &container);
	return container;
}

/* Adds a CPU's ring and its protected lane to the epoll set, or removes them (EPOLL_CTL_DEL),
 * both as slot i: a wakeup of either drains the group. NULL (a parked CPU): nothing. */
static int reader_epoll_ring(Reader *r, int op, const Ring *ring, size_t i) {
	const Ring *lane;

	if (!ring)
		return 0;
	lane = ring_lane(ring);
	for (int k = 0; k < (lane ? 2 : 1); k++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = i };
		int fd = ring_fd(k == 0 ? ring : lane);

		/* Removing: the event may be gone already (a CPU offline); nothing to undo. */
		if (op == EPOLL_CTL_DEL)
			(void) epoll_ctl(r->epoll_fd, op, fd, NULL);
		else if (epoll_ctl(r->epoll_fd, op, fd, &ev) < 0)
			return negative_errno();
	}
	return 0;
}

int reader_new(
	unsigned id,
	const CpuSet *cpus,
	Ring **rings,
	size_t n_rings,
	Hub *hub,
	CgroupWatch *cgroups,
	Ledger *ledger,
	unsigned flush_interval_ms,
	Reader **ret) {
	_cleanup_(reader_freep) Reader *r = calloc(1, sizeof(*r));
	size_t slot = 0;
	int k;

	if (!r) {
		for (size_t i = 0; i < n_rings; i++)
			ring_free(rings[i]);
		free(rings);
		return -ENOMEM;
	}
	/* Cannot fail: a count of 0, not shared between processes. */
	(void) sem_init(&r->tid_known, 0, 0);
	r->id = id;
	r->cpus = *cpus;
	r->rings = rings;
	r->n_rings = n_rings;
	r->hub = hub;
	r->procs = hub_procs(hub);
	lineage_init(&r->lineage, r->procs, NULL, reader_lineage_unit, r);
	r->flush_interval_ms = flush_interval_ms;
	r->epoll_fd = r->stop_fd = r->cmd_fd = -EBADF;
	pthread_mutex_init(&r->cmd_lock, NULL);

	r->cpu_stats = calloc(n_rings ?: 1, sizeof(CpuStats));
	r->drained_usec = calloc(2 * n_rings ?: 1, sizeof(uint64_t));
	r->held_usec = calloc(2 * n_rings ?: 1, sizeof(uint64_t));
	r->stats = calloc(1, sizeof(ReaderStats));
	r->seqs = calloc(n_rings ?: 1, sizeof(RingSeq));
	r->slot_cpu = calloc(n_rings ?: 1, sizeof(unsigned));
	if (!r->cpu_stats || !r->drained_usec || !r->held_usec || !r->stats || !r->seqs || !r->slot_cpu)
		return -ENOMEM;
	/* The manager hands the rings in the order of `cpus`, parked CPUs included (as NULL). */
	FOREACH_CPU(c, cpus) {
		if (slot == n_rings)
			break;
		r->slot_cpu[slot++] = (unsigned) c;
	}
	if (slot != n_rings)
		return -EINVAL;
	for (size_t i = 0; i < n_rings; i++) {
		RingSeq *rs = &r->seqs[i];

		rs->ledger = ledger_entry(ledger, 0, r->slot_cpu[i]);
		rs->stride = ledger_n_cpus(ledger);
		for (uint32_t p = 0; p < PERFRELAY_MAX_PRODUCERS; p++) {
			const struct perfrelay_received *e = rs->ledger + (size_t) p * rs->stride;

			seqgap_init(&rs->seq[p].gap, STAT_LOAD(e->seq_next), STAT_LOAD(e->seq_gaps));
		}
	}
	if (cgroups) {
		k = cgroup_cache_new(
			READER_UNIT_CACHE_ENTRIES, cgroup_watch_resolve_container, cgroups, &r->units);
		if (k < 0)
			return k;
		k = cgroup_cache_new(
			READER_LINEAGE_UNIT_CACHE_ENTRIES,
			cgroup_watch_resolve_container,
			cgroups,
			&r->lineage_units);
		if (k < 0)
			return k;
	}
	r->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (r->epoll_fd < 0)
		return -errno;
	r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->stop_fd < 0)
		return -errno;
	for (size_t i = 0; i < n_rings; i++) {
		k = reader_epoll_ring(r, EPOLL_CTL_ADD, rings[i], i);
		if (k < 0)
			return k;
	}
	{
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = n_rings };

		if (epoll_ctl(r->epoll_fd, EPOLL_CTL_ADD, r->stop_fd, &ev) < 0)
			return -errno;
	}
	k = reader_hotplug_init(r);
	if (k < 0)
		return k;
	*ret = TAKE_PTR(r);
	return 0;
}

Reader *reader_free(Reader *r) {
	if (!r)
		return NULL;
	reader_stop(r, false);
	sem_destroy(&r->tid_known);
	for (size_t i = 0; i < r->n_rings; i++)
		ring_free(r->rings[i]);
	free(r->rings);
	free(r->slot_cpu);
	free(r->cpu_stats);
	free(r->seqs);
	free(r->drained_usec);
	free(r->held_usec);
	free(r->stats);
	cgroup_cache_free(r->units);
	cgroup_cache_free(r->lineage_units);
	safe_close(r->epoll_fd);
	safe_close(r->stop_fd);
	reader_hotplug_free(r);
	free(r);
	return NULL;
}

unsigned reader_id(const Reader *r) {
	return r->id;
}
const CpuSet *reader_cpus(const Reader *r) {
	return &r->cpus;
}
size_t reader_n_rings(const Reader *r) {
	return r->n_rings;
}
const Ring *reader_ring(const Reader *r, size_t i) {
	return __atomic_load_n(&r->rings[i], __ATOMIC_ACQUIRE);
}
unsigned reader_slot_cpu(const Reader *r, size_t i) {
	return r->slot_cpu[i];
}
const CpuStats *reader_cpu_stats(const Reader *r, size_t i) {
	return &r->cpu_stats[i];
}
const ReaderStats *reader_stats(const Reader *r) {
	return r->stats;
}

void reader_unit_cache_stats(const Reader *r, CgroupCacheStats *ret) {
	if (r->units)
		cgroup_cache_get_stats(r->units, ret);
	else
		*ret = (CgroupCacheStats){};
}

void reader_set_decoders(Reader *r, Decoders *d) {
	r->decoders = d;
}

void reader_set_frozen(Reader *r, int frozen) {
	atomic_store(&r->frozen, frozen);
}

static inline SeqState *seq_touch(RingSeq *rs, uint32_t producer) {
	if (!rs->is_dirty[producer]) {
		rs->is_dirty[producer] = 1;
		rs->dirty[rs->n_dirty++] = (uint16_t) producer;
	}
	return &rs->seq[producer];
}

/* Once per batch: what the batch read goes into the pinned ledger, so that it outlives us, and
 * into this reader's own figures. */
static void seq_flush(RingSeq *rs, ReaderStats *st) {
	for (uint32_t i = 0; i < rs->n_dirty; i++) {
		uint32_t p = rs->dirty[i];
		SeqState *s = &rs->seq[p];
		struct perfrelay_received *e = rs->ledger + (size_t) p * rs->stride;

		if (s->received) {
			STAT_ADD(e->received, s->received);
			STAT_ADD(st->received_by_producer[p], s->received);
		}
		if (s->malformed)
			STAT_ADD(e->malformed, s->malformed);
		STAT_STORE(e->seq_next, seqgap_next(&s->gap));
		STAT_STORE(e->seq_gaps, seqgap_gaps(&s->gap));
		s->received = s->malformed = 0;
		rs->is_dirty[p] = 0;
	}
	rs->n_dirty = 0;
}

/* Whether a record of a third-party type without a decoder is held in its ring (false), or
 * published as "unknown" now (true). A hold lasts until a scan that started after the record
 * was emitted has completed (decoders.h), at most READER_HOLD_MAX_MS. Only for subscribers:
 * without one, nobody would see the difference. */
static bool reader_hold_done(DrainCtx *d, const DecodedEvent *ev) {
	Reader *r = d->reader;

	if (!d->has_clients || !d->wants_all || !r->hold_ok ||
	    decoders_missing(r->decoders, r->id, ev->hdr.type, ev->hdr.ts_ns) == DECODER_UNKNOWN)
		return true;
	if (*d->held_usec == 0) {
		*d->held_usec = d->now;
		STAT_ADD(r->stats->decoder_holds, 1);
	} else if (d->now - *d->held_usec >= READER_HOLD_MAX_MS * 1000u) {
		STAT_ADD(r->stats->decoder_hold_expired, 1);
		decoders_settle(r->decoders, r->id, ev->hdr.type);
		*d->held_usec = 0; /* a hold of another type behind it gets its own time */
		return true;
	}
	d->held = true;
	return false;
}

/* A third-party record: its decoder from the producers' BTF, if the current scan has one.
 * Returns false when the record is to be held in its ring instead (reader_hold_done()). */
static bool reader_attach_decoder(DrainCtx *d, DecodedEvent *ev) {
	Reader *r = d->reader;
	const ProducerType *t;

	if (ev->hdr.type < PERFRELAY_TYPE_THIRD_PARTY_MIN)
		return true;
	t = r->scan ? producers_scan_find(r->scan, ev->hdr.type) : NULL;
	if (!t)
		return reader_hold_done(d, ev);
	if (!t->rec)
		return true; /* refused a decoder: counted when the scan was made */
	if (ev->hdr.size < btfrec_size(t->rec)) {
		STAT_ADD(r->stats->btf_short, 1);
		return true;
	}
	STAT_ADD(r->stats->btf_decoded, 1);
	ev->btf = t->rec;
	ev->producer_name = t->producer_name;
	ev->producer_type = t;
	return true;
}

static bool on_record(void *userdata, const uint8_t *rec, uint32_t size) {
	DrainCtx *d = userdata;
	ReaderStats *st = d->reader->stats;
	PerfRecordView v;
	DecodedEvent ev;
	DecodeError e;

	decode_perf_record(rec, size, &v);
	switch (v.kind) {
	case PERF_REC_SAMPLE:
		e = decode_event(v.raw, v.raw_size, &ev);
		if (_likely_(e == DECODE_OK)) {
			Reader *r = d->reader;
			const char *unit = NULL;
			const Container *container = NULL;

			if (_unlikely_(!ev.known) && r->decoders && !reader_attach_decoder(d, &ev))
				return false; /* held: not consumed, nothing counted */
			d->records++;
			d->received++;
			SeqState *s = seq_touch(d->seq, ev.hdr.producer);

			s->received++;
			seqgap_record(&s->gap, ev.hdr.seq);
			/* exec, fork and exit tell the process table (ancestor filters, the tree),
			 * clients or not; other types return at once. */
			if (proc_table_wants(&ev))
				proc_table_note(r->procs, &ev);
			/* Filters and JSON lines need the unit; a cache hit is a hash and a compare,
			 * a miss a syscall pair once per cgroup. Not worth it without clients. */
			if (!d->has_clients)
				return true;
			/* Nobody attached takes this type (the history's client alone, say). */
			if (!d->wants_all &&
			    (ev.hdr.type >= 64 || !(d->want_types & (UINT64_C(1) << ev.hdr.type))))
				return true;
			if (ev.cgroup_id != 0 && r->units)
				unit = cgroup_cache_resolve(r->units, ev.cgroup_id, &container);
			else if (ev.has_exec_id && r->units && cgroup_cache_any_containers(r->units))
				container = process_container(r, ev.exec_id);
			/* Set up only: walked if an "ancestor" filter asks. */
			lineage_reset(&r->lineage, &ev);
			hub_publish(
				r->hub,
				r->id,
				&ev,
				&(HubOrigin){ .unit = unit, .container = container },
				&r->lineage);
			return true;
		}
		d->records++;
		d->malformed++;
		STAT_ADD(st->malformed_by_reason[e], 1);
		if (v.raw_size >= offsetof(struct perfrelay_hdr, producer) + sizeof(uint32_t)) {
			uint32_t producer;

			memcpy(&producer, v.raw + offsetof(struct perfrelay_hdr, producer), sizeof(producer));
			if (producer < PERFRELAY_MAX_PRODUCERS) {
				STAT_ADD(st->malformed_by_producer[producer], 1);
				STAT_ADD(st->malformed_by_producer_reason[producer][e], 1);
				seq_touch(d->seq, producer)->malformed++;
			}
		}
		return true;
	case PERF_REC_LOST:
		d->records++;
		d->lost += v.lost;
		return true;
	case PERF_REC_OTHER:
		d->records++;
		d->other++;
		return true;
	case PERF_REC_MALFORMED:
		d->records++;
		d->malformed++;
		STAT_ADD(st->malformed_by_reason[DECODE_TRUNCATED], 1);
		return true;
	}
	return true;
}

/* Whether a ring trickles: it filled since its last drain (`bytes` and `records` in `elapsed`
 * microseconds) at a pace at which the kernel would not wake the reader within
 * READER_BUSY_FLUSH_MS, but fast enough that a look every READER_BUSY_FLUSH_MS would find at
 * least READER_BUSY_MIN_RECORDS records. */
static bool ring_trickles(const Ring *ring, uint64_t bytes, uint64_t records, uint64_t elapsed_usec) {
	uint64_t window_usec = READER_BUSY_FLUSH_MS * 1000u;

	if (records * window_usec < READER_BUSY_MIN_RECORDS * elapsed_usec)
		return false; /* too few to be worth a wakeup of their own: the idle flush serves them */
	if (ring_watermark(ring) > 0)
		return bytes * window_usec < (uint64_t) ring_watermark(ring) * elapsed_usec;
	return records * window_usec < (uint64_t) ring_wakeup_events(ring) * elapsed_usec;
}

/* What drain_all() learns from the rings it drains. */
typedef struct DrainTotals {
	bool any, more, trickle, holding;
} DrainTotals;

/* Drains one ring of slot i (the CPU's main ring, or its protected lane: `lane`) by at most
 * `budget` bytes. Both of a CPU's rings count into the CPU's figures and its sequence state:
 * a producer writes all its records into one of them, so its seq numbers stay in order. */
static void drain_ring(Reader *r, size_t i, Ring *ring, bool lane, uint64_t budget, uint64_t now, DrainTotals *t) {
	size_t k = lane ? r->n_rings + i : i;
	DrainCtx d = {
		.reader = r,
		.cpu = &r->cpu_stats[i],
		.seq = &r->seqs[i],
		.has_clients = hub_reader_has_clients(r->hub, r->id),
		.held_usec = &r->held_usec[k],
		.now = now,
	};
	uint64_t skipped;
	RingView view;
	int64_t n;

	if (!ring_pending(ring))
		return;
	d.wants_all = hub_reader_wants_all(r->hub, r->id, &d.want_types);
	ring_view(ring, &view);
	n = ring_view_drain(&view, budget, on_record, &d, &skipped);
	if (_unlikely_(d.held))
		t->holding = true; /* the drain stopped at a record it holds */
	else
		r->held_usec[k] = 0;
	if (_unlikely_(skipped > 0)) {
		STAT_ADD(d.cpu->corrupt, 1);
		STAT_ADD(d.cpu->corrupt_bytes, skipped);
		t->any = true;
	}
	if (d.seq->n_dirty)
		seq_flush(d.seq, r->stats);
	if (n > 0) {
		t->any = true;
		t->more |= (uint64_t) n >= budget;
		t->trickle |= ring_trickles(ring, (uint64_t) n, d.records, now - r->drained_usec[k]);
		r->drained_usec[k] = now;
		STAT_ADD(r->stats->batches, 1);
		STAT_ADD(d.cpu->bytes, (uint64_t) n);
	}
	if (d.received) {
		STAT_ADD(d.cpu->received, d.received);
		STAT_ADD(r->stats->events, d.received);
	}
	if (d.lost)
		STAT_ADD(d.cpu->lost, d.lost);
	if (d.malformed)
		STAT_ADD(d.cpu->malformed, d.malformed);
	if (d.other)
		STAT_ADD(d.cpu->other, d.other);
}

/* Drains every ring of the group that has data, once: first every protected lane (exec, fork
 * and exit; small and slow, so to empty), then the main rings. Returns 1 if a ring was left with
 * data (its budget ran out), 0 if all were drained; *ret_any tells whether anything was
 * consumed and *ret_trickle whether a ring fills too slowly to wake the reader soon (see
 * ring_trickles()). */
static int drain_all(Reader *r, uint64_t now, bool *ret_any, bool *ret_trickle) {
	DrainTotals t = {};

	hub_reader_begin(r->hub, r->id);
	if (r->decoders)
		r->scan = decoders_enter(r->decoders, r->id);
	for (size_t i = 0; i < r->n_rings; i++) {
		Ring *lane = r->rings[i] ? ring_lane(r->rings[i]) : NULL;

		if (lane)
			drain_ring(r, i, lane, true, ring_data_size(lane), now, &t);
	}
	/* Half a ring per turn keeps one busy CPU from starving the others of the group (and the
	 * lanes, which the next turn looks at first). NULL: parked, offline since the start. */
	for (size_t i = 0; i < r->n_rings; i++)
		if (r->rings[i])
			drain_ring(r, i, r->rings[i], false, ring_data_size(r->rings[i]) / 2, now, &t);
	if (r->decoders) {
		decoders_leave(r->decoders, r->id);
		r->scan = NULL;
	}
	hub_reader_end(r->hub, r->id);
	r->holding = t.holding;
	*ret_any = t.any;
	*ret_trickle = t.trickle;
	return t.more;
}

static int reader_set_fifo(pid_t tid, unsigned priority);

/* ReaderPriority='s budget (rt_budget_ns per READER_RT_WINDOW_USEC): back to SCHED_OTHER
 * once the window's budget is spent, back to SCHED_FIFO when the next window starts. */
static void reader_rt_check(Reader *r, uint64_t now) {
	unsigned priority = __atomic_load_n(&r->rt_priority, __ATOMIC_ACQUIRE);
	struct timespec ts;
	uint64_t cpu;

	if (priority == 0 || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return;
	cpu = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
	if (r->rt_window_usec == 0 || now - r->rt_window_usec >= READER_RT_WINDOW_USEC) {
		r->rt_window_usec = now;
		r->rt_window_cpu_ns = cpu;
		if (r->rt_demoted && reader_set_fifo(0, priority) == 0)
			r->rt_demoted = false;
		return;
	}
	if (!r->rt_demoted && cpu - r->rt_window_cpu_ns > r->rt_budget_ns) {
		int e = 0;

		if (reader_schedule(0, r->nice, 0, &e) == 0) {
			r->rt_demoted = true;
			STAT_ADD(r->stats->rt_demotions, 1);
		}
	}
}

static void *reader_thread(void *userdata) {
	Reader *r = userdata;
	struct epoll_event evs[64];
	bool stopping = false, any, trickle;
	int timeout = (int) r->flush_interval_ms;
	uint64_t now, trickled_usec = 0; /* when a drain last found a ring trickling */
	char name[16];

	r->tid = (pid_t) syscall(SYS_gettid);
	sem_post(&r->tid_known);
	snprintf(name, sizeof(name), "perfrelay-r%u", r->id);
	pthread_setname_np(pthread_self(), name);

	r->hold_ok = true;
	while (!stopping) {
		int n = epoll_wait(r->epoll_fd, evs, ELEMENTSOF(evs), timeout);

		if (n < 0 && errno != EINTR)
			break; /* cannot happen with a valid epoll fd; the watchdog notices the stall */
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u64 == r->n_rings)
				stopping = true;
			else if (evs[i].data.u64 == READER_CMD_KEY)
				reader_run_commands(r);
		}

#if PERFRELAY_FAULT_INJECTION
		while (atomic_load(&r->frozen) && !stopping)
			usleep(10000);
#endif
		/* Wakeups and flush timeouts alike drain every ring with data: the timeout is what
		 * delivers records that stay below the watermark. After a drain we sleep until the
		 * next watermark wakeup, like libbpf, unless a ring's budget ran out, or unless
		 * records trickle in too slowly to reach the watermark soon: then the next look is
		 * READER_BUSY_FLUSH_MS away instead of the idle flush interval, for as long as
		 * trickles keep coming within READER_BUSY_HOLD_MS (producers emit in bursts, and a
		 * look between two bursts finds nothing). */
		now = now_usec(CLOCK_MONOTONIC);
		if (drain_all(r, now, &any, &trickle))
			timeout = 0;
		else {
			if (trickle)
				trickled_usec = now;
			if (trickled_usec > 0 && now - trickled_usec < READER_BUSY_HOLD_MS * 1000u)
				timeout = (int) MIN(r->flush_interval_ms, READER_BUSY_FLUSH_MS);
			else
				timeout = (int) r->flush_interval_ms;
			/* The main thread does not wake us when the scan a held record waits for is
			 * done: look again shortly. Holds are rare and brief. */
			if (r->holding)
				timeout = (int) MIN((unsigned) timeout, READER_HOLD_POLL_MS);
		}
		if (any)
			STAT_ADD(r->stats->wakeups, 1);
		reader_rt_check(r, now);
		STAT_ADD(r->stats->progress, 1);
		STAT_STORE(r->stats->alive_usec, now_usec(CLOCK_MONOTONIC));
	}
	/* Last drain after the stop request. Once the manager cleared the array's slots and waited
	 * out the emitters in flight (r->until_empty), nothing can write into the rings any more:
	 * drain them to empty. Otherwise bounded, because producers that keep emitting would keep
	 * us here forever. Nothing is held any more: what stays in a ring at exit is lost. */
	r->hold_ok = false;
	for (unsigned pass = 0; atomic_load(&r->until_empty) || pass < 64; pass++)
		if (!drain_all(r, now_usec(CLOCK_MONOTONIC), &any, &trickle) && !any)
			break;
	return NULL;
}

/* The reader's CPUs, within those the daemon was allowed (from `allowed`). */
static void reader_affinity(const Reader *r, const cpu_set_t *allowed, cpu_set_t *ret) {
	cpu_set_t set, both;

	/* Alive from the start: the watchdog measures from here until the first loop ends. */
	STAT_STORE(r->stats->alive_usec, now_usec(CLOCK_MONOTONIC));
	CPU_ZERO(&set);
	for (int c = cpuset_next(&r->cpus, 0); c >= 0 && c < CPU_SETSIZE; c = cpuset_next(&r->cpus, c + 1))
		CPU_SET(c, &set);
	/* Only where the daemon was allowed to run (taskset, systemd's CPUAffinity=): whoever
	 * started it may have kept CPUs for other work. If none of the group's CPUs is allowed,
	 * the reader runs on the allowed ones and reads its rings from there. */
	if (allowed) {
		CPU_AND(&both, &set, allowed);
		set = CPU_COUNT(&both) > 0 ? both : *allowed;
	}
	*ret = set;
}

/* A reader that waits for a CPU while its rings fill loses records for every client. Two
 * things keep it from waiting behind busy clients on its CPUs: a nice value (its share when
 * they all run), and on kernels with EEVDF custom slices (6.12+) a short slice request, which
 * lets its wakeup preempt a task still in its protected slice (PREEMPT_SHORT) rather than wait
 * up to a whole base slice (3 ms on 2 CPUs, longer than a 64-page ring holds at full rate).
 * Older kernels ignore the slice. Returns 0, or 1 with the errno in *ret_errno. */
struct sched_attr_v1 {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

static int reader_set_fifo(pid_t tid, unsigned priority) {
	struct sched_attr_v1 a = {
		.size = sizeof(a),
		.sched_policy = SCHED_FIFO,
		.sched_priority = priority,
	};

	return syscall(SYS_sched_setattr, tid, &a, 0) == 0 ? 0 : -errno;
}

int reader_schedule(pid_t tid, int nice, unsigned priority, int *ret_errno) {
	struct sched_attr_v1 a = {
		.size = sizeof(a),
		.sched_policy = SCHED_OTHER,
		.sched_nice = nice,
		.sched_runtime = READER_SLICE_NS,
	};
	int fifo = 0;

	if (priority > 0) {
		fifo = reader_set_fifo(tid, priority);
		if (fifo == 0)
			return 0;
	}
	if (syscall(SYS_sched_setattr, tid, &a, 0) == 0) {
		if (fifo < 0)
			*ret_errno = -fifo;
		return fifo < 0;
	}
	/* Without the slice (a kernel that refuses it for SCHED_OTHER), at least the nice value. */
	if (setpriority(PRIO_PROCESS, (id_t) tid, nice) == 0)
		return 0;
	*ret_errno = errno;
	return 1;
}

int reader_start(Reader *r, int nice, unsigned priority, unsigned budget_percent, int *ret_errno) {
	pthread_attr_t attr;
	cpu_set_t set;
	int k;

	/* Before the thread: it reads them once rt_priority says so. */
	r->nice = nice;
	r->rt_budget_ns = (uint64_t) READER_RT_WINDOW_USEC * 1000u * MIN(MAX(budget_percent, 1u), 100u) / 100u;
	r->has_allowed = sched_getaffinity(0, sizeof(r->allowed), &r->allowed) == 0;
	reader_affinity(r, r->has_allowed ? &r->allowed : NULL, &set);

	pthread_attr_init(&attr);
	/* Pinned to its group's CPUs: their rings' data is hot in the shared cache. */
	pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	k = pthread_create(&r->thread, &attr, reader_thread, r);
	pthread_attr_destroy(&attr);
	if (k != 0)
		return -k;
	r->started = true;
	/* The thread's first act is to say who it is. */
	while (sem_wait(&r->tid_known) < 0 && errno == EINTR)
		;
	k = reader_schedule(r->tid, nice, priority, ret_errno);
	/* The thread reads it on its next loop: published with the start of its first window. */
	__atomic_store_n(&r->rt_priority, k == 0 ? priority : 0, __ATOMIC_RELEASE);
	return k;
}

void reader_stop(Reader *r, bool until_empty) {
	uint64_t one = 1;

	if (!r->started)
		return;
	atomic_store(&r->until_empty, until_empty);
	(void) !write(r->stop_fd, &one, sizeof(one));
	pthread_join(r->thread, NULL);
	r->started = false;
}

/* CPU hotplug: the main thread hands rings to the thread that owns them through a queue of
 * commands; the thread alone changes its rings and its epoll set. */

typedef struct ReaderCmd {
	unsigned cpu;
	Ring *ring; /* the CPU's new ring, or NULL: the CPU went offline */
} ReaderCmd;

static int reader_hotplug_init(Reader *r) {
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = READER_CMD_KEY };

	r->cmd_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->cmd_fd < 0)
		return negative_errno();
	if (epoll_ctl(r->epoll_fd, EPOLL_CTL_ADD, r->cmd_fd, &ev) < 0)
		return negative_errno();
	return 0;
}

static void reader_hotplug_free(Reader *r) {
	for (size_t i = 0; i < r->n_cmds; i++)
		ring_free(r->cmds[i].ring);
	free(r->cmds);
	for (size_t i = 0; i < r->n_retired; i++)
		ring_free(r->retired[i]);
	free(r->retired);
	safe_close(r->cmd_fd);
	pthread_mutex_destroy(&r->cmd_lock);
}

int reader_replace_ring(Reader *r, unsigned cpu, Ring *ring) {
	uint64_t one = 1;
	ReaderCmd *cmds;
	size_t i;

	for (i = 0; i < r->n_rings; i++)
		if (r->slot_cpu[i] == cpu)
			break;
	if (i == r->n_rings) {
		ring_free(ring);
		return -ENOENT;
	}
	/* Not started (or stopped): nobody reads, the main thread may swap the ring itself. */
	if (!r->started) {
		int k;

		if (!ring)
			return 0;
		(void) reader_epoll_ring(r, EPOLL_CTL_DEL, r->rings[i], i);
		k = reader_epoll_ring(r, EPOLL_CTL_ADD, ring, i);
		if (k < 0) {
			(void) reader_epoll_ring(r, EPOLL_CTL_DEL, ring, i);
			ring_free(ring);
			return k;
		}
		ring_free(r->rings[i]);
		__atomic_store_n(&r->rings[i], ring, __ATOMIC_RELEASE);
		return 0;
	}

	pthread_mutex_lock(&r->cmd_lock);
	cmds = realloc(r->cmds, (r->n_cmds + 1) * sizeof(ReaderCmd));
	if (!cmds) {
		pthread_mutex_unlock(&r->cmd_lock);
		ring_free(ring);
		return -ENOMEM;
	}
	r->cmds = cmds;
	r->cmds[r->n_cmds++] = (ReaderCmd){ .cpu = cpu, .ring = ring };
	pthread_mutex_unlock(&r->cmd_lock);
	(void) !write(r->cmd_fd, &one, sizeof(one));
	return 0;
}

/* On the reader thread. The old ring is drained to empty first: what its CPU wrote before it
 * went (or before the main thread emptied its slot) is delivered, not dropped with it. */
static void reader_run_command(Reader *r, const ReaderCmd *c, Ring ***retired, size_t *n_retired) {
	bool any, trickle;
	size_t i;

	for (i = 0; i < r->n_rings; i++)
		if (r->slot_cpu[i] == c->cpu)
			break;
	if (i == r->n_rings) {
		ring_free(c->ring);
		return;
	}
	/* The old ring goes: nothing in it may stay held. */
	r->hold_ok = false;
	for (unsigned pass = 0; pass < 64; pass++)
		if (!drain_all(r, now_usec(CLOCK_MONOTONIC), &any, &trickle) && !any)
			break;
	r->hold_ok = true;
	/* Its perf event is dead or going; a stale EPOLLHUP would wake us for nothing. */
	(void) reader_epoll_ring(r, EPOLL_CTL_DEL, r->rings[i], i);
	if (!c->ring)
		return; /* the ring stays in place, empty, until the CPU returns */

	/* Fails only short of memory; the ring is then still read on every flush timeout. */
	(void) reader_epoll_ring(r, EPOLL_CTL_ADD, c->ring, i);
	if (r->rings[i]) /* NULL: the CPU was parked since the start */
		(*retired)[(*n_retired)++] = r->rings[i];
	__atomic_store_n(&r->rings[i], c->ring, __ATOMIC_RELEASE);
	r->drained_usec[i] = r->drained_usec[r->n_rings + i] = now_usec(CLOCK_MONOTONIC);

	/* While all of our CPUs were offline the kernel moved us elsewhere and widened our
	 * affinity: pin the thread to its group again. */
	{
		cpu_set_t set;

		reader_affinity(r, r->has_allowed ? &r->allowed : NULL, &set);
		(void) pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
}

static void reader_run_commands(Reader *r) {
	uint64_t n;
	ReaderCmd *cmds;
	size_t n_cmds, n_retired = 0;
	Ring **retired;

	(void) !read(r->cmd_fd, &n, sizeof(n));
	pthread_mutex_lock(&r->cmd_lock);
	cmds = TAKE_PTR(r->cmds);
	n_cmds = r->n_cmds;
	r->n_cmds = 0;
	pthread_mutex_unlock(&r->cmd_lock);
	if (n_cmds == 0)
		return;

	/* Rare (a CPU going or coming), so an allocation here is no hot-path cost. */
	retired = calloc(n_cmds, sizeof(Ring *));
	for (size_t i = 0; i < n_cmds; i++) {
		if (!retired) {
			ring_free(cmds[i].ring); /* the old ring stays: records are not lost, the CPU is */
			continue;
		}
		reader_run_command(r, &cmds[i], &retired, &n_retired);
	}
	free(cmds);
	if (n_retired == 0) {
		free(retired);
		return;
	}
	pthread_mutex_lock(&r->cmd_lock);
	{
		Ring **all = realloc(r->retired, (r->n_retired + n_retired) * sizeof(Ring *));

		if (all) {
			memcpy(all + r->n_retired, retired, n_retired * sizeof(Ring *));
			r->retired = all;
			r->n_retired += n_retired;
			n_retired = 0;
		}
	}
	pthread_mutex_unlock(&r->cmd_lock);
	/* Out of memory: the old rings leak their mapping rather than being freed here, where the
	 * main thread might still look at them through reader_ring(). */
	free(retired);
}

void reader_free_retired_rings(Reader *r) {
	Ring **retired;
	size_t n;

	pthread_mutex_lock(&r->cmd_lock);
	retired = TAKE_PTR(r->retired);
	n = r->n_retired;
	r->n_retired = 0;
	pthread_mutex_unlock(&r->cmd_lock);
	for (size_t i = 0; i < n; i++)
		ring_free(retired[i]);
	free(retired);
}
