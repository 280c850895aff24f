/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The human-readable event line of perfrelayctl monitor (see format.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl/format.h"
#include "macro.h"

const char *jstr(json_object *o, const char *key) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

bool jint(json_object *o, const char *key, int64_t *ret) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	*ret = json_object_get_int64(v);
	return true;
}

bool juint(json_object *o, const char *key, uint64_t *ret) {
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	*ret = json_object_get_uint64(v);
	return true;
}

/* Event strings are whatever a process put in its paths and arguments: control bytes
 * (including C1 controls, U+0080..U+009F) are escaped so they cannot drive the terminal.
 * With `quote`, a string that is empty or has spaces, quotes or escapes is shown in "".
 * Returns the number of characters written (UTF-8 sequences count once), for padding. */
size_t format_escaped(FILE *f, const char *s, bool quote) {
	const unsigned char *p = (const unsigned char *) s;
	size_t width = 0;
	bool q = false;

	if (quote) {
		q = !*p;
		for (const unsigned char *t = p; *t && !q; t++)
			q = *t <= ' ' || *t == '"' || *t == '\\' || *t == '\'' || *t == 0x7f ||
				(t[0] == 0xc2 && t[1] >= 0x80 && t[1] <= 0x9f);
	}
	if (q) {
		fputc('"', f);
		width++;
	}
	for (; *p; p++) {
		if (*p == '\n' || *p == '\t') {
			fputs(*p == '\n' ? "\\n" : "\\t", f);
			width += 2;
		} else if (*p < ' ' || *p == 0x7f) {
			fprintf(f, "\\x%02x", *p);
			width += 4;
		} else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			fprintf(f, "\\u%04x", p[1]);
			width += 6;
			p++;
		} else if (q && (*p == '"' || *p == '\\')) {
			fputc('\\', f);
			fputc(*p, f);
			width += 2;
		} else {
			fputc(*p, f);
			width += (*p & 0xc0) != 0x80;
		}
	}
	if (q) {
		fputc('"', f);
		width++;
	}
	return width;
}

static void print_result(FILE *f, int64_t result) {
	const char *name = result < 0 && result > -4096 ? strerrorname_np((int) -result) : NULL;

	if (name)
		fprintf(f, " = -%s", name);
	else
		fprintf(f, " = %" PRId64, result);
}

static void print_duration(FILE *f, uint64_t ns) {
	if (ns < 1000000u)
		fprintf(f, "%" PRIu64 "us", ns / 1000u);
	else if (ns < 1000000000u)
		fprintf(f, "%.1fms", (double) ns / 1e6);
	else
		fprintf(f, "%.3fs", (double) ns / 1e9);
}

static void print_open_flags(FILE *f, int64_t flags) {
	/* O_SYNC and O_TMPFILE include other flags' bits, so they come before them. */
	static const struct {
		int64_t flag;
		const char *name;
	} names[] = {
		{ O_SYNC, "O_SYNC" },       { O_TMPFILE, "O_TMPFILE" },     { O_CREAT, "O_CREAT" },
		{ O_EXCL, "O_EXCL" },       { O_NOCTTY, "O_NOCTTY" },       { O_TRUNC, "O_TRUNC" },
		{ O_APPEND, "O_APPEND" },   { O_NONBLOCK, "O_NONBLOCK" },   { O_DSYNC, "O_DSYNC" },
		{ O_DIRECT, "O_DIRECT" },   { O_DIRECTORY, "O_DIRECTORY" }, { O_NOFOLLOW, "O_NOFOLLOW" },
		{ O_NOATIME, "O_NOATIME" }, { O_CLOEXEC, "O_CLOEXEC" },     { O_PATH, "O_PATH" },
	};
	int64_t rest = flags & ~(int64_t) O_ACCMODE;

	switch (flags & O_ACCMODE) {
	case O_RDONLY:
		fputs("O_RDONLY", f);
		break;
	case O_WRONLY:
		fputs("O_WRONLY", f);
		break;
	case O_RDWR:
		fputs("O_RDWR", f);
		break;
	default:
		fputs("O_ACCMODE", f);
		break;
	}
	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if ((rest & names[i].flag) == names[i].flag) {
			fprintf(f, "|%s", names[i].name);
			rest &= ~names[i].flag;
		}
	if (rest)
		fprintf(f, "|0x%" PRIx64, (uint64_t) rest);
}

