/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl snapshot: the flight recorder's window (D-Bus Snapshot(), docs/recorder.md) as
 * event lines or JSON lines, on standard output or into a file. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "ctl/ctl.h"
#include "ctl/format.h"
#include "json-util.h"
#include "common/perfrelay-util.h"

#define MAX_LIST                 64
/* Where --save writes, and how much it keeps there (docs/recorder.md). */
#define SNAPSHOT_DIR             "/var/lib/perfrelay/snapshots"
#define SNAPSHOT_KEEP            32u
#define SNAPSHOT_MAX_BYTES       (256u * 1024u * 1024u)
/* A save's temporary file older than this was left by a save that died (a live save writes
 * its file within seconds): it is removed with the pruning. */
#define SNAPSHOT_TMP_MAX_AGE_SEC (10 * 60)

static void snapshot_help(void) {
	printf("%s snapshot [OPTIONS...]\n\n"
	       "Show what the flight recorder holds: the latest events of every CPU, oldest first,\n"
	       "then a summary line (docs/recorder.md). Root or AllowGroups= members only.\n\n"
	       "     --since=SPAN     Only the last SPAN (e.g. 10s, 5m)\n"
	       "     --unit=UNIT      Only events of this systemd unit; repeatable\n"
	       "  -t --type=TYPE      Only events of this type; repeatable\n"
	       "  -p --pid=PID        Only events of this process; repeatable\n"
	       "     --ancestor=WHO   Only events of descendants of WHO: an exec id, a unit or\n"
	       "                      a task name (as monitor --ancestor); repeatable\n"
	       "  -j --json           JSON lines as the daemon wrote them (the default is one\n"
	       "                      readable line per event)\n"
	       "  -o --output=FILE    Write to FILE instead of standard output\n"
	       "     --save=UNIT      Save UNIT's events as JSON lines in a new file of the\n"
	       "                      snapshot directory (keeping the newest %u files, %u MiB);\n"
	       "                      what perfrelay-snapshot@UNIT.service runs on a failure\n"
	       "     --directory=DIR  The snapshot directory (default %s)\n"
	       "  -h --help           Show this help\n",
	       program,
	       SNAPSHOT_KEEP,
	       SNAPSHOT_MAX_BYTES / (1024u * 1024u),
	       SNAPSHOT_DIR);
}

static int64_t boot_to_realtime(void) {
	struct timespec rt, bt;

	clock_gettime(CLOCK_BOOTTIME, &bt);
	clock_gettime(CLOCK_REALTIME, &rt);
	return ((int64_t) rt.tv_sec - bt.tv_sec) * 1000000000 + (rt.tv_nsec - bt.tv_nsec);
}

static int append_list(
	sd_bus_message *m, const char *key, const char *type, char **s, const uint32_t *u, size_t n) {
	int r = sd_bus_message_open_container(m, 'e', "sv");

	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', type);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', type + 1);
	for (size_t i = 0; r >= 0 && i < n; i++)
		r = s ? sd_bus_message_append(m, "s", s[i]) : sd_bus_message_append(m, "u", u[i]);
	for (unsigned k = 0; r >= 0 && k < 3; k++)
		r = sd_bus_message_close_container(m);
	return r;
}

typedef struct SavedSnapshot {
	char *name;
	off_t size;
	time_t mtime;
} SavedSnapshot;

static int saved_compare(const void *a, const void *b) {
	const SavedSnapshot *x = a, *y = b;

	/* Newest first; names break ties (they end in the time, to the second). */
	if (x->mtime != y->mtime)
		return x->mtime > y->mtime ? -1 : 1;
	return -strcmp(x->name, y->name);
}

