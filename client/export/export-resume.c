/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's cursor (export-resume.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/export-resume.h"
#include "macro.h"
#include "time-util.h"

/* A cursor as the daemon makes them: printable, no space, shorter than PERFRELAY_CURSOR_MAX. */
static bool cursor_valid(const char *s, size_t n) {
	if (n == 0 || n >= PERFRELAY_CURSOR_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

/* Writes cursor to path: a temporary file synced, renamed over it, the directory synced, so
 * that a crash leaves the old cursor or the new one, never a part. */
static int write_file(const char *path, const char *cursor) {
	_cleanup_free_ char *tmp = NULL, *dir = NULL;
	_cleanup_close_ int fd = -EBADF, dfd = -EBADF;
	size_t len = strlen(cursor);
	char line[PERFRELAY_CURSOR_MAX + 1];

	if (asprintf(&tmp, "%s.tmp", path) < 0 || !(dir = strdup(path)))
		return -ENOMEM;
	memcpy(line, cursor, len);
	line[len] = '\n';
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	errno = 0; /* a short write sets none */
	if (write(fd, line, len + 1) != (ssize_t) (len + 1) || fdatasync(fd) < 0) {
		int r = errno ? -errno : -EIO;

		(void) unlink(tmp);
		return r;
	}
	if (rename(tmp, path) < 0) {
		int r = -errno;

		(void) unlink(tmp);
		return r;
	}
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0)
		(void) fsync(dfd);
	return 0;
}

int export_resume_since_ns(const ExportResume *r, uint64_t *ret) {
	char *end;

	if (!startswith(r->saved, "since="))
		return 0;
	errno = 0;
	*ret = strtoull(r->saved + 6, &end, 10);
	return errno == 0 && *end == 0 && *ret > 0;
}

int export_resume_load(ExportResume *r, const char *path, char **ret_error) {
	_cleanup_close_ int fd = -EBADF;
	char buf[PERFRELAY_CURSOR_MAX + 2];
	uint64_t since;
	ssize_t n;
	int k;

	r->path = (char *) path;
	r->saved[0] = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) {
		/* The first start: from now on, said before anything is read, so that a crash
		 * before the first cursor is saved begins again from here, not from the end. */
		snprintf(r->saved, sizeof(r->saved), "since=%" PRIu64, now_nsec(CLOCK_REALTIME));
		k = write_file(path, r->saved);
		if (k < 0 && asprintf(ret_error, "cannot write CursorFile= %s: %s", path, strerror(-k)) < 0)
			*ret_error = NULL;
		return k;
	}
	n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		k = -errno; /* before asprintf() may change it */
		if (asprintf(ret_error, "cannot read CursorFile= %s: %s", path, strerror(-k)) < 0)
			*ret_error = NULL;
		return k;
	}
	if (n > 0 && buf[n - 1] == '\n')
		n--;
	if (!cursor_valid(buf, (size_t) n)) {
		if (asprintf(ret_error, "CursorFile= %s holds no cursor (remove it to begin now)", path) < 0)
			*ret_error = NULL;
		return -EBADMSG;
	}
	memcpy(r->saved, buf, (size_t) n);
	r->saved[n] = 0;
	if (startswith(r->saved, "since=") && export_resume_since_ns(r, &since) <= 0) {
		if (asprintf(ret_error, "CursorFile= %s holds no time after since=", path) < 0)
			*ret_error = NULL;
		return -EBADMSG;
	}
	return 0;
}

void export_resume_mark(ExportResume *r, uint64_t seq, const char *cursor) {
	size_t len = strnlen(cursor, PERFRELAY_CURSOR_MAX);
	ExportResumeMark *m;

	if (len >= PERFRELAY_CURSOR_MAX)
		return; /* libperfrelay's are shorter */
	if (r->n == EXPORT_RESUME_MARKS)
		/* Full: the newest one moves on (the older ones are those a save needs next). */
		m = &r->marks[(r->first + r->n - 1) % EXPORT_RESUME_MARKS];
	else
		m = &r->marks[(r->first + r->n++) % EXPORT_RESUME_MARKS];
	m->seq = seq;
	memcpy(m->cursor, cursor, len + 1);
}

int export_resume_save(ExportResume *r, uint64_t oldest_held) {
	const ExportResumeMark *best = NULL;
	int k;

	/* The newest mark of an event before the oldest held: every event up to it is done. */
	while (r->n > 0 && r->marks[r->first].seq < oldest_held) {
		best = &r->marks[r->first];
		r->first = (r->first + 1) % EXPORT_RESUME_MARKS;
		r->n--;
	}
	if (!best || streq(best->cursor, r->saved))
		return 0;
	k = write_file(r->path, best->cursor);
	if (k < 0) {
		r->save_errors++;
		r->last_error = -k;
		/* Kept for the next try: it stays the newest done. */
		r->first = (r->first + EXPORT_RESUME_MARKS - 1) % EXPORT_RESUME_MARKS;
		r->marks[r->first] = *best;
		r->n++;
		return k;
	}
	memcpy(r->saved, best->cursor, sizeof(r->saved));
	r->saves++;
	return 0;
}

void export_resume_lost(ExportResume *r, uint64_t count, const char *json, size_t len) {
	char reason[32] = "";
	const char *p = memmem(json, len, "\"reason\":\"", 10);

	if (p) {
		size_t off = (size_t) (p - json) + 10, n = 0;

		while (off + n < len && json[off + n] != '"' && n + 1 < sizeof(reason))
			n++;
		memcpy(reason, json + off, n);
		reason[n] = 0;
	}
#define EXPORT_RESUME_COUNT(name, text)  \
	if (streq(reason, text)) {       \
		r->lost_##name += count; \
		return;                  \
	}
	EXPORT_RESUME_REASONS(EXPORT_RESUME_COUNT)
#undef EXPORT_RESUME_COUNT
	r->lost_other += count;
}