/* Decoded bytes of a base64 string. */
static size_t base64_size(const char *s) {
	size_t n = strlen(s), pad = 0;

	if (n >= 1 && s[n - 1] == '=')
		pad++;
	if (n >= 2 && s[n - 2] == '=')
		pad++;
	return n / 4 * 3 - MIN(pad, n / 4 * 3);
}

static void print_details(FILE *f, const char *type, json_object *ev, const char *line) {
	const char *s;
	int64_t v;
	uint64_t u;

	if (streq(type, "exec")) {
		json_object *argv, *truncated;

		format_escaped(f, jstr(ev, "filename") ?: "?", true);
		if (json_object_object_get_ex(ev, "argv", &argv) && json_object_is_type(argv, json_type_array))
			for (size_t i = 1; i < json_object_array_length(argv); i++) {
				json_object *a = json_object_array_get_idx(argv, i);
				bool is_string = json_object_is_type(a, json_type_string);

				fputc(' ', f);
				format_escaped(f, is_string ? json_object_get_string(a) : "?", true);
			}
		if (json_object_object_get_ex(ev, "argv_truncated", &truncated) &&
		    json_object_get_boolean(truncated))
			fputs(" ...", f);
	} else if (streq(type, "exit")) {
		if (jint(ev, "signal", &v) && v != 0) {
			const char *name = v > 0 && v < 128 ? sigabbrev_np((int) v) : NULL;

			if (name)
				fprintf(f, "signal %s", name);
			else
				fprintf(f, "signal %" PRId64, v);
		} else if (jint(ev, "exit_code", &v))
			fprintf(f, "code %" PRId64, v);
		if (juint(ev, "runtime_ns", &u)) {
			fputs(", runtime ", f);
			print_duration(f, u);
		}
	} else if (streq(type, "fork")) {
		int64_t tgid;

		if (jint(ev, "child_pid", &v)) {
			if (jint(ev, "child_tgid", &tgid) && tgid != v)
				fprintf(f, "thread %" PRId64 " of %" PRId64, v, tgid);
			else
				fprintf(f, "child %" PRId64, v);
		}
	} else if (streq(type, "open")) {
		format_escaped(f, jstr(ev, "path") ?: "?", true);
		if (jint(ev, "flags", &v)) {
			fputc(' ', f);
			print_open_flags(f, v);
		}
		if (jint(ev, "result", &v))
			print_result(f, v);
	} else if (streq(type, "connect")) {
		const char *family = jstr(ev, "family_name");

		s = jstr(ev, "address");
		if (s && family && streq(family, "inet6"))
			fprintf(f, "[%s]", s);
		else if (s)
			format_escaped(f, s, false);
		else if (family)
			format_escaped(f, family, false);
		else if (jint(ev, "family", &v))
			fprintf(f, "family %" PRId64, v);
		if (s && jint(ev, "port", &v))
			fprintf(f, ":%" PRId64, v);
		if (jint(ev, "result", &v))
			print_result(f, v);
	} else if (streq(type, "lost")) {
		json_object *o;

		if (juint(ev, "kernel", &u)) {
			/* Records lost upstream: how many, and who lost most (docs/protocol.md). */
			fprintf(f, "kernel lost %" PRIu64, u);
			if (json_object_object_get_ex(ev, "units", &o) &&
			    json_object_is_type(o, json_type_array))
				for (size_t i = 0; i < json_object_array_length(o); i++) {
					json_object *e = json_object_array_get_idx(o, i);

					fputs(i == 0 ? " (" : ", ", f);
					format_escaped(f, jstr(e, "unit") ?: "?", false);
					if (juint(e, "lost", &u))
						fprintf(f, " %" PRIu64, u);
					if (i + 1 == json_object_array_length(o))
						fputc(')', f);
				}
		} else if (json_object_object_get_ex(ev, "throttle", &o)) {
			static const char *const keys[] = { "started", "stopped" };

			fputs("throttle", f);
			for (size_t k = 0; k < ELEMENTSOF(keys); k++) {
				json_object *a;

				if (!json_object_object_get_ex(o, keys[k], &a) ||
				    !json_object_is_type(a, json_type_array))
					continue;
				for (size_t i = 0; i < json_object_array_length(a); i++) {
					json_object *e = json_object_array_get_idx(a, i);

					fprintf(f, " %s ", keys[k]);
					format_escaped(f, jstr(e, "unit") ?: "?", false);
					if (juint(e, "throttled", &u))
						fprintf(f, " (%" PRIu64 " refused)", u);
				}
			}
		} else if (juint(ev, "count", &u))
			fprintf(f, "count %" PRIu64, u);
	} else if (streq(type, "unknown")) {
		if (jint(ev, "type_id", &v))
			fprintf(f, "type %" PRId64 " (0x%04" PRIx64 ")", v, (uint64_t) v);
		s = jstr(ev, "payload");
		fprintf(f, ", %zu payload bytes", s ? base64_size(s) : 0);
	} else if (streq(type, "bench")) {
		if (juint(ev, "call", &u))
			fprintf(f, "call %" PRIu64, u);
		if (jint(ev, "size", &v))
			fprintf(f, ", size %" PRId64, v);
	} else if (jstr(ev, "producer_name")) {
		/* A third-party record decoded from its producer's BTF: its fields as key=value. */
		bool first = true;

		fprintf(f, "[%s]", jstr(ev, "producer_name"));
		json_object_object_foreach(ev, key, value) {
			static const char *const common[] = { "type", "ts",       "cpu",
							      "seq",  "producer", "producer_name",
							      "unit" };
			bool skip = false;

			for (size_t i = 0; i < ELEMENTSOF(common) && !skip; i++)
				skip = streq(key, common[i]);
			if (skip)
				continue;
			fprintf(f, "%s%s=", first ? " " : " ", key);
			format_escaped(f, json_object_to_json_string_ext(value, JSON_C_TO_STRING_PLAIN), false);
			first = false;
		}
	} else
		/* A type newer than this program: show what the daemon sent. */
		format_escaped(f, line, false);
}

