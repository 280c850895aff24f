/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's configuration: defaults, INI parsing of perfrelay.conf and its drop-ins.
 * Pure logic apart from config_load() reading files; never logs: errors come back as text
 * that names file:line and the key at fault. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernel/cpuset.h"
#include "macro.h"
#include "kernel/probes.h"

#define CONFIG_DEFAULT_FILE       "/etc/perfrelay/perfrelay.conf"
#define CONFIG_DEFAULT_DROPIN_DIR "/etc/perfrelay/perfrelay.conf.d"
#define CONFIG_MAX_CPU_GROUPS     256u
#define CONFIG_MAX_GROUPS         64u
#define CONFIG_MAX_FILE_BYTES     (1u << 20) /* a config file larger than this is an error */

/* The type of a key's value: how it is parsed and stored. */
typedef enum ValueType {
	VALUE_BOOL,
	VALUE_UINT, /* decimal integer in [min, max] */
	VALUE_SIZE, /* like VALUE_UINT with an optional K/M/G suffix */
	VALUE_POW2, /* like VALUE_UINT and a power of two */
	VALUE_NICE, /* a nice value, -20..19, into an int */
	VALUE_PATH, /* absolute, normalized path */
	VALUE_PROBES,
	VALUE_COUNTERS,
	VALUE_CPU_GROUPS,
	VALUE_GROUPS,   /* group names or gids, into a GroupList */
	VALUE_COMMS,    /* process names, into a CommList */
	VALUE_PATTERNS, /* absolute paths, or prefixes ending in "*", into a PathPatternList */
	VALUE_UNITS,    /* systemd unit names (not slices), into a UnitList */
} ValueType;

typedef struct ConfigKey {
	const char *section;
	const char *name;
	ValueType type;
	size_t offset;              /* of the field in Config, or in its part's struct */
	size_t width;               /* sizeof the field, for integer and bool types */
	uint64_t min, max;          /* bounds for integer types; max length for paths */
	const char *default_string; /* VALUE_PATH */
	bool live;                  /* a reload applies it; otherwise it takes a restart */
} ConfigKey;

/* A key's field: its offset and width in `type` (the Config, or a part's struct). */
#define CONFIG_FIELD(type, f) offsetof(type, f), sizeof(((type *) NULL)->f)

/* The keys of a section that a feature owns (feature.h, FeatureVtable.config): their values
 * live in a struct of the feature's, of `size` bytes, which `defaults` holds first. A section
 * may also have keys of the core (PendingSyscalls= of [Probes]); its name is the same in both.
 * Part keys are of the scalar types (bool, integers, names lists): nothing to free or copy
 * deeply. */
typedef struct ConfigPart {
	const char *section;
	const ConfigKey *keys;
	size_t n_keys;
	size_t size;
	const void *defaults;
} ConfigPart;

/* Groups named in the config (names resolved to gids at load). */
typedef struct GroupList {
	gid_t *gids;
	size_t n;
} GroupList;

/* [Readers] ProcessTableEntries=: the process table of hub/proctable.h. */
#define PROC_TABLE_DEFAULT 32768u /* entries: 2 MiB */
#define PROC_TABLE_MIN     64u
#define PROC_TABLE_MAX     (1u << 22)

typedef struct Config {
	/* [Daemon] */
	char *pin_path;                 /* PinPath=, default /sys/fs/bpf/perfrelay; absolute */
	bool replace_incompatible_pins; /* ReplaceIncompatiblePins=, default no */

	/* [Ring] */
	unsigned pages_per_cpu;          /* PagesPerCpu=, power of two 1..65536, default 512 */
	unsigned critical_pages_per_cpu; /* CriticalPagesPerCpu=: the protected lane's, default 64 */
	uint32_t watermark;              /* Watermark= bytes (K/M suffix), default 0 = auto (1/4 ring) */
	uint32_t wakeup_events;          /* WakeupEvents=, default 0; used when set and Watermark= is 0 */
	unsigned flush_interval_ms;      /* FlushIntervalMs=, 1..1000, default 50 */

	/* [Readers] */
	CpuSet *cpu_groups;              /* CpuGroups= "0-3 4-7" (space-separated CPU lists) */
	size_t n_cpu_groups;             /* 0 = not set */
	unsigned cpus_per_reader;        /* CpusPerReader=, 0 = not set; exclusive with CpuGroups= */
	int reader_nice;                 /* ReaderNice=, -20..19, default -10 */
	unsigned reader_priority;        /* ReaderPriority=, 0..99, default 0: SCHED_OTHER */
	unsigned reader_priority_budget; /* ReaderPriorityBudget=, % of each window, 1..100, default 50 */
	unsigned process_table_entries;  /* ProcessTableEntries=, PROC_TABLE_MIN..PROC_TABLE_MAX */

	/* [Probes] (Probes= is the probe feature's) */
	uint32_t pending_syscalls; /* PendingSyscalls=, default 10240, 16..1048576 */

	/* [Socket] */
	char *socket_path;           /* SocketPath=, default /run/perfrelay/events.sock */
	char *history_path;          /* [History] HistoryPath=, default /var/lib/perfrelay/history */
	char *podman_root;           /* [Containers] PodmanRoot=, default /var/lib/containers/storage */
	char *docker_root;           /* [Containers] DockerRoot=, default /var/lib/docker */
	uint64_t client_queue_bytes; /* ClientQueueBytes=, default 4M, 64K..1G */
	uint64_t shared_ring_bytes;  /* SharedRingBytes=, default 32M, 0 (off) or up to 1G */
	unsigned max_shared_rings;   /* MaxSharedRings=, default 64, 1..4096 */
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

	/* [Counters] (docs/counters.md): the sizes of the counters' pinned tables, which the core's
	 * probes make; the section's other keys are the counters feature's. */
	uint32_t counters_max_processes; /* CountersMaxProcesses=, 16..4194304, default 32768 */
	uint32_t counters_max_cgroups;   /* CountersMaxCgroups=, 16..1048576, default 4096 */

	/* The sections of features (ConfigPart), and their values, in the order given to config_new(). */
	const ConfigPart *const *parts;
	size_t n_parts;
	void **part_data;
	const char **sections; /* the core's section names and the parts' */
	size_t n_sections;
} Config;

/* All defaults; `parts` (n_parts of them, which outlive the Config) add the features' sections. */
int config_new(const ConfigPart *const *parts, size_t n_parts, Config **ret);
/* A part's values (its struct), or NULL if the Config was made without that part. */
const void *config_part(const Config *c, const ConfigPart *part);
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
/* How many keys the schema has, with the parts' (the shipped perfrelay.conf lists each:
 * tests/unit/test-config.c). */
size_t config_n_keys(const Config *c);

/* Reload: the keys a reload cannot apply (documented as "restart" in docs/config.md) keep their
 * running values. For each that `new` changes, the running value goes into `new` (so that the
 * active configuration says what is in effect; `running` gets the other, to free with it) and
 * "Key=" is added to *ret_list, a comma-separated list (NULL when none). */
int config_keep_restart_keys(Config *new, Config *running, char **ret_list);
