/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The flight recorder's rings (recorder.h): overwrite mode as the kernel's perf ring buffer
 * document describes it ("ring buffer types"): write_backward=1 and a PROT_READ mapping, so the
 * kernel never waits for a reader and never emits PERF_RECORD_LOST; it writes each record below
 * the previous one and data_head always points at the newest. A snapshot pauses the ring
 * (PERF_EVENT_IOC_PAUSE_OUTPUT: outputs fail with -ENOSPC meanwhile, counted by producers as
 * "paused"), all rings at once, waits out the writes in flight (a grace period), loads
 * data_head with acquire semantics, copies the data area from data_head forward and resumes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>

#include "event.h"
#include "kernel/grace.h"
#include "kernel/percpu.h"
#include "kernel/perfring.h"
#include "kernel/perfring-open.h"
#include "features/recorder/recorder.h"
#include "time-util.h"

typedef struct RecRing {
	unsigned cpu;
	int fd;
	struct perf_event_mmap_page *meta;
	uint8_t *data;
	size_t map_size;
	uint64_t data_size;
	uint64_t written_at_open; /* recorder_stats.written of this CPU when the ring was opened */
	/* recorder_window_start()'s samples of this CPU's written count, oldest overwritten. */
	struct {
		uint64_t at_ns, written;
	} samples[RECORDER_WINDOW_SAMPLES];
	unsigned n_samples, next_sample;
} RecRing;

struct Recorder {
	int array_fd, on_fd, stats_fd;
	unsigned pages;
	RecRing *rings;
	size_t n_rings;
	unsigned n_possible;
	bool stopped;
	uint64_t snapshots;
	uint64_t pause_max_ns;
};

/* The pinned per-CPU stats, one entry per possible CPU. */
static int read_stats(const Recorder *r, struct perfrelay_recorder_stats *per_cpu) {
	uint32_t key = 0;

	if (bpf_map_lookup_elem(r->stats_fd, &key, per_cpu) < 0)
		return -errno;
	return 0;
}

static int ring_open_backward(RecRing *ring, unsigned cpu, unsigned pages) {
	long page = sysconf(_SC_PAGESIZE);
	/* Nobody polls these rings: a wakeup only when a whole ring was written keeps the kernel's
	 * irq_work off the producers' path. */
	PerfRingAttr a = {
		.pages = pages,
		.backward = true,
		.watermark = (uint32_t) MIN((uint64_t) page * pages, (uint64_t) UINT32_MAX),
	};
	PerfRingMap m;
	int k;

	ring->cpu = cpu;
	k = perf_ring_open(cpu, &a, &m);
	if (k < 0)
		return k;
	ring->fd = m.fd;
	ring->meta = m.meta;
	ring->data = m.data;
	ring->map_size = m.map_size;
	ring->data_size = m.data_size;
	return 0;
}

int recorder_new(
	const CpuSet *cpus, unsigned pages, uint32_t types, int array_fd, int on_fd, int stats_fd, Recorder **ret) {
	_cleanup_(recorder_freep) Recorder *r = NULL;
	_cleanup_free_ struct perfrelay_recorder_stats *per_cpu = NULL;
	int n_possible, k;

	if (pages == 0 || (pages & (pages - 1)) || types == 0)
		return -EINVAL;
	n_possible = libbpf_num_possible_cpus();
	if (n_possible <= 0)
		return n_possible ?: -EINVAL;
	r = calloc(1, sizeof(*r));
	per_cpu = calloc((size_t) n_possible, sizeof(*per_cpu));
	if (!r || !per_cpu)
		return -ENOMEM;
	r->array_fd = array_fd;
	r->on_fd = on_fd;
	r->stats_fd = stats_fd;
	r->pages = pages;
	r->n_possible = (unsigned) n_possible;
	r->rings = calloc(cpuset_count(cpus) ?: 1, sizeof(RecRing));
	if (!r->rings)
		return -ENOMEM;
	k = read_stats(r, per_cpu);
	if (k < 0)
		return k;
	FOREACH_CPU(cpu, cpus) {
		RecRing *ring = &r->rings[r->n_rings];

		ring->fd = -EBADF;
		r->n_rings++;
		k = ring_open_backward(ring, (unsigned) cpu, pages);
		if (k < 0)
			return k;
		if ((unsigned) cpu < r->n_possible)
			ring->written_at_open = per_cpu[cpu].written;
		if (bpf_map_update_elem(array_fd, &(uint32_t){ (uint32_t) cpu }, &ring->fd, BPF_ANY) < 0)
			return -errno;
	}
	k = recorder_set_types(r, types);
	if (k < 0)
		return k;
	*ret = TAKE_PTR(r);
	return 0;
}

