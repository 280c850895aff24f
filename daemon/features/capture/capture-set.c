/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's packet captures: active ones, recently ended ones, totals. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "features/capture/capture-set.h"
#include "kernel/grace.h"

typedef struct Active {
	Capture *capture;
	CaptureSummary info;
} Active;

struct Captures {
	Active *active;
	unsigned n_active, max;
	CaptureSummary history[CAPTURES_HISTORY]; /* ring of ended captures */
	unsigned n_history, history_next;
	uint32_t next_id;
	CaptureTotals totals; /* stats: of the ended captures only; active ones are added on read */
};

int captures_new(unsigned max, Captures **ret) {
	Captures *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->active = calloc(max ?: 1, sizeof(Active));
	if (!l->active) {
		free(l);
		return -ENOMEM;
	}
	l->max = max;
	l->next_id = 1;
	*ret = l;
	return 0;
}

Captures *captures_free(Captures *l) {
	if (!l)
		return NULL;
	for (unsigned i = 0; i < l->n_active; i++)
		capture_free(l->active[i].capture);
	free(l->active);
	free(l);
	return NULL;
}

uint32_t captures_next_id(Captures *l) {
	return l->next_id++;
}

bool captures_full(const Captures *l) {
	return l->n_active >= l->max;
}

void captures_count_refused(Captures *l) {
	l->totals.refused++;
}

int captures_add(Captures *l, Capture *c, const CaptureSummary *info) {
	if (l->n_active >= l->max) {
		capture_free(c);
		return -EBUSY;
	}
	l->active[l->n_active++] = (Active){ .capture = c, .info = *info };
	l->active[l->n_active - 1].info.active = true;
	l->totals.started++;
	return 0;
}

static void refresh(const Active *a, CaptureSummary *ret) {
	*ret = a->info;
	(void) capture_get_stats(a->capture, &ret->stats);
}

static void add_stats(CaptureStats *sum, const CaptureStats *s) {
	sum->seen += s->seen;
	sum->captured += s->captured;
	sum->rate_dropped += s->rate_dropped;
	sum->failed += s->failed;
}

int captures_stop(Captures *l, uint32_t id) {
	for (unsigned i = 0; i < l->n_active; i++) {
		Active *a = &l->active[i];
		CaptureSummary *h;

		if (a->info.id != id)
			continue;
		/* Detached first, then read: nothing is counted after the final figures. A run
		 * of the program that began before the detach may still be counting and
		 * emitting: one grace period waits it out. */
		capture_detach(a->capture);
		(void) grace_period(NULL);
		h = &l->history[l->history_next];
		refresh(a, h);
		h->active = false;
		a->capture = capture_free(a->capture);
		l->history_next = (l->history_next + 1) % CAPTURES_HISTORY;
		if (l->n_history < CAPTURES_HISTORY)
			l->n_history++;
		add_stats(&l->totals.stats, &h->stats);
		l->totals.stopped++;
		l->active[i] = l->active[--l->n_active];
		return 0;
	}
	return -ENOENT;
}

int captures_get(const Captures *l, uint32_t id, CaptureSummary *ret) {
	for (unsigned i = 0; i < l->n_active; i++)
		if (l->active[i].info.id == id) {
			refresh(&l->active[i], ret);
			return 0;
		}
	for (unsigned i = 0; i < l->n_history; i++)
		if (l->history[i].id == id) {
			*ret = l->history[i];
			return 0;
		}
	return -ENOENT;
}

int captures_snapshot(const Captures *l, CaptureSummary **ret, size_t *ret_n, CaptureTotals *ret_totals) {
	CaptureSummary *out = calloc(l->n_active + l->n_history + 1, sizeof(*out));
	CaptureTotals t = l->totals;
	size_t n = 0;

	if (!out)
		return -ENOMEM;
	for (unsigned i = 0; i < l->n_active; i++) {
		refresh(&l->active[i], &out[n]);
		add_stats(&t.stats, &out[n].stats);
		n++;
	}
	for (unsigned i = 0; i < l->n_history; i++)
		out[n++] = l->history[i];
	*ret = out;
	*ret_n = n;
	*ret_totals = t;
	return 0;
}
