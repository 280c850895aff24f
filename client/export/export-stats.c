/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelay-export's stats file, written with json-c. */
#include "export/export-stats.h"

#include <errno.h>
#include <json-c/json.h>
#include <string.h>

#include "export/export-resume.h"
#include "json-util.h"
#include "macro.h"

static int add_u64(json_object *o, const char *k, uint64_t v) {
	json_object *x = json_object_new_uint64(v);

	if (!x || json_object_object_add(o, k, x) < 0) {
		json_object_put(x);
		return -ENOMEM;
	}
	return 0;
}

static int add_value(json_object *o, const char *k, json_object *x) {
	if (!x || json_object_object_add(o, k, x) < 0) {
		json_object_put(x);
		return -ENOMEM;
	}
	return 0;
}

/* The target's keys into o, under the names docs/export.md gives them. */
static int add_target(json_object *o, const ExportStats *s) {
	const struct {
		const char *key;
		uint64_t value;
	} figures[] = {
		{ "exported", s->exported },
		{ "duplicates", s->duplicates },
		{ "export_dropped", s->dropped },
		{ "dropped_queue_full", s->dropped_queue_full },
		{ "dropped_retries", s->dropped_retries },
		{ "dropped_refused", s->dropped_refused },
		{ "dropped_shutdown", s->dropped_shutdown },
		{ "dropped_rate", s->dropped_rate },
		{ "export_retried", s->retried },
		{ "export_retried_late", s->retried_late },
		{ "queued", s->queued },
		{ "in_flight", s->in_flight },
		{ "messages", s->messages },
		{ "in_flight_messages", s->in_flight_messages },
		{ "reconnects", s->reconnects },
		{ "rotations", s->rotations },
		{ "connect_failures", s->connect_failures },
	};
	int r;

	for (size_t i = 0; i < ELEMENTSOF(figures); i++) {
		r = add_u64(o, figures[i].key, figures[i].value);
		if (r < 0)
			return r;
	}
	if ((r = add_value(o, "connected", json_object_new_boolean(s->connected))) < 0 ||
	    (r = add_value(o, "stream_ready", json_object_new_boolean(s->stream_ready))) < 0 ||
	    (r = add_value(o, "server", json_object_new_string(s->server))) < 0 ||
	    (r = add_value(o, "last_error", json_object_new_string(s->last_error))) < 0)
		return r;
	return 0;
}

static int add_named_target(json_object *root, const char *name, const ExportStats *s) {
	json_object *t;
	int r;

	if (!s)
		return 0;
	t = json_object_new_object();
	if (!t)
		return -ENOMEM;
	r = add_u64(t, "offered", s->offered);
	if (r >= 0)
		r = add_target(t, s);
	if (r < 0) {
		json_object_put(t);
		return r;
	}
	return add_value(root, name, t);
}

/* "resume": where a restart begins and what the history lost before it reached us. */
static int add_resume(json_object *root, const ExportResume *r) {
	json_object *o = json_object_new_object(), *lost;
	int k;

	if (!o || json_object_object_add(root, "resume", o) < 0) {
		json_object_put(o);
		return -ENOMEM;
	}
	if ((k = add_value(o, "cursor_file", json_object_new_string(r->path))) < 0 ||
	    (k = add_value(o, "cursor", json_object_new_string(r->saved))) < 0 ||
	    (k = add_u64(o, "saves", r->saves)) < 0 || (k = add_u64(o, "save_errors", r->save_errors)) < 0 ||
	    (k = add_value(
		     o, "last_error", json_object_new_string(r->last_error ? strerror(r->last_error) : ""))) <
		    0 ||
	    (k = add_value(o, "cursor_refused", json_object_new_string(r->refused))) < 0)
		return k;
	lost = json_object_new_object();
	if ((k = add_value(o, "history_lost", lost)) < 0)
		return k;
#define ADD_LOST(name, text)                               \
	if ((k = add_u64(lost, text, r->lost_##name)) < 0) \
		return k;
	EXPORT_RESUME_REASONS(ADD_LOST)
#undef ADD_LOST
	return add_u64(lost, "other", r->lost_other);
}

int export_stats_write_json(
	uint64_t offered,
	uint64_t daemon_lost,
	const ExportResume *resume,
	const char *const *names,
	const ExportStats *stats,
	size_t n,
	FILE *f) {
	_cleanup_(json_object_putp) json_object *root = json_object_new_object();
	const char *text;
	int r;

	if (!root)
		return -ENOMEM;
	if ((r = add_u64(root, "offered", offered)) < 0 || (r = add_u64(root, "daemon_lost", daemon_lost)) < 0)
		return r;
	if (resume && (r = add_resume(root, resume)) < 0)
		return r;
	if (n > 0 && (r = add_target(root, &stats[0])) < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		if ((r = add_named_target(root, names[i], &stats[i])) < 0)
			return r;
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
	if (!text)
		return -ENOMEM;
	fputs(text, f);
	fputc('\n', f);
	return ferror(f) ? -EIO : 0;
}
