/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A strict INI parser (like systemd's conf-parser.c): sections, Key=Value lines, comments, a
 * main file and its drop-in directory, error messages that name file, line, key and value.
 * What the keys mean is the schema's (config.c). Pure apart from reading the files; never logs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/conf-parser.h"

/* Copies s (at most max bytes of it, then "...") with control bytes and backslashes escaped as
 * \xNN, so that whatever a file contains, the message stays one printable log line. */
char *conf_escape(const char *s, size_t max) {
	size_t n = strlen(s), cut = MIN(n, max);
	char *buf, *p;

	buf = malloc(cut * 4 + 4);
	if (!buf)
		return NULL;
	p = buf;
	for (size_t i = 0; i < cut; i++) {
		unsigned char c = (unsigned char) s[i];
		if (c < 0x20 || c == 0x7f || c == '\\')
			p += sprintf(p, "\\x%02x", c);
		else
			*p++ = (char) c;
	}
	if (cut < n)
		p = stpcpy(p, "...");
	*p = 0;
	return buf;
}

/* Sets *ret_error to "PREFIX: message" and returns r; -ENOMEM if the message cannot be built.
 * errno is set from r first, so that the format may use %m. *ret_error is written, never read:
 * each call fails at its first error, so only one message is ever made. */
static int error_with_prefix(char **ret_error, int r, const char *prefix, const char *fmt, va_list ap) {
	_cleanup_free_ char *msg = NULL;
	char *full;

	if (!ret_error)
		return r;
	errno = -r;
	if (vasprintf(&msg, fmt, ap) < 0) {
		msg = NULL;
		return -ENOMEM;
	}
	if (asprintf(&full, "%s: %s", prefix, msg) < 0)
		return -ENOMEM;
	*ret_error = full;
	return r;
}

/* "FILE: message", for errors about a whole file or directory. */
int conf_file_error(char **ret_error, int r, const char *filename, const char *fmt, ...) {
	_cleanup_free_ char *name = NULL;
	va_list ap;

	if (!ret_error)
		return r;
	name = conf_escape(filename, PATH_MAX);
	if (!name)
		return -ENOMEM;
	va_start(ap, fmt);
	r = error_with_prefix(ret_error, r, name, fmt, ap);
	va_end(ap);
	return r;
}

/* "FILE:LINE: Key=Value: message" while a key is applied, else "FILE:LINE: message". */
int conf_line_error_errno(ConfParseState *st, int r, const char *fmt, ...) {
	_cleanup_free_ char *name = NULL, *value = NULL, *prefix = NULL;
	va_list ap;

	if (!st->ret_error)
		return r;
	name = conf_escape(st->filename, PATH_MAX);
	if (!name)
		return -ENOMEM;
	if (st->key) {
		value = conf_escape(st->value, CONF_ERROR_VALUE_MAX);
		if (!value)
			return -ENOMEM;
		if (asprintf(&prefix, "%s:%u: %s=%s", name, st->line, st->key, value) < 0)
			prefix = NULL;
	} else if (asprintf(&prefix, "%s:%u", name, st->line) < 0)
		prefix = NULL;
	if (!prefix)
		return -ENOMEM;
	va_start(ap, fmt);
	r = error_with_prefix(st->ret_error, r, prefix, fmt, ap);
	va_end(ap);
	return r;
}


static bool is_space(char c) {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n';
}

/* Trims [*start, *end) of surrounding whitespace. */
static void trim(const char **start, const char **end) {
	while (*start < *end && is_space(**start))
		(*start)++;
	while (*end > *start && is_space((*end)[-1]))
		(*end)--;
}

int conf_parse_bool(const char *s, bool *ret) {
	static const char *const yes[] = { "yes", "true", "1", "on" };
	static const char *const no[] = { "no", "false", "0", "off" };

	for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* Decimal digits only, with an optional K/M/G (1024-based) suffix when with_suffix is set. */
int conf_parse_u64(const char *s, bool with_suffix, uint64_t *ret) {
	uint64_t v = 0, mult = 1;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned) (*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (with_suffix && *p) {
		switch (*p) {
		case 'K':
		case 'k':
			mult = KIB;
			break;
		case 'M':
		case 'm':
			mult = MIB;
			break;
		case 'G':
		case 'g':
			mult = GIB;
			break;
		default:
			return -EINVAL;
		}
		p++;
	}
	if (*p)
		return -EINVAL;
	if (v > UINT64_MAX / mult)
		return -ERANGE;
	*ret = v * mult;
	return 0;
}

/* "65536" or, for sizes that are a whole number of K/M/G, "64K" — as a user would write it. */
void conf_format_size(uint64_t v, bool with_suffix, char *buf, size_t size) {
	if (with_suffix && v > 0 && v % GIB == 0)
		snprintf(buf, size, "%" PRIu64 "G", v / GIB);
	else if (with_suffix && v > 0 && v % MIB == 0)
		snprintf(buf, size, "%" PRIu64 "M", v / MIB);
	else if (with_suffix && v > 0 && v % KIB == 0)
		snprintf(buf, size, "%" PRIu64 "K", v / KIB);
	else
		snprintf(buf, size, "%" PRIu64, v);
}

static bool is_list_separator(char c, bool comma) {
	return is_space(c) || (comma && c == ',');
}

/* Calls fn for each word of the value, splitting at whitespace (and commas if comma). */
int conf_for_each_word(ConfParseState *st, bool comma, ConfWordFn fn, void *userdata) {
	const char *p = st->value;

	for (;;) {
		_cleanup_free_ char *word = NULL;
		size_t n;
		int r;

		while (*p && is_list_separator(*p, comma))
			p++;
		if (!*p)
			return 0;
		for (n = 0; p[n] && !is_list_separator(p[n], comma); n++)
			;
		word = strndup(p, n);
		if (!word)
			return -ENOMEM;
		r = fn(st, word, userdata);
		if (r < 0)
			return r;
		p += n;
	}
}

/* "[A] [B] ..." of the schema's sections, for messages. */
static char *sections_list(const ConfSchema *schema) {
	size_t n = 1;
	char *buf, *p;

	for (size_t i = 0; i < schema->n_sections; i++)
		n += strlen(schema->sections[i]) + 3;
	buf = malloc(n);
	if (!buf)
		return NULL;
	p = buf;
	*p = 0;
	for (size_t i = 0; i < schema->n_sections; i++)
		p += sprintf(p, "%s[%s]", i ? " " : "", schema->sections[i]);
	return buf;
}

/* Parses one line, [p, end), that is neither blank nor a comment. */
static int parse_line(
	ConfParseState *st, const ConfSchema *schema, void *userdata, const char *p, const char *end) {
	_cleanup_free_ char *key = NULL, *value = NULL, *shown = NULL, *known = NULL;
	const char *eq, *kend, *vstart;
	int r;

	if (*p == '[') {
		const char *name = p + 1, *name_end = end;

		if (end[-1] != ']') {
			shown = strndup(p, (size_t) (end - p));
			if (!shown)
				return -ENOMEM;
			_cleanup_free_ char *esc = conf_escape(shown, CONF_ERROR_VALUE_MAX);
			if (!esc)
				return -ENOMEM;
			return conf_line_error(st, "invalid section header \"%s\": expected [Name]", esc);
		}
		name_end--;
		trim(&name, &name_end);
		for (size_t i = 0; i < schema->n_sections; i++)
			if ((size_t) (name_end - name) == strlen(schema->sections[i]) &&
			    memcmp(name, schema->sections[i], (size_t) (name_end - name)) == 0) {
				st->section = schema->sections[i];
				return 0;
			}
		shown = strndup(name, (size_t) (name_end - name));
		known = sections_list(schema);
		if (!shown || !known)
			return -ENOMEM;
		_cleanup_free_ char *esc = conf_escape(shown, CONF_ERROR_VALUE_MAX);
		if (!esc)
			return -ENOMEM;
		return conf_line_error(st, "unknown section [%s] (known: %s)", esc, known);
	}

	eq = memchr(p, '=', (size_t) (end - p));
	if (!eq) {
		shown = strndup(p, (size_t) (end - p));
		if (!shown)
			return -ENOMEM;
		_cleanup_free_ char *esc = conf_escape(shown, CONF_ERROR_VALUE_MAX);
		if (!esc)
			return -ENOMEM;
		return conf_line_error(st, "\"%s\": expected Key=Value, a [Section] header or a comment", esc);
	}

	kend = eq;
	trim(&p, &kend);
	vstart = eq + 1;
	trim(&vstart, &end);
	key = strndup(p, (size_t) (kend - p));
	value = strndup(vstart, (size_t) (end - vstart));
	if (!key || !value)
		return -ENOMEM;

	st->key = key;
	st->value = value;

	if (key[0] == 0)
		r = conf_line_error(st, "empty key name");
	else if (!st->section) {
		known = sections_list(schema);
		r = known ? conf_line_error(st, "key outside a section; put it below one of %s", known) :
			    -ENOMEM;
	} else
		r = schema->apply(st, userdata);

	st->key = st->value = NULL;
	return r;
}

int conf_parse_text(
	const ConfSchema *schema,
	void *userdata,
	const char *text,
	size_t size,
	const char *filename,
	char **ret_error) {
	ConfParseState st = {
		.filename = filename ?: "(text)",
		.ret_error = ret_error,
	};
	const char *p = text, *end = text + size;
	int r;

	if (!text && size > 0)
		return -EINVAL;

	/* A UTF-8 byte order mark, as some editors write, is not part of the first line. */
	if (size >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
		p += 3;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t) (end - p));
		const char *line_end = nl ?: end, *next = nl ? nl + 1 : end;

		st.line++;
		if (memchr(p, 0, (size_t) (line_end - p)))
			return conf_line_error(&st, "line contains a NUL byte");

		trim(&p, &line_end);
		if (p < line_end && *p != '#' && *p != ';') {
			r = parse_line(&st, schema, userdata, p, line_end);
			if (r < 0)
				return r;
		}
		p = next;
	}
	return 0;
}

