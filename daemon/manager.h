/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager owns everything the daemon runs: config, probes and pins, rings and reader
 * threads, the hub and its clients, and the sd-event loop of the main thread. */
#pragma once

#include <stdbool.h>

#include <systemd/sd-event.h>

#include "macro.h"

typedef struct Manager Manager;

typedef struct ManagerOptions {
	const char *config_path; /* main config file; drop-ins in "<config_path>.d" */
	const char *pin_path;    /* overrides PinPath= when set */
	bool stdout_events;      /* --stdout: a JSON-lines client on fd 1 */
} ManagerOptions;

int manager_new(const ManagerOptions *o, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Pins, probes, rings, readers: everything up to READY=1. */
int manager_start(Manager *m);
/* Runs the event loop until SIGTERM/SIGINT; drains the rings on the way out. */
int manager_run(Manager *m);

const char *manager_pin_path(const Manager *m);

/* After a failed manager_start(): whether it failed because the kernel lacks a required feature. */
bool manager_kernel_unsupported(const Manager *m);
/* perfrelayd's exit status when the kernel lacks a required feature (LSB: "unimplemented
 * feature"), so that units and scripts can tell it from other failures (docs/kernels.md). */
#define PERFRELAY_EXIT_KERNEL 3
