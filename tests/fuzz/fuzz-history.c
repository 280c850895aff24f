/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the history's readers (features/history/): what a damaged disk, a torn write or a
 * client can hand them. The first byte chooses:
 * - 0: a cursor a client sends ("after_cursor"), parsed and, when it parses, formatted back to
 *   the same text;
 * - 1: the frames of a block: the rest is compressed into an intact block of a segment (so the
 *   CRC holds and the frame walker, the decoder and the encoder see the bytes), and a stream
 *   reads it all, as root and as a user who sees their own uid (redaction), every line JSON,
 *   and as binary frames (with cursor and unit frames), every frame whole and a record;
 * - 2: a segment file as the disk has it: the store scans it (torn tails, bad headers) and a
 *   stream reads what it kept. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <json-c/json.h>

#include "event.h"
#include "features/history/history-store.h"
#include "features/history/history-stream.h"

#define LINES (256u * 1024u)

static char dir[] = "/tmp/perfrelay-fuzz-history-XXXXXX";
static const char id_text[] = "0123456789abcdef0123456789abcdef";

static void write_file(const char *name, const void *p, size_t n) {
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (n > 0 && write(fd, p, n) != (ssize_t) n))
		abort();
	close(fd);
}

static void clean(void) {
	static const char *const names[] = {
		"id", "lock", "0000000000000001.seg", "0000000000000001.seg.corrupt"
	};
	char path[256];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		(void) unlink(path);
	}
}

static void remove_dir(void) {
	clean();
	(void) rmdir(dir);
}

/* A segment header of this history (id_text), closed or not. */
static void segment_header(struct history_segment_header *h, bool closed) {
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, HISTORY_SEGMENT_MAGIC, 8);
	h->header_size = sizeof(*h);
	h->flags = closed ? HISTORY_SEGMENT_CLOSED : 0;
	for (size_t i = 0; i < 16; i++)
		sscanf(id_text + 2 * i, "%2hhx", &h->history_id[i]);
	h->segment = 1;
	h->crc = history_segment_header_crc(h);
}

/* Every line a stream of sub gives, each one JSON object. */
static void read_all(HistoryStore *s, SubscriptionAccess access) {
	Subscription sub = { .access = access, .access_uid = 1000, .history = true, .cursors = true };
	static char buf[LINES];
	HistoryStream *h;
	char err[256];
	ssize_t n;

	if (history_stream_open(s, &sub, &h, err, sizeof(err)) < 0)
		abort(); /* from the start: nothing to refuse */
	while ((n = history_stream_read(h, buf, sizeof(buf))) != 0) {
		char *p = buf, *end;

		if (n == -EINPROGRESS)
			continue;
		if (n < 0 || (size_t) n > sizeof(buf) || buf[n - 1] != '\n')
			abort();
		for (; p < buf + n; p = end + 1) {
			json_object *o;
			char *line;

			end = memchr(p, '\n', (size_t) (buf + n - p));
			line = strndup(p, (size_t) (end - p));
			if (!line)
				abort();
			o = json_tokener_parse(line);
			if (!o || !json_object_is_type(o, json_type_object))
				abort();
			json_object_put(o);
			free(line);
		}
	}
	history_stream_free(h);
}

/* Every frame a binary stream of sub gives: a u32 length and a record of that size, a cursor
 * frame's payload one NUL-terminated string, nothing cut between two reads. */