int recorder_set_types(Recorder *r, uint32_t types) {
	uint32_t key = 0;

	if (!r || r->stopped)
		return 0;
	if (types == 0)
		return -EINVAL;
	/* One update of a __u32 value: an emitter reads the old mask or the new one. */
	if (bpf_map_update_elem(r->on_fd, &key, &types, BPF_ANY) < 0)
		return -errno;
	return 0;
}

int recorder_cpu_online(Recorder *r, unsigned cpu) {
	_cleanup_free_ struct perfrelay_recorder_stats *per_cpu = NULL;
	RecRing *ring = NULL, fresh = { .fd = -EBADF };
	int k;

	if (!r || r->stopped)
		return 0;
	for (size_t i = 0; i < r->n_rings; i++)
		if (r->rings[i].cpu == cpu)
			ring = &r->rings[i];
	k = ring_open_backward(&fresh, cpu, r->pages);
	if (k >= 0 && bpf_map_update_elem(r->array_fd, &(uint32_t){ cpu }, &fresh.fd, BPF_ANY) < 0)
		k = -errno;
	if (k < 0) {
		if (fresh.meta)
			munmap(fresh.meta, fresh.map_size);
		safe_close(fresh.fd);
		return k;
	}
	per_cpu = calloc(r->n_possible, sizeof(*per_cpu));
	if (per_cpu && cpu < r->n_possible && read_stats(r, per_cpu) >= 0)
		fresh.written_at_open = per_cpu[cpu].written;
	if (ring) {
		/* The old event died with the CPU's offline: what it held is lost with it. */
		munmap(ring->meta, ring->map_size);
		safe_close(ring->fd);
		*ring = fresh;
		return 0;
	}
	ring = reallocarray(r->rings, r->n_rings + 1, sizeof(RecRing));
	if (!ring) {
		(void) bpf_map_delete_elem(r->array_fd, &(uint32_t){ cpu });
		munmap(fresh.meta, fresh.map_size);
		safe_close(fresh.fd);
		return -ENOMEM;
	}
	r->rings = ring;
	r->rings[r->n_rings++] = fresh;
	return 0;
}

void recorder_clear(int array_fd, int on_fd, unsigned n_cpus) {
	uint32_t key = 0, off = 0;

	/* Off first: emitters stop trying before the slots go. */
	(void) bpf_map_update_elem(on_fd, &key, &off, BPF_ANY);
	for (uint32_t cpu = 0; cpu < n_cpus; cpu++)
		(void) bpf_map_delete_elem(array_fd, &cpu);
}

void recorder_stop(Recorder *r) {
	if (!r || r->stopped)
		return;
	r->stopped = true;
	/* Every slot: those of CPUs we gave no ring are empty since the start. */
	recorder_clear(r->array_fd, r->on_fd, r->n_possible);
}

Recorder *recorder_free(Recorder *r) {
	if (!r)
		return NULL;
	recorder_stop(r);
	for (size_t i = 0; i < r->n_rings; i++) {
		if (r->rings[i].meta)
			munmap(r->rings[i].meta, r->rings[i].map_size);
		safe_close(r->rings[i].fd);
	}
	free(r->rings);
	free(r);
	return NULL;
}

void recorder_copies_free(RecorderCopy *c, size_t n) {
	for (size_t i = 0; c && i < n; i++)
		free(c[i].data);
	free(c);
}