/* The saved snapshots of directory, newest first; *ret_n of them. */
static int snapshots_list(const char *directory, SavedSnapshot **ret, size_t *ret_n) {
	SavedSnapshot *list = NULL;
	size_t n = 0;
	DIR *d = opendir(directory);

	if (!d)
		return -errno;
	for (struct dirent *de; (de = readdir(d));) {
		size_t len = strlen(de->d_name);
		SavedSnapshot *grown;
		struct stat st;

		if (de->d_name[0] == '.' || len < 7 || strcmp(de->d_name + len - 6, ".jsonl") != 0 ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		grown = reallocarray(list, n + 1, sizeof(*list));
		if (!grown)
			break;
		list = grown;
		list[n] = (SavedSnapshot){ .name = strdup(de->d_name),
					   .size = st.st_size,
					   .mtime = st.st_mtime };
		if (list[n].name)
			n++;
	}
	closedir(d);
	qsort(list, n, sizeof(*list), saved_compare);
	*ret = list;
	*ret_n = n;
	return 0;
}

static void snapshots_free(SavedSnapshot *list, size_t n) {
	for (size_t i = 0; i < n; i++)
		free(list[i].name);
	free(list);
}

/* Removes the temporary files of saves that died (".NAME.jsonl.tmp", older than
 * SNAPSHOT_TMP_MAX_AGE_SEC): snapshots_list() does not see them, and nothing else would. */
static void snapshots_prune_tmp(const char *directory) {
	time_t now = time(NULL);
	DIR *d = opendir(directory);

	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		size_t len = strlen(de->d_name);
		struct stat st;

		if (de->d_name[0] != '.' || len < 11 || strcmp(de->d_name + len - 10, ".jsonl.tmp") != 0 ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_mtime > now - SNAPSHOT_TMP_MAX_AGE_SEC)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			printf("Removed %s/%s, left by a save that did not finish\n", directory, de->d_name);
	}
	closedir(d);
}

/* Keeps at most `keep` saved snapshots and `max_bytes` in all, newest first (a file that does not
 * fit goes, and older ones that fit stay): a hard quota, so the one just saved goes too if it
 * alone is larger (then an error). */
static int snapshots_prune(const char *directory, size_t keep, uint64_t max_bytes) {
	SavedSnapshot *list;
	uint64_t total = 0;
	size_t n, kept = 0;
	int r = 0;

	snapshots_prune_tmp(directory);
	if (snapshots_list(directory, &list, &n) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX];

		if (kept < keep && total + (uint64_t) list[i].size <= max_bytes) {
			kept++;
			total += (uint64_t) list[i].size;
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", directory, list[i].name);
		if (unlink(path) < 0)
			continue;
		if (i == 0)
			r = error_msg(
				"Removed %s again: its %jd bytes alone pass the snapshot directory's %" PRIu64
				" bytes",
				path,
				(intmax_t) list[i].size,
				max_bytes);
		else
			printf("Removed the older snapshot %s\n", path);
	}
	snapshots_free(list, n);
	return r;
}

int verb_snapshots(int argc, char *argv[]) {
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "directory", required_argument, NULL, 'd' },
						 {} };
	const char *directory = SNAPSHOT_DIR;
	SavedSnapshot *list;
	size_t n;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "hd:", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			printf("%s snapshots [OPTIONS...]\n\n"
			       "List the flight recorder snapshots that perfrelay-snapshot@.service saved when units\n"
			       "failed, newest first: time, size, file.\n\n"
			       "  -d --directory=DIR  The snapshot directory (default %s)\n"
			       "  -h --help           Show this help\n",
			       program,
			       SNAPSHOT_DIR);
			return 0;
		case 'd':
			directory = optarg;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("snapshots: unexpected argument '%s'", argv[optind]);
	r = snapshots_list(directory, &list, &n);
	if (r == -ENOENT) {
		printf("No snapshots saved (%s does not exist)\n", directory);
		return 0;
	}
	if (r < 0)
		return error_errno(r, "Failed to read %s", directory);
	for (size_t i = 0; i < n; i++) {
		char when[32];
		struct tm tm;

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime_r(&list[i].mtime, &tm));
		printf("%s %10jd %s/%s\n", when, (intmax_t) list[i].size, directory, list[i].name);
	}
	snapshots_free(list, n);
	return 0;
}

