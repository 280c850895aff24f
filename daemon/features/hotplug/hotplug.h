/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU hotplug notifications: the kernel's "online"/"offline" uevents of CPU devices, read from
 * a NETLINK_KOBJECT_UEVENT socket on the main thread's event loop. Main thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <systemd/sd-event.h>

#include "macro.h"

typedef struct HotplugWatch HotplugWatch;

/* Called for every CPU that went offline (online = false) or came online. */
typedef void (*HotplugFn)(void *userdata, unsigned cpu, bool online);

/* Kernel uevents, not udev's: they need no udevd (containers, early boot), and a CPU taken
 * offline and back within milliseconds shows as two events, where re-reading
 * /sys/devices/system/cpu/online later would show no change at all. */
int hotplug_watch_new(sd_event *event, HotplugFn fn, void *userdata, HotplugWatch **ret);
HotplugWatch *hotplug_watch_free(HotplugWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(HotplugWatch *, hotplug_watch_free);

/* Parses one kernel uevent datagram ("ACTION@DEVPATH\0KEY=VALUE\0..."): 1 and *ret_cpu,
 * *ret_online for an "online"/"offline" event of /devices/system/cpu/cpuN, 0 for any other
 * uevent, -EINVAL for a malformed one. */
int hotplug_parse_uevent(const char *buf, size_t size, unsigned *ret_cpu, bool *ret_online);
