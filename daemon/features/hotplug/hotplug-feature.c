/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CPU hotplug (docs/pipeline.md): kernel uevents say at once that a CPU went offline or came
 * back (an offline/online pair may last milliseconds), and a look at /sys once a second catches
 * what uevents missed. The core retires or replaces the CPU's ring (manager_cpu_online()). */
#include "features/feature-table.h"
#include "core/manager.h"
#include "features/hotplug/hotplug.h"
#include "base/log.h"

typedef struct HotplugFeature {
	Feature feature;
	HotplugWatch *watch; /* NULL where uevents cannot be had (the tick remains) */
} HotplugFeature;

static void on_cpu_hotplug(void *userdata, unsigned cpu, bool online) {
	Feature *f = userdata;

	if (online)
		manager_cpu_online(f->manager, cpu);
	else
		manager_cpu_offline(f->manager, cpu);
}

static int hotplug_setup(Feature *f) {
	HotplugFeature *h = (HotplugFeature *) f;
	int r = hotplug_watch_new(manager_event(f->manager), on_cpu_hotplug, f, &h->watch);

	if (r < 0)
		log_warning_errno(
			r,
			"Cannot watch CPU hotplug uevents (%m): a CPU taken offline and back "
			"within a second may stay without a ring");
	return 0;
}

static void hotplug_tick(Feature *f) {
	manager_cpus_check(f->manager);
}

static void hotplug_done(Feature *f) {
	HotplugFeature *h = (HotplugFeature *) f;

	h->watch = hotplug_watch_free(h->watch);
}

const FeatureVtable hotplug_feature = {
	.name = "hotplug",
	.object_size = sizeof(HotplugFeature),
	.setup = hotplug_setup,
	.tick = hotplug_tick,
	.done = hotplug_done,
};