int conf_read_file(const char *path, size_t max_bytes, char **ret, size_t *ret_size, char **ret_error) {
	_cleanup_close_ int fd = -EBADF;
	_cleanup_free_ char *buf = NULL;
	size_t size = 0;
	struct stat st;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		return conf_file_error(ret_error, negative_errno(), path, "cannot open: %m");
	}
	if (fstat(fd, &st) < 0)
		return conf_file_error(ret_error, negative_errno(), path, "cannot stat: %m");
	if (!S_ISREG(st.st_mode))
		return conf_file_error(ret_error, -EINVAL, path, "not a regular file");

	/* One byte more than allowed, to tell "exactly at the limit" from "too large" without
	 * trusting st_size. */
	buf = malloc(max_bytes + 1);
	if (!buf)
		return -ENOMEM;
	while (size <= max_bytes) {
		ssize_t n = read(fd, buf + size, max_bytes + 1 - size);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return conf_file_error(ret_error, negative_errno(), path, "cannot read: %m");
		}
		if (n == 0)
			break;
		size += (size_t) n;
	}
	if (size > max_bytes)
		return conf_file_error(ret_error, -EFBIG, path, "file is larger than %zu bytes", max_bytes);

	buf[size] = 0; /* the one byte more: size <= max_bytes */
	*ret = TAKE_PTR(buf);
	*ret_size = size;
	return 0;
}

