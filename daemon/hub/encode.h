/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Encoding of decoded events for clients: JSON lines (one object + '\n') and binary frames.
 * Pure and allocation-free: the caller provides the buffer. Output is checked against
 * json-c by the unit tests and the fuzzer. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "decode/btfrec.h"
#include "decode/decode.h"
#include "kernel/containers.h"

/* Upper bound of one encoded JSON line for any record (the worst case is an unknown type with
 * a 64 KiB payload in base64, or strings made only of bytes that need \u escapes). */
#define ENCODE_JSON_MAX          (96u * 1024u)
/* A unit name longer than this is left out of the event (systemd's own limit is 255). */
#define ENCODE_UNIT_MAX          255u
/* The producer_name of a third-party record is cut here. */
#define ENCODE_PRODUCER_NAME_MAX 63u

/* Writes one JSON line for ev into buf. `unit` is the systemd unit of the event's cgroup or
 * NULL (then the key is omitted). Returns the number of bytes written, or -ENOBUFS if size is
 * too small (nothing useful is left in buf then). Strings are escaped per RFC 8259; bytes that
 * are not valid UTF-8 are replaced by U+FFFD. */
ssize_t encode_json(const DecodedEvent *ev, const char *unit, char *buf, size_t size);
/* The same, with the container of the event's cgroup (NULL: none): the line then ends with
 * ,"container":{"id":..,"runtime":..} and the names the main thread has found for it so far
 * (docs/containers.md). */
ssize_t encode_json_in(
	const DecodedEvent *ev, const char *unit, const Container *container, char *buf, size_t size);
/* ,"container":{...} alone; at most ENCODE_CONTAINER_JSON_MAX bytes. */
#define ENCODE_CONTAINER_JSON_MAX 6400u
ssize_t encode_container_json(const Container *c, char *buf, size_t size);

/* {"type":"lost","count":N}\n */
ssize_t encode_lost_json(uint64_t count, char *buf, size_t size);

/* Escapes s (up to len bytes or its NUL) as a JSON string with quotes; returns bytes or -ENOBUFS. */
ssize_t encode_json_string(const char *s, size_t len, char *buf, size_t size);

/* The length of the well-formed UTF-8 sequence at s (n bytes readable), or 0 when s[0] does not
 * start one (Unicode 15 §3.9, D92): what the JSON line replaces by U+FFFD. */
size_t encode_utf8_sequence_len(const uint8_t *s, size_t n);

/* Writes the decimal digits of v at p (at most 20 bytes, no NUL); returns the end. */
char *encode_u64_digits(char *p, uint64_t v);
/* Writes s (n bytes) at p as a quoted base64 string (2 + 4 * ceil(n / 3) bytes); returns the end. */
char *encode_base64(char *p, const uint8_t *s, size_t n);

/* Appends ,"field":value for every top-level field of rec (size bytes) to buf: no braces, so
 * the caller splices it into its own object. Returns bytes written, -EBADMSG if size is
 * smaller than the record struct, -ENOBUFS if buf is too small. Never more than
 * BTFREC_JSON_MAX bytes. */
ssize_t encode_json_btf_fields(const BtfRec *r, const void *rec, size_t size, char *buf, size_t bufsize);

/* One JSON line for a third-party record with a decoder built from its producer's BTF:
 * {"type":<rec's name>,"ts":..,"cpu":..,"seq":..,"producer":N,"producer_name":..,<fields>,"unit":..}.
 * producer_name, unit and container may be NULL (then omitted). Returns bytes written, -EBADMSG when the
 * record is shorter than rec's struct (the reader checks that first: it publishes such a record
 * as "unknown" and counts it in btf_short), or -ENOBUFS. Fits in ENCODE_JSON_MAX. */
ssize_t encode_json_btf(
	const DecodedEvent *ev,
	const BtfRec *rec,
	const char *producer_name,
	const char *unit,
	const Container *container,
	char *buf,
	size_t size);
