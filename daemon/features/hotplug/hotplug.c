/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU hotplug notifications from the kernel's uevent netlink socket. */
#include <errno.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "features/hotplug/hotplug.h"
#include "macro.h"

/* The kernel's uevent multicast group (udev's own events go to group 2). */
#define UEVENT_GROUP_KERNEL 1u
/* A uevent is at most UEVENT_BUFFER_SIZE (2048) bytes in the kernel. */
#define UEVENT_MAX          2048

struct HotplugWatch {
	int fd;
	sd_event_source *source;
	HotplugFn fn;
	void *userdata;
};

int hotplug_parse_uevent(const char *buf, size_t size, unsigned *ret_cpu, bool *ret_online) {
	static const char prefix[] = "/devices/system/cpu/cpu";
	const char *at, *end = memchr(buf, '\0', size), *num;
	bool online;
	char *e;
	unsigned long cpu;

	if (!end)
		return -EINVAL;
	at = memchr(buf, '@', (size_t) (end - buf));
	if (!at)
		return -EINVAL;
	if ((size_t) (at - buf) == strlen("online") && memcmp(buf, "online", strlen("online")) == 0)
		online = true;
	else if ((size_t) (at - buf) == strlen("offline") && memcmp(buf, "offline", strlen("offline")) == 0)
		online = false;
	else
		return 0;
	if (strncmp(at + 1, prefix, strlen(prefix)) != 0)
		return 0;
	num = at + 1 + strlen(prefix);
	if (*num < '0' || *num > '9')
		return 0; /* cpufreq, cpuidle, ... */
	errno = 0;
	cpu = strtoul(num, &e, 10);
	if (errno != 0 || *e != '\0' || cpu > 1u << 20)
		return 0;
	*ret_cpu = (unsigned) cpu;
	*ret_online = online;
	return 1;
}

static int on_uevent(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
	HotplugWatch *w = userdata;
	char buf[UEVENT_MAX + 1];

	for (;;) {
		struct sockaddr_nl sa = {};
		struct iovec iov = { .iov_base = buf, .iov_len = UEVENT_MAX };
		struct msghdr mh = {
			.msg_name = &sa, .msg_namelen = sizeof(sa), .msg_iov = &iov, .msg_iovlen = 1
		};
		ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
		unsigned cpu;
		bool online;

		if (n < 0)
			return 0; /* EAGAIN; ENOBUFS (events lost) is caught by the manager's tick */
		/* Only the kernel (port 0) speaks for CPUs: anyone may send to a multicast group. */
		if (sa.nl_pid != 0 || n == 0)
			continue;
		buf[n] = '\0';
		if (hotplug_parse_uevent(buf, (size_t) n + 1, &cpu, &online) > 0)
			w->fn(w->userdata, cpu, online);
	}
}

int hotplug_watch_new(sd_event *event, HotplugFn fn, void *userdata, HotplugWatch **ret) {
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = UEVENT_GROUP_KERNEL };
	_cleanup_(hotplug_watch_freep) HotplugWatch *w = NULL;
	int r;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fn = fn;
	w->userdata = userdata;
	w->fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT);
	if (w->fd < 0 || bind(w->fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
		return negative_errno();
	r = sd_event_add_io(event, &w->source, w->fd, EPOLLIN, on_uevent, w);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(w);
	return 0;
}

HotplugWatch *hotplug_watch_free(HotplugWatch *w) {
	if (!w)
		return NULL;
	sd_event_source_disable_unref(w->source);
	safe_close(w->fd);
	free(w);
	return NULL;
}
