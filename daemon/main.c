/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayd: command line, then the manager does the rest. */
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "perfrelay-config.h"

#include "config/config.h"
#include "base/log.h"
#include "features/feature-table.h"
#include "core/manager.h"
#include "kernel/pins.h"

static void help(void) {
	printf("perfrelayd [OPTIONS...]\n\n"
	       "Relays BPF perf events to subscribers.\n\n"
	       "  -h --help            Show this help\n"
	       "     --version         Show the version\n"
	       "  -c --config=FILE     Configuration file (default %s; drop-ins in FILE.d/)\n"
	       "     --pin-path=DIR    Override PinPath= (the bpffs directory of the pins)\n"
	       "     --stdout          Print every decoded event as a JSON line on standard output\n"
	       "     --cleanup         Remove every pin perfrelay owns under PinPath= and exit\n"
	       "                       (refused while a daemon serves PinPath=)\n"
	       "  -v --verbose         Log debug messages (including libbpf's)\n",
	       CONFIG_DEFAULT_FILE);
}

int main(int argc, char *argv[]) {
	enum { ARG_VERSION = 0x100, ARG_PIN_PATH, ARG_STDOUT, ARG_CLEANUP };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "version", no_argument, NULL, ARG_VERSION },
						 { "config", required_argument, NULL, 'c' },
						 { "pin-path", required_argument, NULL, ARG_PIN_PATH },
						 { "stdout", no_argument, NULL, ARG_STDOUT },
						 { "cleanup", no_argument, NULL, ARG_CLEANUP },
						 { "verbose", no_argument, NULL, 'v' },
						 {} };
	ManagerOptions o = { .config_path = CONFIG_DEFAULT_FILE };
	bool cleanup = false;
	_cleanup_(manager_freep) Manager *m = NULL;
	int c, r;

	log_setup();
	/* Blocked before any thread exists, so reader threads inherit the mask and the signals
	 * reach only the event loop's signalfd. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
#if PERFRELAY_FAULT_INJECTION
	sigaddset(&mask, SIGUSR2);
#endif
	sigprocmask(SIG_BLOCK, &mask, NULL);
	/* A client that hangs up must make writev() fail with EPIPE, not kill the daemon. */
	signal(SIGPIPE, SIG_IGN);
	/* Client queues (256 KiB and up) must go back to the kernel when their client leaves.
	 * glibc raises its mmap threshold each time a larger mmapped block is freed (the stats
	 * snapshot is one), after which queues would come from the heap and stay resident after
	 * client churn; a fixed threshold keeps them mmapped. */
	(void) mallopt(M_MMAP_THRESHOLD, 128 * 1024);

	while ((c = getopt_long(argc, argv, "hc:v", options, NULL)) >= 0)
		switch (c) {
		case 'h':
			help();
			return EXIT_SUCCESS;
		case ARG_VERSION:
			printf("perfrelayd %s\n", PERFRELAY_VERSION_STRING);
			return EXIT_SUCCESS;
		case 'c':
			o.config_path = optarg;
			break;
		case ARG_PIN_PATH:
			if (optarg[0] != '/') {
				log_error("--pin-path=%s: must be an absolute path", optarg);
				return EXIT_FAILURE;
			}
			o.pin_path = optarg;
			break;
		case ARG_STDOUT:
			o.stdout_events = true;
			break;
		case ARG_CLEANUP:
			cleanup = true;
			break;
		case 'v':
			log_max_level = LOG_DEBUG;
			break;
		default:
			return EXIT_FAILURE;
		}
	if (optind < argc) {
		log_error("Unexpected argument: %s", argv[optind]);
		return EXIT_FAILURE;
	}

	r = manager_new(&o, feature_table, feature_table_size, &m);
	if (r < 0)
		return EXIT_FAILURE;
	if (cleanup) {
		r = pins_cleanup(o.pin_path ?: manager_pin_path(m));
		return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
	}

	r = manager_start(m);
	if (r < 0 && manager_kernel_unsupported(m))
		return PERFRELAY_EXIT_KERNEL;
	if (r >= 0)
		r = manager_run(m);
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