int recorder_snapshot(Recorder *r, RecorderCopy **ret, size_t *ret_n) {
	_cleanup_free_ struct perfrelay_recorder_stats *per_cpu = calloc(r->n_possible, sizeof(*per_cpu));
	RecorderCopy *copies = calloc(r->n_rings ?: 1, sizeof(*copies));
	int k;

	if (!copies || !per_cpu) {
		free(copies);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->n_rings; i++) {
		copies[i].data = malloc(r->rings[i].data_size);
		if (!copies[i].data) {
			recorder_copies_free(copies, r->n_rings);
			return -ENOMEM;
		}
	}
	/* Every ring paused first, then one grace period: PAUSE_OUTPUT refuses new outputs but
	 * does not wait for one already writing, whose record lands below data_head, in the
	 * region a copy takes last (the oldest records): it would tear the oldest record. After
	 * the grace period every write has ended, data_head is final and so are the written
	 * counts, which then match what the rings hold (kept + overwritten = written). */
	for (size_t i = 0; i < r->n_rings; i++) {
		copies[i].cpu = r->rings[i].cpu;
		copies[i].size = r->rings[i].data_size;
		copies[i].pause_ns = now_nsec(CLOCK_MONOTONIC); /* paused at; made a duration below */
		if (ioctl(r->rings[i].fd, PERF_EVENT_IOC_PAUSE_OUTPUT, 1) < 0) {
			k = -errno;
			for (size_t j = 0; j < i; j++)
				(void) ioctl(r->rings[j].fd, PERF_EVENT_IOC_PAUSE_OUTPUT, 0);
			recorder_copies_free(copies, r->n_rings);
			return k;
		}
	}
	(void) grace_period(NULL); /* cannot fail where the daemon started: it settled with it */
	if (read_stats(r, per_cpu) >= 0)
		for (size_t i = 0; i < r->n_rings; i++)
			if (copies[i].cpu < r->n_possible)
				copies[i].written = per_cpu[copies[i].cpu].written -
					r->rings[i].written_at_open;
	for (size_t i = 0; i < r->n_rings; i++) {
		RecRing *ring = &r->rings[i];
		RecorderCopy *c = &copies[i];
		uint64_t head, off, mask = ring->data_size - 1;

		/* Pairs with the kernel's publication of data_head after it wrote a record
		 * (smp_wmb, then the store): the records below head are complete. */
		head = __atomic_load_n(&ring->meta->data_head, __ATOMIC_ACQUIRE);
		off = head & mask;
		memcpy(c->data, ring->data + off, ring->data_size - off);
		memcpy(c->data + (ring->data_size - off), ring->data, off);
		(void) ioctl(ring->fd, PERF_EVENT_IOC_PAUSE_OUTPUT, 0);
		c->pause_ns = now_nsec(CLOCK_MONOTONIC) - c->pause_ns;
		r->pause_max_ns = MAX(r->pause_max_ns, c->pause_ns);
	}
	r->snapshots++;
	*ret = copies;
	*ret_n = r->n_rings;
	return 0;
}

size_t recorder_copy_walk(
	const RecorderCopy *c, void (*fn)(const uint8_t *rec, uint32_t size, void *userdata), void *userdata) {
	uint64_t pos = 0;
	size_t n = 0;

	while (c->size - pos >= sizeof(struct perf_event_header)) {
		struct perf_event_header h;

		memcpy(&h, c->data + pos, sizeof(h));
		/* Zero: never written. Too small, unaligned or past the end: the oldest record,
		 * overwritten in part by newer ones (or a write that was in flight when the ring
		 * was paused). */
		if (h.size < sizeof(h) || h.size % 8 != 0 || h.size > c->size - pos)
			break;
		fn(c->data + pos, h.size, userdata);
		pos += h.size;
		n++;
	}
	return n;
}

void recorder_get_stats(Recorder *r, RecorderStats *ret) {
	struct perfrelay_recorder_stats sum = {};
	RecorderStats st = {};

	if (r) {
		st.snapshots = r->snapshots;
		st.pause_max_ns = r->pause_max_ns;
		if (PERCPU_SUM(r->stats_fd, 0, r->n_possible, &sum) >= 0) {
			st.written = sum.written;
			st.paused = sum.paused;
			st.failed = sum.failed;
		}
	}
	*ret = st;
}

unsigned recorder_pages(const Recorder *r) {
	return r->pages;
}

uint64_t recorder_window_start(Recorder *r, uint64_t now_ns) {
	_cleanup_free_ struct perfrelay_recorder_stats *per_cpu = NULL;
	/* The fewest records that fill a ring: the smallest sample (perf header, size, a record
	 * header of 32 bytes, padded to 8) is 48 bytes. */
	uint64_t fill, start = UINT64_MAX;

	if (!r || r->stopped || r->n_rings == 0)
		return 0;
	per_cpu = calloc(r->n_possible, sizeof(*per_cpu));
	if (!per_cpu || read_stats(r, per_cpu) < 0)
		return 0;
	fill = r->rings[0].data_size / 48;
	for (size_t i = 0; i < r->n_rings; i++) {
		RecRing *ring = &r->rings[i];
		uint64_t written = ring->cpu < r->n_possible ? per_cpu[ring->cpu].written : 0, cpu_start = 0;

		/* The newest sample after which the ring took a whole ring's worth of records: nothing
		 * it held before that moment is left. */
		for (unsigned k = 0; k < ring->n_samples; k++)
			if (written - ring->samples[k].written >= fill && ring->samples[k].at_ns > cpu_start)
				cpu_start = ring->samples[k].at_ns;
		start = MIN(start, cpu_start);
		ring->samples[ring->next_sample].at_ns = now_ns;
		ring->samples[ring->next_sample].written = written;
		ring->next_sample = (ring->next_sample + 1) % RECORDER_WINDOW_SAMPLES;
		ring->n_samples = MIN(ring->n_samples + 1, RECORDER_WINDOW_SAMPLES);
	}
	return start;
}