/* What `perfrelayctl snapshot` was asked: the filters of Snapshot() and where the window goes. */
typedef struct SnapshotArgs {
	char *units[MAX_LIST], *types[MAX_LIST];
	uint32_t pids[MAX_LIST];
	size_t n_units, n_types, n_pids;
	/* --ancestor, sorted into the request's three lists (perfrelay_add_ancestor()) */
	const char *anc_comms[MAX_LIST], *anc_ids[MAX_LIST], *anc_units[MAX_LIST];
	struct perfrelay_subscription anc;
	const char *output, *save, *directory;
	int64_t since;
	bool json;
} SnapshotArgs;

/* Returns 0 to go on, 1 when --help was shown, or a negative errno (the message written). */
static int snapshot_parse_args(int argc, char *argv[], SnapshotArgs *a) {
	enum { ARG_SINCE = 0x100, ARG_UNIT, ARG_ANCESTOR, ARG_SAVE, ARG_DIRECTORY };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 { "output", required_argument, NULL, 'o' },
						 { "since", required_argument, NULL, ARG_SINCE },
						 { "unit", required_argument, NULL, ARG_UNIT },
						 { "type", required_argument, NULL, 't' },
						 { "pid", required_argument, NULL, 'p' },
						 { "ancestor", required_argument, NULL, ARG_ANCESTOR },
						 { "save", required_argument, NULL, ARG_SAVE },
						 { "directory", required_argument, NULL, ARG_DIRECTORY },
						 {} };
	int opt;

	a->directory = SNAPSHOT_DIR;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "hjo:t:p:", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			snapshot_help();
			return 1;
		case 'j':
			a->json = true;
			break;
		case 'o':
			a->output = optarg;
			break;
		case ARG_SAVE:
			if (strchr(optarg, '/') || optarg[0] == '.' || optarg[0] == '\0' ||
			    strlen(optarg) > 255)
				return error_msg("--save=%s: not a unit name", optarg);
			a->save = optarg;
			a->json = true;
			if (a->n_units >= MAX_LIST)
				return error_msg("snapshot: at most %u of each filter", MAX_LIST);
			a->units[a->n_units++] = optarg;
			break;
		case ARG_DIRECTORY:
			a->directory = optarg;
			break;
		case ARG_SINCE:
			if (parse_span(optarg, &a->since) < 0)
				return error_msg(
					"--since=%s: expected a number followed by s, m, h or d", optarg);
			break;
		case ARG_ANCESTOR:
			if (a->anc.n_ancestor_comms >= MAX_LIST || a->anc.n_ancestor_exec_ids >= MAX_LIST ||
			    a->anc.n_ancestor_units >= MAX_LIST)
				return error_msg("snapshot: at most %u of each filter", MAX_LIST);
			perfrelay_add_ancestor(&a->anc, a->anc_comms, a->anc_ids, a->anc_units, optarg);
			break;
		case ARG_UNIT:
		case 't':
		case 'p':
			if (a->n_units >= MAX_LIST || a->n_types >= MAX_LIST || a->n_pids >= MAX_LIST)
				return error_msg("snapshot: at most %u of each filter", MAX_LIST);
			if (opt == ARG_UNIT)
				a->units[a->n_units++] = optarg;
			else if (opt == 't')
				a->types[a->n_types++] = optarg;
			else if (parse_u32(optarg, &a->pids[a->n_pids++]) < 0)
				return error_msg("--pid=%s: not a process id", optarg);
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("snapshot: unexpected argument '%s'", argv[optind]);
	return 0;
}

