/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The journal target of perfrelay-export (docs/export.md, "Journal"), export_target_journal:
 * one journal entry per event, for the low-rate types (exec, exit, connect): MESSAGE= a short
 * line, the event's fields as PERFRELAY_<KEY>= (nested keys joined by '_', an array's
 * elements repeating its field), OBJECT_PID= the event's process (journald adds what it knows
 * of it), UNIT= its systemd unit. At most RateLimitPerSec= entries a second (bursts up to
 * RateLimitBurst=): the journal is every service's, and a flood of opens must not push the
 * rest out; the excess is counted as dropped_rate. sd_journal_sendv() is a datagram to
 * journald, synchronous: what it refuses is counted as dropped_refused. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include "export/fields.h"
#include "export/target.h"
#include "macro.h"

/* A field name: PERFRELAY_ and a key path, as journald allows (64 bytes, [A-Z0-9_]). */
#define NAME_MAX_JOURNAL 64u

typedef struct JournalTarget {
	const ExportConfig *cfg;
	ExportFields fields;
	struct iovec *iov;
	size_t n_iov;
	char *text; /* the entry's fields, NAME=value back to back */
	size_t text_size;
	double tokens;
	uint64_t tokens_at_ms;
	ExportStats s;
} JournalTarget;

static int target_open(const ExportContext *ctx, void **ret) {
	JournalTarget *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->cfg = ctx->cfg;
	t->tokens = (double) t->cfg->journal_burst;
	t->s.stream_ready = t->s.connected = true;
	snprintf(t->s.server, sizeof(t->s.server), "journal");
	*ret = t;
	return 0;
}

/* A token per entry, RateLimitPerSec= of them a second, at most RateLimitBurst= saved. */
static bool rate_take(JournalTarget *t, uint64_t now) {
	if (t->tokens_at_ms != 0)
		t->tokens = MIN(
			(double) t->cfg->journal_burst,
			t->tokens + (double) (now - t->tokens_at_ms) * (double) t->cfg->journal_rate / 1000.0);
	t->tokens_at_ms = now;
	if (t->tokens < 1.0)
		return false;
	t->tokens -= 1.0;
	return true;
}

/* The journal field name of a key path: PERFRELAY_ARGV, PERFRELAY_ANCESTORS_COMM. A key is a C
 * identifier or one of perfrelay's; anything else becomes '_'. */
