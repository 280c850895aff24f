/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's configuration: its keys (sections, types, bounds, defaults, live or restart),
 * how each value is checked and applied, and validation; the file syntax is conf-parser.c's. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/conf-parser.h"
#include "config/config.h"
#include "kernel/unitname.h"
#include "error-util.h"
#include "macro.h"
#include "kernel/counter-names.h"

#define DEFAULT_PIN_PATH     "/sys/fs/bpf/perfrelay"
#define DEFAULT_SOCKET_PATH  "/run/perfrelay/events.sock"
#define DEFAULT_HISTORY_PATH "/var/lib/perfrelay/history"
#define DEFAULT_PODMAN_ROOT  "/var/lib/containers/storage"
#define DEFAULT_DOCKER_ROOT  "/var/lib/docker"

/* Pins live below PinPath= ("events", "links/<probe>"): keep room for their names. */
#define PIN_PATH_MAX    (PATH_MAX - 64)
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *) NULL)->sun_path) - 1)

/* getgrnam_r() buffers grow up to this; a group entry larger than this is an error. */
#define GROUP_BUFFER_MAX (1u << 20)


static const Config config_defaults = {
	.pin_path = NULL, /* strings come from ConfigKey.default_string */
	.replace_incompatible_pins = false,
	.pages_per_cpu = 512,
	.critical_pages_per_cpu = 64,
	.watermark = 0,
	.wakeup_events = 0,
	.flush_interval_ms = 50,
	.cpus_per_reader = 0,
	.pending_syscalls = 10240,
	.client_queue_bytes = 4 * MIB,
	.shared_ring_bytes = 32 * MIB,
	.reader_nice = -10,
	.reader_priority_budget = 50,
	.process_table_entries = PROC_TABLE_DEFAULT,
	.max_shared_rings = 64,
	.max_shared_rings_per_uid = 4,
	.max_clients = 256,
	.max_clients_per_uid = 32,
	.max_queue_bytes = 512 * MIB,
	.max_queue_bytes_per_uid = 64 * MIB,
	.max_request_bytes = 65536,
	.request_timeout_ms = 5000,
	.max_json_depth = 8,
	.bus_events_per_second = 100,
	.counters_max_processes = 32768,
	.counters_max_cgroups = 4096,
};

#define FIELD(f) CONFIG_FIELD(Config, f)

