/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's configuration: defaults, INI parsing of perfrelay.conf and its drop-ins.
 * Pure logic apart from config_load() reading files; never logs: errors come back as text
 * that names file:line and the key at fault. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cpuset.h"
#include "macro.h"
#include "probes.h"

#define CONFIG_DEFAULT_FILE       "/etc/perfrelay/perfrelay.conf"
#define CONFIG_DEFAULT_DROPIN_DIR "/etc/perfrelay/perfrelay.conf.d"
#define CONFIG_MAX_CPU_GROUPS     256u
#define CONFIG_MAX_GROUPS         64u
#define CONFIG_MAX_FILE_BYTES     (1u << 20) /* a config file larger than this is an error */

/* Groups named in the config (names resolved to gids at load). */
typedef struct GroupList {
	gid_t *gids;
	size_t n;
} GroupList;

typedef struct Config {
	/* [Daemon] */
	char *pin_path;                 /* PinPath=, default /sys/fs/bpf/perfrelay; absolute */
	bool replace_incompatible_pins; /* ReplaceIncompatiblePins=, default no */

	/* [Ring] */
	unsigned pages_per_cpu;     /* PagesPerCpu=, power of two 1..65536, default 512 */
	uint32_t watermark;         /* Watermark= bytes (K/M suffix), default 0 = auto (1/4 ring) */
	uint32_t wakeup_events;     /* WakeupEvents=, default 0; used when set and Watermark= is 0 */
	unsigned flush_interval_ms; /* FlushIntervalMs=, 1..1000, default 50 */

	/* [Readers] */
	CpuSet *cpu_groups;       /* CpuGroups= "0-3 4-7" (space-separated CPU lists) */
	size_t n_cpu_groups;      /* 0 = not set */
	unsigned cpus_per_reader; /* CpusPerReader=, 0 = not set; exclusive with CpuGroups= */
	int reader_nice;          /* ReaderNice=, -20..19, default -10 */

	/* [Probes] */
	uint32_t probes;           /* Probes= list of names or "all", default all */
	uint32_t pending_syscalls; /* PendingSyscalls=, default 10240, 16..1048576 */

	/* [Socket] */
	char *socket_path;                 /* SocketPath=, default /run/perfrelay/events.sock */
	uint64_t client_queue_bytes;       /* ClientQueueBytes=, default 4M, 64K..1G */
	uint64_t shared_ring_bytes;        /* SharedRingBytes=, default 32M, 0 (off) or up to 1G */
	unsigned max_shared_rings;         /* MaxSharedRings=, default 64, 1..4096 */
	unsigned max_shared_rings_per_uid; /* MaxSharedRingsPerUid=, default 4, 1..4096 */
	unsigned max_clients;              /* MaxClients=, default 256, 1..65536 */
	unsigned max_clients_per_uid;      /* MaxClientsPerUid=, default 32, 1..65536 */
	uint64_t max_queue_bytes;         /* MaxQueueBytes=, default 512M, 1M..1T: users but root together */
	uint64_t max_queue_bytes_per_uid; /* MaxQueueBytesPerUid=, default 64M, 256K..1T */
	uint32_t max_request_bytes;       /* MaxRequestBytes=, default 65536, 256..1M */
	unsigned request_timeout_ms;      /* RequestTimeoutMs=, default 5000, 10..600000 */
	unsigned max_json_depth;          /* MaxJsonDepth=, default 8, 2..64 */
	GroupList allow_groups;           /* AllowGroups=: members see every user's events */
	GroupList control_groups; /* ControlGroups=: members act (Snapshot, captures; docs/security.md) */

	/* [Bus] */
	unsigned bus_events_per_second; /* BusEventsPerSecond=, default 100, 1..100000 */

	/* [Recorder] (docs/recorder.md) */
	bool recorder;                   /* Recorder=, default yes */
	unsigned recorder_pages_per_cpu; /* RecorderPagesPerCpu=, power of two 1..65536, default 256 */

	/* [Counters] (docs/counters.md) */
	uint32_t counters;               /* Counters= names, bits PERFRELAY_COUNTER_*; 0: none */
	unsigned counters_interval_ms;   /* CountersIntervalMs=, 100..3600000, default 1000 */
	uint32_t counters_max_processes; /* CountersMaxProcesses=, 16..4194304, default 32768 */
	uint32_t counters_max_cgroups;   /* CountersMaxCgroups=, 16..1048576, default 4096 */

	/* [Capture] (docs/capture.md) */
	uint32_t capture_bytes; /* CaptureBytes=, 1..65000, default 128: the most a capture takes */
	unsigned max_captures;  /* MaxCaptures=, 1..64, default 8 */
	uint32_t capture_packets_per_second; /* CapturePacketsPerSecond=, 0..10000000, default 10000 (0: none) */
	bool allow_host_captures; /* AllowHostCaptures=, default no: ControlGroups= members may capture / and interfaces */
} Config;

int config_new(Config **ret);   /* all defaults */
Config *config_free(Config *c); /* accepts NULL; returns NULL */
DEFINE_TRIVIAL_CLEANUP_FUNC(Config *, config_free);

/* Parses INI text (sections and keys above, case-sensitive, '#' or ';' comments, blank lines,
 * "Key=Value" with whitespace around the value trimmed; a key may appear again and the last
 * value wins, except that an empty value resets it to its default). Unknown sections, unknown
 * keys and bad values are errors: *ret_error is set to "FILE:LINE: message" (malloc'd). */
int config_parse_text(Config *c, const char *text, size_t size, const char *filename, char **ret_error);

/* Loads main_path (a missing file is fine: defaults) and then every "*.conf" in dropin_dir in
 * alphabetical order (a missing directory is fine). Validates the combination at the end
 * (e.g. CpuGroups= and CpusPerReader= together is an error). */
int config_load(Config *c, const char *main_path, const char *dropin_dir, char **ret_error);

/* Checks cross-key constraints; called by config_load() and usable after config_parse_text(). */
int config_validate(const Config *c, char **ret_error);
/* How many keys the schema has (the shipped perfrelay.conf lists each: tests/unit/test-config.c). */
size_t config_n_keys(void);

/* Reload: the keys a reload cannot apply (documented as "restart" in docs/config.md) keep their
 * running values. For each that `new` changes, the running value goes into `new` (so that the
 * active configuration says what is in effect; `running` gets the other, to free with it) and
 * "Key=" is added to *ret_list, a comma-separated list (NULL when none). */
int config_keep_restart_keys(Config *new, Config *running, char **ret_list);