static size_t field_name(char *buf, const char *const *path, unsigned depth) {
	size_t n = (size_t) snprintf(buf, NAME_MAX_JOURNAL + 1, "PERFRELAY");

	for (unsigned i = 0; i <= depth && n < NAME_MAX_JOURNAL; i++) {
		if (!path[i])
			continue;
		buf[n++] = '_';
		for (const char *c = path[i]; *c && n < NAME_MAX_JOURNAL; c++)
			buf[n++] = (*c >= 'a' && *c <= 'z') ? (char) (*c - 'a' + 'A') :
				((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')) ? *c :
											 '_';
	}
	buf[n] = 0;
	return n;
}

static int grow(JournalTarget *t, size_t text, size_t iov) {
	if (t->text_size < text) {
		char *p = realloc(t->text, text);

		if (!p)
			return -ENOMEM;
		t->text = p;
		t->text_size = text;
	}
	if (t->n_iov < iov) {
		struct iovec *v = realloc(t->iov, iov * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->iov = v;
		t->n_iov = iov;
	}
	return 0;
}

/* The entry's fields into t->iov: MESSAGE=, PRIORITY=, SYSLOG_IDENTIFIER=, OBJECT_PID=, UNIT=,
 * then one per value. Returns how many. */
static ssize_t entry(JournalTarget *t) {
	const ExportFields *f = &t->fields;
	const char *path[EXPORT_FIELDS_DEPTH_MAX + 1] = {};
	const ExportField *c = NULL, *w = NULL;
	size_t used = 0, k = 0, size = 0;
	unsigned d = 0;
	char *p;

	/* Each value: its name, '=', the value (a number's 20 digits), and the fixed fields. */
	for (size_t i = 0; i < f->n; i++)
		size += NAME_MAX_JOURNAL + 2 + 24 + f->f[i].len;
	size += 512 + 3 * (size_t) f->n + 2 * 256;
	if (grow(t, size, f->n + 8) < 0)
		return -ENOMEM;
	p = t->text;
#define ADD(...)                                                                              \
	do {                                                                                  \
		int _n = snprintf(p + used, size - used, __VA_ARGS__);                        \
		/* cut, never past the text, if the estimate above were ever short */         \
		_n = (int) MIN((size_t) MAX(_n, 0), size - used - 1);                         \
		t->iov[k++] = (struct iovec){ .iov_base = p + used, .iov_len = (size_t) _n }; \
		used += (size_t) _n + 1;                                                      \
	} while (0)
	for (size_t i = 0; i < f->n; i++) {
		const ExportField *x = &f->f[i];
		char name[NAME_MAX_JOURNAL + 1];
		size_t n;

		if (x->kind == EXPORT_FIELD_END) {
			d--;
			continue;
		}
		if (x->key)
			path[d] = x->key;
		if (x->kind == EXPORT_FIELD_OBJECT || x->kind == EXPORT_FIELD_ARRAY) {
			path[++d] = NULL;
			continue;
		}
		n = field_name(name, path, d);
		switch (x->kind) {
		case EXPORT_FIELD_UINT:
			ADD("%s=%" PRIu64, name, x->u);
			break;
		case EXPORT_FIELD_INT:
			ADD("%s=%" PRId64, name, x->i);
			break;
		case EXPORT_FIELD_BOOL:
			ADD("%s=%s", name, x->b ? "true" : "false");
			break;
		case EXPORT_FIELD_STRING:
		case EXPORT_FIELD_BYTES:
			/* A journal value may hold any bytes, NULs and newlines too. */
			memcpy(p + used, name, n);
			p[used + n] = '=';
			memcpy(p + used + n + 1, x->s, x->len);
			t->iov[k++] = (struct iovec){ .iov_base = p + used, .iov_len = n + 1 + x->len };
			used += n + 1 + x->len;
			if (d == 0 && x->kind == EXPORT_FIELD_STRING && streq(x->key, "comm"))
				c = x;
			if (d == 0 && x->kind == EXPORT_FIELD_STRING &&
			    (streq(x->key, "filename") || streq(x->key, "path") || streq(x->key, "address")))
				w = x;
			break;
		default:
			break;
		}
	}
	/* MESSAGE: "exec 1234 (bash) /usr/bin/ls", as journalctl's one line shows it. */
	{
		ADD("MESSAGE=%s %" PRIu32 "%s%.*s%s%s%.*s",
		    f->type,
		    f->pid,
		    c ? " (" : "",
		    c ? (int) MIN(c->len, 64u) : 0,
		    c ? c->s : "",
		    c ? ")" : "",
		    w ? " " : "",
		    w ? (int) MIN(w->len, 200u) : 0,
		    w ? w->s : "");
	}
	ADD("PRIORITY=6");
	ADD("SYSLOG_IDENTIFIER=perfrelay");
	if (f->has_pid)
		ADD("OBJECT_PID=%" PRIu32, f->pid);
	if (f->unit)
		ADD("UNIT=%s", f->unit);
#undef ADD
	return (ssize_t) k;
}

static void target_offer(void *userdata, const ExportEvent *ev, uint64_t now) {
	JournalTarget *t = userdata;
	ssize_t n;
	int r;

	t->s.offered++;
	if (!rate_take(t, now)) {
		t->s.dropped_rate++;
		return;
	}
	if (export_fields_walk(&t->fields, ev->rec, ev->size, ev->unit, ev->client) < 0 || (n = entry(t)) < 0) {
		t->s.dropped_refused++;
		return;
	}
	r = sd_journal_sendv(t->iov, (int) n);
	if (r < 0) {
		snprintf(t->s.last_error, sizeof(t->s.last_error), "sd_journal_sendv: %s", strerror(-r));
		t->s.dropped_refused++;
		return;
	}
	t->s.exported++;
	t->s.messages++;
}

static void target_poll(void *t, uint64_t now) {
	(void) t;
	(void) now;
}

static void target_nothing(void *t) {
	(void) t; /* nothing is held: every entry was sent when offered */
}

static bool target_idle(void *t) {
	(void) t;
	return true; /* an entry is sent when it is offered */
}

static void target_figures(void *userdata, ExportStats *ret) {
	JournalTarget *t = userdata;

	*ret = t->s;
	ret->dropped = t->s.dropped_refused + t->s.dropped_rate;
}

static void target_close(void *userdata) {
	JournalTarget *t = userdata;

	export_fields_done(&t->fields);
	free(t->iov);
	free(t->text);
	free(t);
}

const ExportTargetType export_target_journal = {
	.name = "journal",
	.open = target_open,
	.offer = target_offer,
	.poll = target_poll,
	.flush = target_nothing,
	.idle = target_idle,
	.has_room = target_idle,
	.abandon = target_nothing,
	.figures = target_figures,
	.close = target_close,
};
