/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A strict INI parser for perfrelay's configuration files: sections, Key=Value lines, # and ;
 * comments, a main file plus NAME.conf files of a drop-in directory in lexical order. The
 * schema (config.c) says which sections exist and applies each key; the parser makes every
 * error message name the file, the line, the key and its value. Pure apart from reading the
 * files; never logs: errors come back as text. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define KIB UINT64_C(1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

/* Values quoted back in error messages are cut here: a message is one log line, not a dump. */
#define CONF_ERROR_VALUE_MAX 200u

/* Where the parser is, for error messages. */
typedef struct ConfParseState {
	const char *filename;
	unsigned line;
	const char *section; /* the current section (one of the schema's), or NULL before the first */
	const char *key;     /* set while a Key=Value line is being applied */
	const char *value;
	char **ret_error;
} ConfParseState;

typedef struct ConfSchema {
	const char *const *sections;
	size_t n_sections;
	/* Applies st->key = st->value in st->section; on error returns conf_line_error(st, ...). */
	int (*apply)(ConfParseState *st, void *userdata);
} ConfSchema;

/* Parses text (a whole file's bytes; a UTF-8 BOM is skipped). Stops at the first error, with
 * *ret_error set to its message (if ret_error is not NULL). */
int conf_parse_text(
	const ConfSchema *schema,
	void *userdata,
	const char *text,
	size_t size,
	const char *filename,
	char **ret_error);
/* Reads a whole file (NUL-terminated past *ret_size), refusing anything but a regular file of at
 * most max_bytes; the message names the file. Returns -ENOENT (without a message) if it does not
 * exist. */
int conf_read_file(const char *path, size_t max_bytes, char **ret, size_t *ret_size, char **ret_error);
/* main_path (absent: fine) and then the NAME.conf files of dropin_dir (absent: fine), in lexical order;
 * files must be regular and at most max_file_bytes. */
int conf_parse_files(
	const ConfSchema *schema,
	void *userdata,
	const char *main_path,
	const char *dropin_dir,
	size_t max_file_bytes,
	char **ret_error);

/* "FILE:LINE: Key=Value: message" while a key is applied, else "FILE:LINE: message"; returns r
 * (errno is set from r first, so the format may use %m). */
_printf_(3, 4) int conf_line_error_errno(ConfParseState *st, int r, const char *fmt, ...);
#define conf_line_error(st, ...) conf_line_error_errno(st, -EINVAL, __VA_ARGS__)
/* "FILE: message", for errors about a whole file or directory. */
_printf_(4, 5) int conf_file_error(char **ret_error, int r, const char *filename, const char *fmt, ...);
/* s (at most max bytes of it, then "...") with control bytes and backslashes escaped as \xNN. */
char *conf_escape(const char *s, size_t max);

/* Values. */
int conf_parse_bool(const char *s, bool *ret); /* yes/no, true/false, on/off, 1/0 */
/* Decimal digits only, with an optional K/M/G (1024-based) suffix when with_suffix is set. */
int conf_parse_u64(const char *s, bool with_suffix, uint64_t *ret);
/* "65536" or, for sizes that are a whole number of K/M/G, "64K" -- as a user would write it. */
void conf_format_size(uint64_t v, bool with_suffix, char *buf, size_t size);
typedef int (*ConfWordFn)(ConfParseState *st, const char *word, void *userdata);
/* Calls fn for each word of st->value, split at whitespace (and commas if comma). */
int conf_for_each_word(ConfParseState *st, bool comma, ConfWordFn fn, void *userdata);
