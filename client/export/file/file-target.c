/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The file target of perfrelay-export (docs/export.md, "File"), export_target_file: the socket's
 * JSON lines appended to [File] Path=, rotated before the file would grow past MaxBytes= (Path=
 * becomes Path.1, Path.1 Path.2, ..., MaxFiles= files in all), reopened on SIGHUP for
 * logrotate. Lines gather in a buffer written once per round of the main loop (or when full);
 * an event is written when its whole line is in the file: a write that fails or ends short is
 * cut back off the file and its events counted as dropped_refused. Data is fdatasync'd when a
 * file is rotated, reopened or closed, not per write: a crash of the machine may lose what the
 * page cache had not written, a crash of the exporter nothing it wrote. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/fields.h"
#include "export/target.h"
#include "hub/encode.h"
#include "macro.h"

/* Lines waiting for a write: one write per round of the main loop, or when this fills. */
#define FILE_BUFFER (256u * 1024u)

typedef struct FileTarget {
	const ExportConfig *cfg;
	int fd;
	uint64_t size; /* of the open file, as this target wrote it */
	char *buf;     /* FILE_BUFFER */
	size_t used;
	uint64_t buffered;  /* events whose lines are in buf */
	uint64_t first_seq; /* the first of them */
	char *line;         /* ENCODE_JSON_MAX: one event's line */
	ExportFields fields;
	uint64_t reopen_at_ms;
	ExportStats s;
} FileTarget;

