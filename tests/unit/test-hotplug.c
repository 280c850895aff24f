/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* hotplug_parse_uevent(): which kernel uevents are CPU hotplug, and garbage is rejected. */
#include <string.h>

#include "features/hotplug/hotplug.h"
#include "unit-test.h"

/* A uevent datagram as the kernel sends it: NUL-separated, the header first. */
#define UEVENT(s) s, sizeof(s)

static void test_cpu_events(void) {
	unsigned cpu = 99;
	bool online = true;

	ASSERT(hotplug_parse_uevent(
		       UEVENT("offline@/devices/system/cpu/cpu1\0ACTION=offline\0"
			      "DEVPATH=/devices/system/cpu/cpu1\0SUBSYSTEM=cpu\0SEQNUM=7"),
		       &cpu,
		       &online) == 1);
	ASSERT(cpu == 1 && !online);
	ASSERT(hotplug_parse_uevent(
		       UEVENT("online@/devices/system/cpu/cpu127\0ACTION=online"), &cpu, &online) == 1);
	ASSERT(cpu == 127 && online);
}

static void test_other_events(void) {
	unsigned cpu = 5;
	bool online = false;

	/* Not hotplug, or not a CPU: 0 and the outputs untouched. */
	ASSERT(hotplug_parse_uevent(UEVENT("change@/devices/system/cpu/cpu1\0ACTION=change"), &cpu, &online) ==
	       0);
	ASSERT(hotplug_parse_uevent(UEVENT("online@/devices/system/memory/memory3\0"), &cpu, &online) == 0);
	ASSERT(hotplug_parse_uevent(UEVENT("online@/devices/system/cpu/cpufreq\0"), &cpu, &online) == 0);
	ASSERT(hotplug_parse_uevent(UEVENT("online@/devices/system/cpu/cpu1/cache\0"), &cpu, &online) == 0);
	ASSERT(hotplug_parse_uevent(UEVENT("onlinex@/devices/system/cpu/cpu1\0"), &cpu, &online) == 0);
	ASSERT(cpu == 5 && !online);
	/* udev's own datagrams ("libudev" magic) and headers without '@' or NUL are malformed. */
	ASSERT(hotplug_parse_uevent("libudev\0\xfe\xed\xca\xfe", 12, &cpu, &online) < 0);
	ASSERT(hotplug_parse_uevent("online/devices/system/cpu/cpu1", 30, &cpu, &online) < 0);
	ASSERT(cpu == 5 && !online);
}

int main(void) {
	test_cpu_events();
	test_other_events();

	if (failures) {
		fprintf(stderr, "%d assertion(s) failed\n", failures);
		return 1;
	}
	return 0;
}