static void print_time(FILE *f, json_object *ev, int64_t boot_to_realtime_ns) {
	struct timespec now;
	uint64_t ts;
	int64_t ns;
	time_t sec;
	struct tm tm;

	/* Boot-time stamps are far below INT64_MAX / 2 (146 years); anything else is not one. */
	if (juint(ev, "ts", &ts) && ts < (uint64_t) INT64_MAX / 2)
		ns = (int64_t) ts + boot_to_realtime_ns;
	else {
		/* lost lines have no timestamp: they are about now. */
		clock_gettime(CLOCK_REALTIME, &now);
		ns = (int64_t) now.tv_sec * 1000000000 + now.tv_nsec;
	}
	sec = (time_t) (ns / 1000000000);
	if (!localtime_r(&sec, &tm)) {
		fputs("??:??:??.???", f);
		return;
	}
	fprintf(f, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (ns % 1000000000 / 1000000));
}

void format_header(FILE *f) {
	fprintf(f, "%-12s %-7s %7s %6s %-15s %s\n", "TIME", "TYPE", "PID", "UID", "COMM", "DETAILS");
}

static void print_column_int(FILE *f, json_object *ev, const char *key, int width) {
	int64_t v;

	if (jint(ev, key, &v))
		fprintf(f, " %*" PRId64, width, v);
	else
		fprintf(f, " %*s", width, "-");
}

/* One line for one event; returns -EBADMSG for a line that is not a JSON object with a type. */
int format_event(FILE *f, json_tokener *tok, const char *line, size_t len, int64_t boot_to_realtime_ns) {
	json_object *ev;
	const char *type, *comm;

	json_tokener_reset(tok);
	ev = json_tokener_parse_ex(tok, line, (int) len);
	if (!ev)
		return -EBADMSG;
	type = jstr(ev, "type");
	if (!type) {
		json_object_put(ev);
		return -EBADMSG;
	}

	print_time(f, ev, boot_to_realtime_ns);
	fputc(' ', f);
	fprintf(f, "%-7.16s", type);
	print_column_int(f, ev, streq(type, "fork") ? "parent_pid" : "pid", 7);
	print_column_int(f, ev, "uid", 6);
	comm = jstr(ev, "comm");
	fputc(' ', f);
	if (comm)
		/* Padded by hand: comm may need escapes, which %-15s would not count. */
		for (size_t w = format_escaped(f, comm, false); w < 15; w++)
			fputc(' ', f);
	else
		fprintf(f, "%-15s", "-");
	fputc(' ', f);
	print_details(f, type, ev, line);
	fputc('\n', f);
	json_object_put(ev);
	return 0;
}