static int file_open(FileTarget *t) {
	struct stat st;

	t->fd = open(t->cfg->file_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (t->fd < 0 || fstat(t->fd, &st) < 0) {
		snprintf(t->s.last_error, sizeof(t->s.last_error), "%s: %m", t->cfg->file_path);
		return -errno;
	}
	t->size = (uint64_t) st.st_size;
	t->s.connected = true;
	return 0;
}

static void file_close(FileTarget *t) {
	if (t->fd < 0)
		return;
	(void) fdatasync(t->fd);
	close(t->fd);
	t->fd = -EBADF;
	t->s.connected = false;
}

/* Writes the buffered lines. All of them reach the file, or none: a short or failed write is
 * cut back off (the file keeps whole lines only) and its events are counted as refused. */
static void file_write(FileTarget *t) {
	size_t done = 0;

	if (t->used == 0)
		return;
	while (t->fd >= 0 && done < t->used) {
		ssize_t n = write(t->fd, t->buf + done, t->used - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(
				t->s.last_error,
				sizeof(t->s.last_error),
				"%s: %s",
				t->cfg->file_path,
				n < 0 ? strerror(errno) : "short write");
			break;
		}
		done += (size_t) n;
	}
	t->s.messages++;
	if (done == t->used) {
		t->size += done;
		t->s.exported += t->buffered;
	} else {
		if (t->fd >= 0 && done > 0)
			(void) ftruncate(t->fd, (off_t) t->size);
		t->s.dropped_refused += t->buffered;
	}
	t->used = 0;
	t->buffered = 0;
}

/* Path.N-1 → Path.N, ..., Path → Path.1; the oldest goes. */
static void file_rotate(FileTarget *t) {
	const char *path = t->cfg->file_path;
	char from[PATH_MAX + 16], to[PATH_MAX + 16];
	size_t len = sizeof(from);

	file_close(t);
	if (t->cfg->file_max_files <= 1)
		(void) unlink(path);
	for (uint64_t i = t->cfg->file_max_files - 1; i >= 1; i--) {
		if (i == 1)
			snprintf(from, len, "%s", path);
		else
			snprintf(from, len, "%s.%" PRIu64, path, i - 1);
		snprintf(to, len, "%s.%" PRIu64, path, i);
		if (rename(from, to) < 0 && errno != ENOENT)
			snprintf(t->s.last_error, sizeof(t->s.last_error), "rotating %.80s: %m", from);
	}
	t->s.rotations++;
	(void) file_open(t);
}

static int target_open(const ExportContext *ctx, void **ret) {
	FileTarget *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	t->cfg = ctx->cfg;
	t->fd = -EBADF;
	t->buf = malloc(FILE_BUFFER);
	t->line = malloc(ENCODE_JSON_MAX);
	snprintf(t->s.server, sizeof(t->s.server), "%s", t->cfg->file_path);
	t->s.stream_ready = true;
	r = t->buf && t->line ? file_open(t) : -ENOMEM;
	if (r < 0) {
		fprintf(stderr,
			"perfrelay-export: cannot open [File] Path=%s: %s\n",
			t->cfg->file_path,
			strerror(-r));
		free(t->buf);
		free(t->line);
		free(t);
		return r;
	}
	*ret = t;
	return 0;
}

/* The socket's JSON line of the event: encode_json() for what the daemon decodes itself, the
 * fields (a third-party type's schema) otherwise. */
static ssize_t event_line(FileTarget *t, const ExportEvent *ev) {
	DecodedEvent d;

	if (export_decode(ev->rec, ev->size, &d) < 0)
		return -EBADMSG;
	if (d.known || !ev->client || !perfrelay_record_type_name(ev->client, d.hdr.type))
		return encode_json(&d, ev->unit, t->line, ENCODE_JSON_MAX);
	if (export_fields_walk(&t->fields, ev->rec, ev->size, ev->unit, ev->client) < 0)
		return -EBADMSG;
	return export_fields_json(&t->fields, t->line, ENCODE_JSON_MAX);
}

static void target_offer(void *userdata, const ExportEvent *ev, uint64_t now) {
	FileTarget *t = userdata;
	ssize_t n;

	t->s.offered++;
	n = event_line(t, ev);
	if (n <= 0) {
		t->s.dropped_refused++;
		return;
	}
	if (t->used + (size_t) n > FILE_BUFFER)
		file_write(t);
	/* The file is rotated before this line would take it past MaxBytes=. */
	if (t->size + t->used + (uint64_t) n > t->cfg->file_max_bytes && t->size + t->used > 0) {
		file_write(t);
		file_rotate(t);
	}
	if (t->fd < 0) {
		t->s.dropped_refused++; /* the file could not be opened again: last_error says why */
		return;
	}
	if (t->used == 0)
		t->first_seq = ev->seq;
	memcpy(t->buf + t->used, t->line, (size_t) n);
	t->used += (size_t) n;
	t->buffered++;
	(void) now;
}

static void target_poll(void *userdata, uint64_t now) {
	FileTarget *t = userdata;

	/* A file that could not be opened again (its directory full, gone) is tried each second. */
	if (t->fd < 0 && now >= t->reopen_at_ms) {
		t->reopen_at_ms = now + 1000;
		(void) file_open(t);
	}
	file_write(t);
}

static void target_flush(void *t) {
	file_write(t);
}

static bool target_idle(void *userdata) {
	FileTarget *t = userdata;

	return t->used == 0;
}

static bool target_has_room(void *t) {
	(void) t;
	return true; /* lines are written as they come: nothing waits for room */
}

static void target_abandon(void *t) {
	file_write(t); /* a write is never slow to give up on: nothing is left */
}

static uint64_t target_oldest_held(void *userdata, uint64_t newest) {
	FileTarget *t = userdata;

	return t->used > 0 ? t->first_seq : UINT64_MAX;
}

static void target_figures(void *userdata, ExportStats *ret) {
	FileTarget *t = userdata;

	*ret = t->s;
	ret->dropped = t->s.dropped_refused;
	ret->queued = t->buffered;
}

/* SIGHUP: the file logrotate moved away is finished, and Path= opened again (made anew). */
static void target_reopen(void *userdata) {
	FileTarget *t = userdata;

	file_write(t);
	file_close(t);
	if (file_open(t) >= 0)
		t->s.reconnects++;
}

static void target_close(void *userdata) {
	FileTarget *t = userdata;

	file_write(t);
	file_close(t);
	export_fields_done(&t->fields);
	free(t->buf);
	free(t->line);
	free(t);
}

const ExportTargetType export_target_file = {
	.name = "file",
	.open = target_open,
	.offer = target_offer,
	.poll = target_poll,
	.flush = target_flush,
	.idle = target_idle,
	.oldest_held = target_oldest_held,
	.has_room = target_has_room,
	.abandon = target_abandon,
	.figures = target_figures,
	.reopen = target_reopen,
	.close = target_close,
};