/* The Snapshot() call with the filters asked for. */
static int snapshot_build_call(sd_bus *bus, const SnapshotArgs *a, sd_bus_message **ret) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
	int r;

	r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, BUS_INTERFACE, "Snapshot");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0 && a->since > 0) {
		struct timespec bt;

		clock_gettime(CLOCK_BOOTTIME, &bt);
		r = sd_bus_message_append(
			m,
			"{sv}",
			"since_ns",
			"t",
			(uint64_t) MAX((int64_t) bt.tv_sec * 1000000000 + bt.tv_nsec - a->since, 1));
	}
	if (r >= 0 && a->n_units > 0)
		r = append_list(m, "unit", "as", (char **) a->units, NULL, a->n_units);
	if (r >= 0 && a->n_types > 0)
		r = append_list(m, "types", "as", (char **) a->types, NULL, a->n_types);
	if (r >= 0 && a->n_pids > 0)
		r = append_list(m, "pid", "au", NULL, a->pids, a->n_pids);
	if (r >= 0 && a->anc.n_ancestor_comms > 0)
		r = append_list(
			m, "ancestor_comm", "as", (char **) a->anc_comms, NULL, a->anc.n_ancestor_comms);
	if (r >= 0 && a->anc.n_ancestor_exec_ids > 0)
		r = append_list(
			m, "ancestor_exec_id", "as", (char **) a->anc_ids, NULL, a->anc.n_ancestor_exec_ids);
	if (r >= 0 && a->anc.n_ancestor_units > 0)
		r = append_list(
			m, "ancestor_unit", "as", (char **) a->anc_units, NULL, a->anc.n_ancestor_units);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r < 0)
		return error_errno(r, "Failed to build the Snapshot() call");
	*ret = TAKE_PTR(m);
	return 0;
}

/* The window's lines from `in` to `out`, as JSON or formatted; *ret_events: the events (not the
 * closing summary line). */
static void snapshot_copy(FILE *in, FILE *out, bool json, uint64_t *ret_events) {
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new();
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t len;

	*ret_events = 0;
	while ((len = getline(&line, &cap, in)) > 0) {
		bool summary = strstr(line, "{\"type\":\"snapshot\"") == line;

		*ret_events += !summary;
		if (json || summary)
			fputs(line, out);
		else if (tok && format_event(out, tok, line, (size_t) (len - (line[len - 1] == '\n')), boot_to_realtime()) < 0)
			fputs(line, out);
	}
}

int verb_snapshot(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
	_cleanup_free_ char *save_tmp = NULL, *save_path = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	SnapshotArgs a = {};
	uint64_t events = 0;
	FILE *in, *out = stdout;
	int r, fd;

	r = snapshot_parse_args(argc, argv, &a);
	if (r != 0)
		return r > 0 ? 0 : r;
	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = snapshot_build_call(bus, &a, &m);
	if (r < 0)
		return r;
	r = sd_bus_call(bus, m, 0, &e, &reply);
	if (r < 0) {
		r = error_msg("Snapshot() failed: %s", e.message ?: strerror(-r));
		sd_bus_error_free(&e);
		return r;
	}
	r = sd_bus_message_read(reply, "h", &fd);
	if (r < 0)
		return error_errno(r, "Failed to read the Snapshot() reply");
	fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0 || !(in = fdopen(fd, "r")))
		return error_errno(-errno, "Failed to read the snapshot");
	if (a.save) {
		char stamp[32];
		time_t now = time(NULL);
		struct tm tm;

		strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", gmtime_r(&now, &tm));
		if (asprintf(&save_path, "%s/%s-%s.jsonl", a.directory, a.save, stamp) < 0 ||
		    asprintf(&save_tmp, "%s/.%s-%s.jsonl.tmp", a.directory, a.save, stamp) < 0)
			return error_errno(-ENOMEM, "snapshot");
		a.output = save_tmp;
	}
	if (a.output && !(out = fopen(a.output, "we"))) {
		r = error_errno(-errno, "Failed to open %s", a.output);
		fclose(in);
		return r;
	}
	snapshot_copy(in, out, a.json, &events);
	fclose(in);
	if (out != stdout && fclose(out) != 0)
		return error_errno(-errno, "Failed to write %s", a.output);
	if (a.save) {
		if (rename(save_tmp, save_path) < 0)
			return error_errno(-errno, "Failed to save %s", save_path);
		printf("Saved the flight recorder's window for %s to %s (%" PRIu64 " events)\n",
		       a.save,
		       save_path,
		       events);
		return snapshots_prune(a.directory, SNAPSHOT_KEEP, SNAPSHOT_MAX_BYTES);
	}
	return 0;
}