static const ConfigKey config_keys[] = {
	{ "Daemon", "PinPath", VALUE_PATH, FIELD(pin_path), 0, PIN_PATH_MAX, DEFAULT_PIN_PATH, false },
	{ "Daemon", "ReplaceIncompatiblePins", VALUE_BOOL, FIELD(replace_incompatible_pins), 0, 0, NULL, false },

	{ "Ring", "PagesPerCpu", VALUE_POW2, FIELD(pages_per_cpu), 1, 65536, NULL, false },
	{ "Ring", "CriticalPagesPerCpu", VALUE_POW2, FIELD(critical_pages_per_cpu), 1, 65536, NULL, false },
	{ "Ring", "Watermark", VALUE_SIZE, FIELD(watermark), 0, UINT32_MAX, NULL, false },
	{ "Ring", "WakeupEvents", VALUE_UINT, FIELD(wakeup_events), 0, UINT32_MAX, NULL, false },
	{ "Ring", "FlushIntervalMs", VALUE_UINT, FIELD(flush_interval_ms), 1, 1000, NULL, false },

	{ "Readers", "CpuGroups", VALUE_CPU_GROUPS, 0, 0, 0, 0, NULL, false },
	{ "Readers", "CpusPerReader", VALUE_UINT, FIELD(cpus_per_reader), 0, PERFRELAY_MAX_CPUS, NULL, false },
	{ "Readers", "ReaderNice", VALUE_NICE, FIELD(reader_nice), 0, 0, NULL, false },
	{ "Readers", "ReaderPriority", VALUE_UINT, FIELD(reader_priority), 0, 99, NULL, false },
	{ "Readers", "ReaderPriorityBudget", VALUE_UINT, FIELD(reader_priority_budget), 1, 100, NULL, false },
	{ "Readers",
	  "ProcessTableEntries",
	  VALUE_UINT,
	  FIELD(process_table_entries),
	  PROC_TABLE_MIN,
	  PROC_TABLE_MAX,
	  NULL,
	  false },

	/* Probes= is the probe feature's (features/probes/probes-config.c). */
	{ "Probes", "PendingSyscalls", VALUE_UINT, FIELD(pending_syscalls), 16, 1048576, NULL, false },

	{ "Socket", "SocketPath", VALUE_PATH, FIELD(socket_path), 0, SOCKET_PATH_MAX, DEFAULT_SOCKET_PATH, false },
	{ "Socket", "ClientQueueBytes", VALUE_SIZE, FIELD(client_queue_bytes), 64 * KIB, GIB, NULL, true },
	{ "Socket", "SharedRingBytes", VALUE_SIZE, FIELD(shared_ring_bytes), 0, GIB, NULL, true },
	{ "Socket", "MaxSharedRings", VALUE_UINT, FIELD(max_shared_rings), 1, 4096, NULL, true },
	{ "Socket", "MaxSharedRingsPerUid", VALUE_UINT, FIELD(max_shared_rings_per_uid), 1, 4096, NULL, true },
	{ "Socket", "MaxClients", VALUE_UINT, FIELD(max_clients), 1, 65536, NULL, true },
	{ "Socket", "MaxClientsPerUid", VALUE_UINT, FIELD(max_clients_per_uid), 1, 65536, NULL, true },
	{ "Socket", "MaxQueueBytes", VALUE_SIZE, FIELD(max_queue_bytes), MIB, 1024 * GIB, NULL, true },
	{ "Socket",
	  "MaxQueueBytesPerUid",
	  VALUE_SIZE,
	  FIELD(max_queue_bytes_per_uid),
	  256 * KIB,
	  1024 * GIB,
	  NULL,
	  true },
	{ "Socket", "MaxRequestBytes", VALUE_SIZE, FIELD(max_request_bytes), 256, MIB, NULL, true },
	{ "Socket", "RequestTimeoutMs", VALUE_UINT, FIELD(request_timeout_ms), 10, 600000, NULL, true },
	{ "Socket", "MaxJsonDepth", VALUE_UINT, FIELD(max_json_depth), 2, 64, NULL, true },
	{ "Socket", "AllowGroups", VALUE_GROUPS, FIELD(allow_groups), 0, 0, NULL, true },
	{ "Socket", "ControlGroups", VALUE_GROUPS, FIELD(control_groups), 0, 0, NULL, true },

	/* History= and its other keys are the history feature's (features/history/history-config.c). */
	{ "History", "HistoryPath", VALUE_PATH, FIELD(history_path), 0, PATH_MAX - 32, DEFAULT_HISTORY_PATH, false },
	{ "Containers", "PodmanRoot", VALUE_PATH, FIELD(podman_root), 0, PATH_MAX - 64, DEFAULT_PODMAN_ROOT, false },
	{ "Containers", "DockerRoot", VALUE_PATH, FIELD(docker_root), 0, PATH_MAX - 160, DEFAULT_DOCKER_ROOT, false },

	{ "Bus", "BusEventsPerSecond", VALUE_UINT, FIELD(bus_events_per_second), 1, 100000, NULL, true },

	/* The sizes of the counters' pinned tables, which the core's probes make (probes_new()); the
	 * section's other keys are the counters feature's (features/counters/counters-config.c). */
	{ "Counters", "CountersMaxProcesses", VALUE_UINT, FIELD(counters_max_processes), 16, 4194304, NULL, false },
	{ "Counters", "CountersMaxCgroups", VALUE_UINT, FIELD(counters_max_cgroups), 16, 1048576, NULL, false },
};

size_t config_n_keys(const Config *c) {
	size_t n = ELEMENTSOF(config_keys);

	for (size_t i = 0; c && i < c->n_parts; i++)
		n += c->parts[i]->n_keys;
	return n;
}

/* The core's sections; the parts add theirs (a part may share one with the core). */
static const char *const core_sections[] = { "Daemon", "Ring", "Readers",  "Probes",
					     "Socket", "Bus",  "Counters", "History" };

static void store_uint(void *field, size_t width, uint64_t v) {
	switch (width) {
	case sizeof(uint8_t):
		*(uint8_t *) field = (uint8_t) v;
		break;
	case sizeof(uint16_t):
		*(uint16_t *) field = (uint16_t) v;
		break;
	case sizeof(uint32_t):
		*(uint32_t *) field = (uint32_t) v;
		break;
	default:
		*(uint64_t *) field = v;
		break;
	}
}

static int apply_uint(ConfParseState *st, const ConfigKey *k, void *field) {
	bool with_suffix = k->type == VALUE_SIZE;
	char lo[32], hi[32];
	uint64_t v;
	int r;

	r = conf_parse_u64(st->value, with_suffix, &v);
	if (r >= 0 && v >= k->min && v <= k->max && (k->type != VALUE_POW2 || (v & (v - 1)) == 0)) {
		store_uint(field, k->width, v);
		return 0;
	}

	conf_format_size(k->min, with_suffix, lo, sizeof(lo));
	conf_format_size(k->max, with_suffix, hi, sizeof(hi));
	if (k->type == VALUE_POW2)
		return conf_line_error(st, "must be a power of two between %s and %s", lo, hi);
	if (with_suffix)
		return conf_line_error(
			st, "must be a size between %s and %s (bytes, or with a K, M or G suffix)", lo, hi);
	return conf_line_error(st, "must be an integer between %s and %s", lo, hi);
}

