/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading exported events back from NATS JetStream for perfrelayctl monitor --nats. */
#include "ctl/monitor-nats.h"

#include <errno.h>
#include <nats/nats.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "decode/decode.h"
#include "hub/encode.h"
#include "common/export-frame.h"
#include "macro.h"

#define POLL_MS 200

static bool signalled(int signal_fd) {
	struct signalfd_siginfo si;

	return read(signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si);
}

/* A message's records: a batch (Perfrelay-Batch header; docs/export.md) or, from exporters
 * before batches, one bare record. Each goes to emit as a JSON line with its unit. */
static int emit_message(natsMsg *m, const jsMsgMetaData *meta, monitor_nats_emit_t emit, void *userdata) {
	static char line[ENCODE_JSON_MAX];
	const uint8_t *data = (const uint8_t *) natsMsg_GetData(m);
	size_t len = (size_t) natsMsg_GetDataLength(m), pos = 0;
	const char *batch = NULL;
	ExportRecord rec;
	int k, r = 0;

	if (natsMsgHeader_Get(m, "Perfrelay-Batch", &batch) != NATS_OK || !batch) {
		rec = (ExportRecord){ .rec = data, .size = len };
		k = len >= sizeof(rec.hdr) ? 1 : -EBADMSG;
		if (k > 0)
			memcpy(&rec.hdr, data, sizeof(rec.hdr));
	} else if (!streq(batch, EXPORT_BATCH_FORMAT))
		k = -EPROTONOSUPPORT;
	else
		k = export_batch_next(data, len, &pos, &rec);
	for (; k > 0 && r >= 0; k = batch ? export_batch_next(data, len, &pos, &rec) : 0) {
		DecodedEvent ev;
		ssize_t n;

		if (decode_event(rec.rec, rec.size, &ev) != DECODE_OK ||
		    (n = encode_json(&ev, rec.unit[0] ? rec.unit : NULL, line, sizeof(line))) <= 0) {
			k = -EBADMSG;
			break;
		}
		r = emit(line, (size_t) n - 1, meta ? meta->Timestamp - (int64_t) ev.hdr.ts_ns : 0, userdata);
	}
	if (k < 0)
		fprintf(stderr,
			"perfrelayctl: skipping %s on %s: %s\n",
			batch ? "the rest of a batch" : "a message",
			natsMsg_GetSubject(m),
			k == -EPROTONOSUPPORT ? "a batch format this perfrelayctl does not know" :
						"not perfrelay records");
	return r;
}

int monitor_nats_run(const MonitorNatsArgs *a, monitor_nats_emit_t emit, void *userdata, int signal_fd) {
	const char *stream = a->stream ?: "PERFRELAY";
	natsConnection *nc = NULL;
	natsSubscription *sub = NULL;
	jsStreamInfo *si = NULL;
	jsCtx *js = NULL;
	jsSubOptions so;
	jsErrCode jerr = 0;
	char filter[512];
	natsStatus s;
	int r = 0;

	s = natsConnection_ConnectTo(&nc, a->url);
	if (s != NATS_OK) {
		fprintf(stderr, "perfrelayctl: cannot connect to %s: %s\n", a->url, natsStatus_GetText(s));
		return -ECONNREFUSED;
	}
	s = natsConnection_JetStream(&js, nc, NULL);
	if (s == NATS_OK)
		s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
	if (s != NATS_OK) {
		fprintf(stderr, "perfrelayctl: no stream %s on %s: %s\n", stream, a->url, natsStatus_GetText(s));
		r = -ENOENT;
		goto finish;
	}
	if (a->host)
		snprintf(filter, sizeof(filter), "perfrelay.%s.>", a->host);
	else
		snprintf(filter, sizeof(filter), "%s", si->Config->SubjectsLen > 0 ? si->Config->Subjects[0] : ">");
	if (a->no_follow && si->State.Msgs == 0)
		goto finish;

	jsSubOptions_Init(&so);
	so.Stream = stream;
	so.Ordered = true; /* no state on the server; gaps are re-requested by nats.c */
	if (a->since_ns > 0) {
		struct timespec now;

		clock_gettime(CLOCK_REALTIME, &now);
		so.Config.DeliverPolicy = js_DeliverByStartTime;
		so.Config.OptStartTime = (int64_t) now.tv_sec * 1000000000 + now.tv_nsec - a->since_ns;
	} else
		so.Config.DeliverPolicy = js_DeliverAll;
	s = js_SubscribeSync(&sub, js, filter, NULL, &so, &jerr);
	if (s != NATS_OK) {
		fprintf(stderr, "perfrelayctl: cannot read %s (%s): %s\n", stream, filter, natsStatus_GetText(s));
		r = -EIO;
		goto finish;
	}

	for (;;) {
		natsMsg *m = NULL;
		jsMsgMetaData *meta = NULL;
		bool last = false;

		if (poll(&(struct pollfd){ .fd = signal_fd, .events = POLLIN }, 1, 0) > 0 &&
		    signalled(signal_fd))
			break;
		s = natsSubscription_NextMsg(&m, sub, POLL_MS);
		if (s == NATS_TIMEOUT) {
			if (a->no_follow && a->since_ns > 0)
				break; /* nothing stored since then */
			continue;
		}
		if (s != NATS_OK) {
			fprintf(stderr, "perfrelayctl: reading %s failed: %s\n", stream, natsStatus_GetText(s));
			r = -EIO;
			break;
		}
		if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
			last = meta->NumPending == 0;
		}
		r = emit_message(m, meta, emit, userdata);
		jsMsgMetaData_Destroy(meta);
		natsMsg_Destroy(m);
		if (r < 0 || (last && a->no_follow))
			break;
	}

finish:
	natsSubscription_Destroy(sub);
	jsStreamInfo_Destroy(si);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return r;
}