static void read_all_binary(HistoryStore *s, SubscriptionAccess access) {
	Subscription sub = { .access = access,
			     .access_uid = 1000,
			     .history = true,
			     .cursors = true,
			     .unit_frames = true,
			     .format = SUBSCRIPTION_FORMAT_BINARY };
	static uint8_t buf[LINES];
	HistoryStream *h;
	char err[256];
	ssize_t n;

	if (history_stream_open(s, &sub, &h, err, sizeof(err)) < 0)
		abort();
	while ((n = history_stream_read(h, (char *) buf, sizeof(buf))) != 0) {
		size_t pos = 0;

		if (n == -EINPROGRESS)
			continue;
		if (n < 0 || (size_t) n > sizeof(buf))
			abort();
		while (pos < (size_t) n) {
			struct perfrelay_hdr hdr;
			uint32_t len;

			if ((size_t) n - pos < sizeof(len) + sizeof(hdr))
				abort();
			memcpy(&len, buf + pos, sizeof(len));
			memcpy(&hdr, buf + pos + sizeof(len), sizeof(hdr));
			if (len < sizeof(hdr) || len > PERFRELAY_RECORD_MAX ||
			    len > (size_t) n - pos - sizeof(len) || hdr.magic != PERFRELAY_MAGIC)
				abort();
			if (hdr.type == PERFRELAY_TYPE_CURSOR &&
			    (hdr.size != len || len - sizeof(hdr) > PERFRELAY_CURSOR_MAX ||
			     strnlen((const char *) buf + pos + sizeof(len) + sizeof(hdr),
				     len - sizeof(hdr)) != len - sizeof(hdr) - 1))
				abort();
			pos += sizeof(len) + len;
		}
	}
	history_stream_free(h);
}

static void frames(const uint8_t *data, size_t size) {
	static uint8_t comp[HISTORY_BLOCK_COMP_MAX];
	struct history_segment_header h;
	struct history_block_header b = { .magic = HISTORY_BLOCK_MAGIC };
	uint8_t *file;
	size_t c;

	if (size > HISTORY_BLOCK_RAW_MAX)
		return;
	c = ZSTD_compress(comp, sizeof(comp), data, size, 1);
	if (ZSTD_isError(c))
		abort();
	/* Its count of events as the writer would have counted them: any number the frames
	 * could hold, the reader must not trust it beyond them. */
	b.compressed_size = (uint32_t) c;
	b.raw_size = (uint32_t) size;
	b.n_events = (uint32_t) (size / 64);
	b.crc = history_crc(history_crc(0, &b, sizeof(b)), comp, c);
	segment_header(&h, false);
	file = malloc(sizeof(h) + sizeof(b) + c);
	if (!file)
		abort();
	memcpy(file, &h, sizeof(h));
	memcpy(file + sizeof(h), &b, sizeof(b));
	memcpy(file + sizeof(h) + sizeof(b), comp, c);
	write_file("0000000000000001.seg", file, sizeof(h) + sizeof(b) + c);
	free(file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	HistoryStore *s = NULL;

	if (size < 1)
		return 0;
	static bool made;

	if (!made) {
		if (!mkdtemp(dir))
			abort();
		atexit(remove_dir);
		made = true;
	}
	if (data[0] % 3 == 0) {
		char text[HISTORY_CURSOR_MAX + 16], back[HISTORY_CURSOR_MAX];
		HistoryCursor c;

		if (size - 1 >= sizeof(text))
			return 0;
		memcpy(text, data + 1, size - 1);
		text[size - 1] = '\0';
		if (history_cursor_parse(text, &c) == 0) {
			history_cursor_format(&c, back);
			if (strcmp(back, text) != 0 && strlen(text) == strlen(back))
				abort(); /* one spelling of each cursor */
		}
		return 0;
	}
	clean();
	write_file("id", id_text, 32);
	if (data[0] % 3 == 1)
		frames(data + 1, size - 1);
	else {
		struct history_segment_header h;
		uint8_t *file = malloc(sizeof(h) + size);

		if (!file)
			abort();
		/* Half the inputs behind a valid header, so that the blocks are what varies. */
		segment_header(&h, data[0] & 0x80);
		memcpy(file, &h, sizeof(h));
		memcpy(file + sizeof(h), data + 1, size - 1);
		write_file(
			"0000000000000001.seg",
			(data[0] & 0x40) ? file + sizeof(h) : file,
			(data[0] & 0x40) ? size - 1 : sizeof(h) + size - 1);
		free(file);
	}
	if (history_store_open(dir, &s) < 0)
		return 0;
	read_all(s, SUBSCRIPTION_ACCESS_ALL);
	read_all(s, SUBSCRIPTION_ACCESS_UID);
	read_all_binary(s, SUBSCRIPTION_ACCESS_ALL);
	read_all_binary(s, SUBSCRIPTION_ACCESS_UID);
	history_store_free(s);
	return 0;
}