static int apply_nice(ConfParseState *st, void *field) {
	const char *v = st->value;
	bool negative = *v == '-';
	uint64_t n;

	if (conf_parse_u64(v + negative, false, &n) >= 0 && (negative ? n <= 20 : n <= 19)) {
		*(int *) field = negative ? -(int) n : (int) n;
		return 0;
	}
	return conf_line_error(st, "must be a nice value between -20 and 19");
}

/* Absolute and normalized: no empty, "." or ".." components, no trailing slash, no control
 * characters, and not "/" itself. Symlinks are not resolved: the path is used as written. */
static bool path_is_normalized_absolute(const char *p) {
	if (p[0] != '/' || p[1] == 0)
		return false;
	for (const char *c = p; *c; c++)
		if ((unsigned char) *c < 0x20 || *c == 0x7f)
			return false;
	for (const char *c = p; *c;) {
		const char *e;
		size_t n;

		c++; /* skip the '/' */
		e = strchrnul(c, '/');
		n = (size_t) (e - c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c = e;
	}
	return true;
}

static int apply_path(ConfParseState *st, const ConfigKey *k, char **field) {
	char *copy;

	if (!path_is_normalized_absolute(st->value))
		return conf_line_error(
			st,
			"must be an absolute, normalized path (no \".\" or \"..\" "
			"components, no \"//\", no trailing \"/\")");
	if (strlen(st->value) > k->max)
		return conf_line_error(st, "path is too long (at most %" PRIu64 " bytes)", k->max);
	copy = strdup(st->value);
	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

/* A list of names that are bits of a mask (Probes=, Counters=), or one of two words that
 * stand alone: the whole set (or the default one) and none. */
typedef struct NameList {
	const char *what;     /* "probe", "counter" */
	const char *all_word; /* "all", "default" */
	uint32_t all_mask;    /* what all_word means */
	unsigned n;           /* the names are to_string(0..n-1): the module's own table */
	const char *(*to_string)(unsigned i);
	int (*from_string)(const char *s);
} NameList;

static const NameList probe_names = {
	"probe", "all", PROBES_ALL, _PROBE_MAX, probe_to_string, probe_from_string,
};
static const NameList counter_names = {
	"counter",         "default",           COUNTERS_DEFAULT, PERFRELAY_COUNTERS_MAX,
	counter_to_string, counter_from_string,
};

typedef struct NamesState {
	const NameList *list;
	uint32_t mask;
	unsigned n_words;
	bool special; /* all_word or "none" was seen */
} NamesState;

static int names_word(ConfParseState *st, const char *word, void *userdata) {
	NamesState *ns = userdata;
	const NameList *l = ns->list;
	_cleanup_free_ char *esc = NULL;
	char known[256];
	size_t o = 0;
	int p;

	ns->n_words++;
	if (streq(word, l->all_word) || streq(word, "none")) {
		ns->special = true;
		ns->mask = streq(word, "none") ? 0 : l->all_mask;
	} else {
		p = l->from_string(word);
		if (p < 0) {
			esc = conf_escape(word, CONF_ERROR_VALUE_MAX);
			if (!esc)
				return -ENOMEM;
			known[0] = 0;
			for (unsigned i = 0; i < l->n && o + 1 < sizeof(known); i++) {
				int w = snprintf(
					known + o, sizeof(known) - o, "%s%s", o ? " " : "", l->to_string(i));

				if (w < 0)
					break;
				o = MIN(o + (size_t) w, sizeof(known) - 1);
			}
			return conf_line_error(
				st,
				"unknown %s \"%s\" (known: %s, or %s or none)",
				l->what,
				esc,
				known,
				l->all_word);
		}
		ns->mask |= 1u << p;
	}
	if (ns->special && ns->n_words > 1)
		return conf_line_error(
			st, "\"%s\" and \"none\" cannot be combined with other %s names", l->all_word, l->what);
	return 0;
}

static int apply_names(ConfParseState *st, const NameList *list, uint32_t *field) {
	NamesState ns = { .list = list };
	int r;

	r = conf_for_each_word(st, true, names_word, &ns);
	if (r < 0)
		return r;
	if (ns.n_words == 0)
		return conf_line_error(st, "no %s names (use \"none\" for none)", list->what);
	*field = ns.mask;
	return 0;
}

typedef struct CpuGroupsState {
	CpuSet *groups;
	size_t n;
} CpuGroupsState;

static int cpu_groups_word(ConfParseState *st, const char *word, void *userdata) {
	CpuGroupsState *gs = userdata;
	_cleanup_free_ char *esc = NULL;
	CpuSet set;
	CpuSet *a;
	int r;

	esc = conf_escape(word, CONF_ERROR_VALUE_MAX);
	if (!esc)
		return -ENOMEM;

	r = cpuset_parse(word, &set);
	if (r == -ERANGE)
		return conf_line_error(
			st, "CPU group \"%s\": CPU numbers must be below %u", esc, PERFRELAY_MAX_CPUS);
	if (r < 0)
		return conf_line_error(st, "CPU group \"%s\": not a CPU list such as 0-3,8", esc);
	if (cpuset_is_empty(&set)) /* cannot happen for a non-empty word, but keep the promise */
		return conf_line_error(st, "CPU group \"%s\" is empty", esc);
	for (size_t i = 0; i < gs->n; i++)
		if (cpuset_intersects(&gs->groups[i], &set)) {
			char other[64];
			if (cpuset_format(&gs->groups[i], other, sizeof(other)) < 0)
				strcpy(other, "an earlier group");
			return conf_line_error(
				st, "CPU group \"%s\" overlaps %s; groups must be disjoint", esc, other);
		}
	if (gs->n >= CONFIG_MAX_CPU_GROUPS)
		return conf_line_error(st, "too many CPU groups (at most %u)", CONFIG_MAX_CPU_GROUPS);

	a = reallocarray(gs->groups, gs->n + 1, sizeof(CpuSet));
	if (!a)
		return -ENOMEM;
	gs->groups = a;
	gs->groups[gs->n++] = set;
	return 0;
}

static int apply_cpu_groups(ConfParseState *st, Config *c) {
	CpuGroupsState gs = {};
	int r;

	r = conf_for_each_word(st, false, cpu_groups_word, &gs);
	if (r < 0) {
		free(gs.groups);
		return r;
	}
	free(c->cpu_groups);
	c->cpu_groups = gs.groups;
	c->n_cpu_groups = gs.n;
	return 0;
}

/* Resolves a group name with getgrnam_r(): 0 and *ret on success, -ESRCH if there is no such
 * group, another negative errno if the lookup itself failed. */
static int lookup_group(const char *name, gid_t *ret) {
	size_t size = 1024;

	for (;;) {
		_cleanup_free_ char *buf = malloc(size);
		struct group grp, *result = NULL;
		int r;

		if (!buf)
			return -ENOMEM;
		r = getgrnam_r(name, &grp, buf, size, &result);
		if (r == ERANGE && size < GROUP_BUFFER_MAX) {
			size *= 2;
			continue;
		}
		if (r == 0 && result) {
			*ret = result->gr_gid;
			return 0;
		}
		/* glibc documents these as "not found" codes some NSS modules return. */
		if (r == 0 || r == ENOENT || r == ESRCH || r == EBADF || r == EPERM)
			return -ESRCH;
		return -r;
	}
}

typedef struct GroupsState {
	gid_t *gids;
	size_t n;
} GroupsState;

static int groups_word(ConfParseState *st, const char *word, void *userdata) {
	GroupsState *as = userdata;
	_cleanup_free_ char *esc = NULL;
	gid_t gid = 0;
	gid_t *a;
	uint64_t v;
	int r;

	esc = conf_escape(word, CONF_ERROR_VALUE_MAX);
	if (!esc)
		return -ENOMEM;

	if (word[0] >= '0' && word[0] <= '9') {
		/* All digits is a gid, as for chown; (gid_t) -1 means "no group" to the kernel. */
		r = conf_parse_u64(word, false, &v);
		if (r < 0 || v >= (gid_t) -1)
			return conf_line_error(st, "\"%s\" is not a valid numeric group id", esc);
		gid = (gid_t) v;
	} else {
		r = lookup_group(word, &gid);
		if (r == -ESRCH)
			return conf_line_error(st, "unknown group \"%s\"", esc);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			return conf_line_error_errno(st, r, "failed to look up group \"%s\": %m", esc);
	}

	for (size_t i = 0; i < as->n; i++)
		if (as->gids[i] == gid)
			return 0; /* listed twice (or by name and by number): harmless */
	if (as->n >= CONFIG_MAX_GROUPS)
		return conf_line_error(st, "too many groups (at most %u)", CONFIG_MAX_GROUPS);

	a = reallocarray(as->gids, as->n + 1, sizeof(gid_t));
	if (!a)
		return -ENOMEM;
	as->gids = a;
	as->gids[as->n++] = gid;
	return 0;
}

static int apply_groups(ConfParseState *st, GroupList *list) {
	GroupsState as = {};
	int r;

	r = conf_for_each_word(st, true, groups_word, &as);
	if (r == 0 && as.n == 0)
		r = conf_line_error(st, "no group names");
	if (r < 0) {
		free(as.gids);
		return r;
	}
	free(list->gids);
	*list = (GroupList){ .gids = as.gids, .n = as.n };
	return 0;
}

/* ExcludeComms=: names a task's comm can equal (at most TASK_COMM_LEN - 1 bytes). */
static int comms_word(ConfParseState *st, const char *word, void *userdata) {
	CommList *l = userdata;
	size_t len = strlen(word);
	_cleanup_free_ char *esc = conf_escape(word, CONF_ERROR_VALUE_MAX);

	if (!esc)
		return -ENOMEM;
	if (len >= PERFRELAY_COMM_LEN)
		return conf_line_error(
			st,
			"\"%s\" is longer than a process name can be (%u bytes)",
			esc,
			PERFRELAY_COMM_LEN - 1);
	for (uint32_t i = 0; i < l->n; i++)
		if (streq(l->comms[i], word))
			return 0;
	if (l->n >= PERFRELAY_DEMAND_COMMS)
		return conf_line_error(st, "too many names (at most %u)", PERFRELAY_DEMAND_COMMS);
	memcpy(l->comms[l->n++], word, len);
	return 0;
}

/* ExcludePaths=: "/proc/self/status" (that path) or "/proc/\*" (every path that starts with
 * "/proc/"), as the process passes it to open(). */
static int patterns_word(ConfParseState *st, const char *word, void *userdata) {
	PathPatternList *l = userdata;
	size_t len = strlen(word);
	bool prefix = len > 0 && word[len - 1] == '*';
	_cleanup_free_ char *esc = conf_escape(word, CONF_ERROR_VALUE_MAX);
	struct perfrelay_demand_path *p;

	if (!esc)
		return -ENOMEM;
	if (prefix)
		len--;
	if (word[0] != '/')
		return conf_line_error(st, "\"%s\" is not an absolute path", esc);
	if (memchr(word, '*', len) || strpbrk(word, "?["))
		return conf_line_error(st, "\"%s\": only a \"*\" at the end is a pattern (a path prefix)", esc);
	if (len >= PERFRELAY_DEMAND_PATH_LEN)
		return conf_line_error(
			st, "\"%s\" is longer than %u bytes", esc, PERFRELAY_DEMAND_PATH_LEN - 1);
	if (l->n >= PERFRELAY_DEMAND_PATHS)
		return conf_line_error(st, "too many paths (at most %u)", PERFRELAY_DEMAND_PATHS);
	p = &l->paths[l->n++];
	p->len = (uint32_t) len;
	p->prefix = prefix;
	memcpy(p->path, word, len);
	return 0;
}

/* ExcludeUnits=: names of units that own processes (unitname.h), as subscriptions' "unit". */
static int units_word(ConfParseState *st, const char *word, void *userdata) {
	UnitList *l = userdata;
	size_t len = strlen(word);
	_cleanup_free_ char *esc = conf_escape(word, CONF_ERROR_VALUE_MAX);

	if (!esc)
		return -ENOMEM;
	if (len >= PROBES_UNIT_NAME_MAX || !unit_name_is_attributable(word, len))
		return conf_line_error(
			st,
			"\"%s\" is not the name of a unit that runs processes (a .service, .scope, ...; "
			"not a .slice)",
			esc);
	for (uint32_t i = 0; i < l->n; i++)
		if (streq(l->units[i], word))
			return 0;
	if (l->n >= PERFRELAY_DEMAND_UNITS)
		return conf_line_error(st, "too many units (at most %u)", PERFRELAY_DEMAND_UNITS);
	memcpy(l->units[l->n++], word, len);
	return 0;
}

/* The list keys (ExcludeComms=, ExcludePaths=, ExcludeUnits=): words into a zeroed list of the
 * field's type, stored only when every word is valid. */
static int apply_list(ConfParseState *st, void *field, size_t size, ConfWordFn fn) {
	_cleanup_free_ void *l = calloc(1, size);
	int r;

	if (!l)
		return -ENOMEM;
	r = conf_for_each_word(st, true, fn, l);
	if (r < 0)
		return r;
	memcpy(field, l, size);
	return 0;
}

/* Where a key's value lives: the Config's field, or a part's; and its default. */
typedef struct KeyPlace {
	const ConfigKey *key;
	uint8_t *base;           /* the Config, or the part's values */
	const uint8_t *defaults; /* the same layout, holding the defaults */
} KeyPlace;

/* An empty value puts the key back to its default. */
static int reset_key(Config *c, const KeyPlace *kp) {
	const ConfigKey *k = kp->key;
	char *s;

	switch (k->type) {
	case VALUE_PATH:
		s = strdup(k->default_string);
		if (!s)
			return -ENOMEM;
		free(*(char **) (kp->base + k->offset));
		*(char **) (kp->base + k->offset) = s;
		return 0;
	case VALUE_CPU_GROUPS:
		free(c->cpu_groups);
		c->cpu_groups = NULL;
		c->n_cpu_groups = 0;
		return 0;
	case VALUE_GROUPS:
		free(((GroupList *) (kp->base + k->offset))->gids);
		*(GroupList *) (kp->base + k->offset) = (GroupList){};
		return 0;
	default:
		memcpy(kp->base + k->offset, kp->defaults + k->offset, k->width);
		return 0;
	}
}

static int apply_key(ConfParseState *st, Config *c, const KeyPlace *kp) {
	const ConfigKey *k = kp->key;
	void *field = kp->base + k->offset;
	bool b;

	if (st->value[0] == 0)
		return reset_key(c, kp);

	switch (k->type) {
	case VALUE_BOOL:
		if (conf_parse_bool(st->value, &b) < 0)
			return conf_line_error(st, "must be a boolean (yes/no, true/false, on/off, 1/0)");
		*(bool *) field = b;
		return 0;
	case VALUE_UINT:
	case VALUE_SIZE:
	case VALUE_POW2:
		return apply_uint(st, k, field);
	case VALUE_NICE:
		return apply_nice(st, field);
	case VALUE_PATH:
		return apply_path(st, k, field);
	case VALUE_PROBES:
		return apply_names(st, &probe_names, field);
	case VALUE_COUNTERS:
		return apply_names(st, &counter_names, field);
	case VALUE_CPU_GROUPS:
		return apply_cpu_groups(st, c);
	case VALUE_GROUPS:
		return apply_groups(st, field);
	case VALUE_COMMS:
		return apply_list(st, field, sizeof(CommList), comms_word);
	case VALUE_PATTERNS:
		return apply_list(st, field, sizeof(PathPatternList), patterns_word);
	case VALUE_UNITS:
		return apply_list(st, field, sizeof(UnitList), units_word);
	}
	return -EINVAL;
}

static bool key_matches(const ConfigKey *k, const char *section, const char *name) {
	return (!section || streq(k->section, section)) && streq(k->name, name);
}

/* The key `name` of `section` (any section if NULL): the core's, or a part's. */
static bool find_key(Config *c, const char *section, const char *name, KeyPlace *ret) {
	for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
		if (key_matches(&config_keys[i], section, name)) {
			*ret = (KeyPlace){ &config_keys[i], (uint8_t *) c, (const uint8_t *) &config_defaults };
			return true;
		}
	for (size_t p = 0; p < c->n_parts; p++)
		for (size_t i = 0; i < c->parts[p]->n_keys; i++)
			if (key_matches(&c->parts[p]->keys[i], section, name)) {
				*ret = (KeyPlace){ &c->parts[p]->keys[i],
						   c->part_data[p],
						   c->parts[p]->defaults };
				return true;
			}
	return false;
}

/* The schema's part of a Key=Value line (ConfSchema.apply): which key it is, and its value. */
static int apply_line(ConfParseState *st, void *userdata) {
	Config *c = userdata;
	KeyPlace kp;

	if (find_key(c, st->section, st->key, &kp))
		return apply_key(st, c, &kp);
	if (find_key(c, NULL, st->key, &kp))
		return conf_line_error(
			st,
			"unknown key in section [%s]; %s= belongs in [%s]",
			st->section,
			kp.key->name,
			kp.key->section);
	return conf_line_error(st, "unknown key in section [%s]", st->section);
}

static ConfSchema config_schema(const Config *c) {
	return (ConfSchema){ .sections = c->sections, .n_sections = c->n_sections, .apply = apply_line };
}

static void config_clear(Config *c) {
	free(c->pin_path);
	free(c->socket_path);
	free(c->history_path);
	free(c->podman_root);
	free(c->docker_root);
	free(c->cpu_groups);
	free(c->allow_groups.gids);
	free(c->control_groups.gids);
	for (size_t i = 0; c->part_data && i < c->n_parts; i++)
		free(c->part_data[i]);
	free(c->part_data);
	free(c->sections);
}

/* The sections of the schema: the core's, then those of parts that the core does not have. */
static int config_make_sections(Config *c) {
	c->sections = calloc(ELEMENTSOF(core_sections) + c->n_parts, sizeof(char *));
	if (!c->sections)
		return -ENOMEM;
	for (size_t i = 0; i < ELEMENTSOF(core_sections); i++)
		c->sections[c->n_sections++] = core_sections[i];
	for (size_t p = 0; p < c->n_parts; p++) {
		bool known = false;

		for (size_t i = 0; i < c->n_sections && !known; i++)
			known = streq(c->sections[i], c->parts[p]->section);
		if (!known)
			c->sections[c->n_sections++] = c->parts[p]->section;
	}
	return 0;
}

/* Part keys are scalars in their part's section, within its struct (ConfigPart). */
static bool part_is_valid(const ConfigPart *p) {
	for (size_t i = 0; i < p->n_keys; i++) {
		const ConfigKey *k = &p->keys[i];

		if (!streq(k->section, p->section) || k->type == VALUE_PATH || k->type == VALUE_CPU_GROUPS ||
		    k->type == VALUE_GROUPS || k->offset + k->width > p->size)
			return false;
	}
	return true;
}

int config_new(const ConfigPart *const *parts, size_t n_parts, Config **ret) {
	_cleanup_(config_freep) Config *c = NULL;
	int r;

	if (!ret || (n_parts > 0 && !parts))
		return -EINVAL;
	for (size_t i = 0; i < n_parts; i++)
		if (!part_is_valid(parts[i]))
			return -EINVAL;
	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = config_defaults;
	c->parts = parts;
	c->n_parts = n_parts;
	c->pin_path = strdup(DEFAULT_PIN_PATH);
	c->socket_path = strdup(DEFAULT_SOCKET_PATH);
	c->history_path = strdup(DEFAULT_HISTORY_PATH);
	c->podman_root = strdup(DEFAULT_PODMAN_ROOT);
	c->docker_root = strdup(DEFAULT_DOCKER_ROOT);
	c->part_data = calloc(n_parts ?: 1, sizeof(void *));
	if (!c->pin_path || !c->socket_path || !c->history_path || !c->podman_root || !c->docker_root ||
	    !c->part_data)
		return -ENOMEM;
	for (size_t i = 0; i < n_parts; i++) {
		c->part_data[i] = memdup_array(parts[i]->defaults, 1, parts[i]->size);
		if (!c->part_data[i])
			return -ENOMEM;
	}
	r = config_make_sections(c);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(c);
	return 0;
}

const void *config_part(const Config *c, const ConfigPart *part) {
	for (size_t i = 0; i < c->n_parts; i++)
		if (c->parts[i] == part)
			return c->part_data[i];
	return NULL;
}

Config *config_free(Config *c) {
	if (!c)
		return NULL;
	config_clear(c);
	free(c);
	return NULL;
}


/* Deep copy, so that parsing and loading can work on a copy and leave c as it was on failure. */
static int config_dup(const Config *c, Config **ret) {
	_cleanup_(config_freep) Config *d = NULL;

	d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	*d = *c;
	d->pin_path = c->pin_path ? strdup(c->pin_path) : NULL;
	d->socket_path = c->socket_path ? strdup(c->socket_path) : NULL;
	d->history_path = c->history_path ? strdup(c->history_path) : NULL;
	d->podman_root = c->podman_root ? strdup(c->podman_root) : NULL;
	d->docker_root = c->docker_root ? strdup(c->docker_root) : NULL;
	d->cpu_groups = memdup_array(c->cpu_groups, c->n_cpu_groups, sizeof(CpuSet));
	d->allow_groups.gids = memdup_array(c->allow_groups.gids, c->allow_groups.n, sizeof(gid_t));
	d->control_groups.gids = memdup_array(c->control_groups.gids, c->control_groups.n, sizeof(gid_t));
	d->sections = memdup_array(c->sections, c->n_sections, sizeof(char *));
	d->part_data = calloc(c->n_parts ?: 1, sizeof(void *));
	for (size_t i = 0; d->part_data && i < c->n_parts; i++)
		d->part_data[i] = memdup_array(c->part_data[i], 1, c->parts[i]->size);
	for (size_t i = 0; d->part_data && i < c->n_parts; i++)
		if (!d->part_data[i])
			return -ENOMEM;
	if (!d->sections || !d->part_data)
		return -ENOMEM;
	if ((c->pin_path && !d->pin_path) || (c->socket_path && !d->socket_path) ||
	    (c->history_path && !d->history_path) || (c->podman_root && !d->podman_root) ||
	    (c->docker_root && !d->docker_root) || (c->cpu_groups && c->n_cpu_groups > 0 && !d->cpu_groups) ||
	    (c->allow_groups.gids && c->allow_groups.n > 0 && !d->allow_groups.gids) ||
	    (c->control_groups.gids && c->control_groups.n > 0 && !d->control_groups.gids))
		return -ENOMEM;
	if (!d->cpu_groups)
		d->n_cpu_groups = 0;
	if (!d->allow_groups.gids)
		d->allow_groups.n = 0;
	if (!d->control_groups.gids)
		d->control_groups.n = 0;
	*ret = TAKE_PTR(d);
	return 0;
}

/* Moves the contents of *from into c (freeing c's old contents) and frees *from. */
static void config_replace(Config *c, Config **from) {
	Config *f = *from;

	config_clear(c);
	*c = *f;
	free(f);
	*from = NULL;
}

/* Appends "Key=" to a comma-separated list. */
static int list_key(char **list, const char *key) {
	char *n;

	if (asprintf(&n, "%s%s%s=", *list ? *list : "", *list ? ", " : "", key) < 0)
		return -ENOMEM;
	free(*list);
	*list = n;
	return 0;
}

static bool same_array(const void *a, size_t n_a, const void *b, size_t n_b, size_t size) {
	return n_a == n_b && (n_a == 0 || memcmp(a, b, n_a * size) == 0);
}

/* One key of the restart kind: when `new` changes it, the running value goes back into `new`
 * (and the file's into `running`, to be freed with it), and its name onto *list. */
static int keep_restart_key(
	Config *new, Config *running, const KeyPlace *n_kp, const KeyPlace *o_kp, char **list) {
	const ConfigKey *k = n_kp->key;
	uint8_t *n = n_kp->base + k->offset, *o = o_kp->base + k->offset;
	bool same;
	int r;

	switch (k->type) {
	case VALUE_PATH:
		same = streq(*(char **) n, *(char **) o);
		break;
	case VALUE_CPU_GROUPS:
		same = same_array(
			new->cpu_groups,
			new->n_cpu_groups,
			running->cpu_groups,
			running->n_cpu_groups,
			sizeof(CpuSet));
		break;
	case VALUE_GROUPS:
		same = same_array(
			((GroupList *) n)->gids,
			((GroupList *) n)->n,
			((GroupList *) o)->gids,
			((GroupList *) o)->n,
			sizeof(gid_t));
		break;
	default:
		same = memcmp(n, o, k->width) == 0;
	}
	if (same)
		return 0;
	r = list_key(list, k->name);
	if (r < 0)
		return r;
	switch (k->type) {
	case VALUE_PATH:
		SWAP_TWO(*(char **) n, *(char **) o);
		break;
	case VALUE_CPU_GROUPS:
		SWAP_TWO(new->cpu_groups, running->cpu_groups);
		SWAP_TWO(new->n_cpu_groups, running->n_cpu_groups);
		break;
	case VALUE_GROUPS:
		SWAP_TWO(*(GroupList *) n, *(GroupList *) o);
		break;
	default:
		memcpy(n, o, k->width);
	}
	return 0;
}

int config_keep_restart_keys(Config *new, Config *running, char **ret_list) {
	_cleanup_free_ char *list = NULL;
	int r;

	for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
		KeyPlace n = { &config_keys[i], (uint8_t *) new },
			 o = { &config_keys[i], (uint8_t *) running };

		if (config_keys[i].live)
			continue;
		r = keep_restart_key(new, running, &n, &o, &list);
		if (r < 0)
			return r;
	}
	/* The same parts in both: a reload makes its Config with the running one's. */
	for (size_t p = 0; p < new->n_parts &&p < running->n_parts; p++)
		for (size_t i = 0; i < new->parts[p]->n_keys; i++) {
			const ConfigKey *k = &new->parts[p]->keys[i];
			KeyPlace n = { k, new->part_data[p] }, o = { k, running->part_data[p] };

			if (k->live || new->parts[p] != running->parts[p])
				continue;
			r = keep_restart_key(new, running, &n, &o, &list);
			if (r < 0)
				return r;
		}
	*ret_list = TAKE_PTR(list);
	return 0;
}

int config_parse_text(Config *c, const char *text, size_t size, const char *filename, char **ret_error) {
	_cleanup_(config_freep) Config *work = NULL;
	ConfSchema schema;
	int r;

	if (!c)
		return -EINVAL;
	r = config_dup(c, &work);
	if (r < 0)
		return r;
	schema = config_schema(work);
	r = conf_parse_text(&schema, work, text, size, filename, ret_error);
	if (r < 0)
		return r;
	config_replace(c, &work);
	return 0;
}

int config_load(Config *c, const char *main_path, const char *dropin_dir, char **ret_error) {
	_cleanup_(config_freep) Config *work = NULL;
	ConfSchema schema;
	int r;

	if (!c)
		return -EINVAL;
	r = config_dup(c, &work);
	if (r < 0)
		return r;
	schema = config_schema(work);
	r = conf_parse_files(&schema, work, main_path, dropin_dir, CONFIG_MAX_FILE_BYTES, ret_error);
	if (r < 0)
		return r;

	r = config_validate(work, ret_error);
	if (r < 0)
		return r;

	config_replace(c, &work);
	return 0;
}

int config_validate(const Config *c, char **ret_error) {
	long page_size;
	uint64_t data_size;

	if (!c)
		return -EINVAL;

	if (c->n_cpu_groups > 0 && c->cpus_per_reader > 0)
		return error_textf(
			ret_error,
			-EINVAL,
			"CpuGroups= and CpusPerReader= are both set; set at most one of them");

	page_size = sysconf(_SC_PAGESIZE);
	if (page_size <= 0)
		page_size = 4096;
	data_size = (uint64_t) c->pages_per_cpu * (uint64_t) page_size;
	if (c->watermark > 0 && c->watermark >= data_size)
		return error_textf(
			ret_error,
			-EINVAL,
			"Watermark=%" PRIu32
			": must be smaller than the ring data size "
			"(PagesPerCpu=%u * %ld-byte pages = %" PRIu64 " bytes)",
			c->watermark,
			c->pages_per_cpu,
			page_size,
			data_size);
	return 0;
}