static int load_file(
	const ConfSchema *schema, void *userdata, const char *path, size_t max_bytes, char **ret_error) {
	_cleanup_free_ char *text = NULL;
	size_t size = 0;
	int r;

	r = conf_read_file(path, max_bytes, &text, &size, ret_error);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	return conf_parse_text(schema, userdata, text, size, path, ret_error);
}

static int dropin_filter(const struct dirent *de) {
	size_t n = strlen(de->d_name);

	/* Hidden files are editor and package manager leftovers, not configuration. */
	return de->d_name[0] != '.' && n > 5 && streq(de->d_name + n - 5, ".conf");
}

static void free_dirents(struct dirent **list, int n) {
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

int conf_parse_files(
	const ConfSchema *schema,
	void *userdata,
	const char *main_path,
	const char *dropin_dir,
	size_t max_file_bytes,
	char **ret_error) {
	struct dirent **list = NULL;
	int n = 0, r = 0;

	if (main_path) {
		r = load_file(schema, userdata, main_path, max_file_bytes, ret_error);
		if (r < 0)
			return r;
	}
	if (!dropin_dir)
		return 0;
	n = scandir(dropin_dir, &list, dropin_filter, alphasort);
	if (n < 0) {
		if (errno != ENOENT)
			return conf_file_error(
				ret_error, negative_errno(), dropin_dir, "cannot read drop-in directory: %m");
		return 0;
	}
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *path = NULL;

		if (asprintf(&path, "%s/%s", dropin_dir, list[i]->d_name) < 0) {
			path = NULL;
			r = -ENOMEM;
			break;
		}
		r = load_file(schema, userdata, path, max_file_bytes, ret_error);
		if (r < 0)
			break;
	}
	free_dirents(list, n);
	return r;
}
