/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Opening one CPU's BPF output perf ring (perfring-open.h). */
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "kernel/perfring-open.h"

void perf_ring_attr(const PerfRingAttr *a, struct perf_event_attr *ret) {
	*ret = (struct perf_event_attr){
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(*ret),
		.config = PERF_COUNT_SW_BPF_OUTPUT,
		.sample_type = PERF_SAMPLE_RAW,
		.sample_period = 1,
		.write_backward = a->backward,
	};
	if (a->bpf_events) {
		ret->config = PERF_COUNT_SW_DUMMY;
		ret->sample_type = 0;
		ret->sample_period = 0;
		ret->bpf_event = 1;
	}
	if (a->watermark > 0) {
		ret->watermark = 1;
		ret->wakeup_watermark = a->watermark;
	} else
		ret->wakeup_events = a->wakeup_events ?: 1;
}

int perf_ring_open(unsigned cpu, const PerfRingAttr *a, PerfRingMap *ret) {
	struct perf_event_attr attr;
	long page = sysconf(_SC_PAGESIZE);
	_cleanup_close_ int fd = -EBADF;
	size_t map_size;
	void *map;

	if (a->pages == 0 || (a->pages & (a->pages - 1)) || page <= 0)
		return -EINVAL;
	perf_ring_attr(a, &attr);
	fd = (int) syscall(SYS_perf_event_open, &attr, -1, (int) cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	map_size = (size_t) page * (1 + a->pages);
	/* PROT_WRITE makes a non-overwrite ring (the consumer owns data_tail); PROT_READ alone an
	 * overwrite ring, as perf's "overwritable" backward rings are. */
	map = mmap(NULL, map_size, a->backward ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) < 0) {
		int r = -errno;

		munmap(map, map_size);
		return r;
	}
	*ret = (PerfRingMap){
		.fd = TAKE_FD(fd),
		.meta = map,
		.data = (uint8_t *) map + page,
		.map_size = map_size,
		.data_size = (uint64_t) page * a->pages,
	};
	return 0;
}

void perf_ring_close(PerfRingMap *m) {
	if (m->meta)
		munmap(m->meta, m->map_size);
	m->meta = NULL;
	m->data = NULL;
	m->fd = safe_close(m->fd);
}
