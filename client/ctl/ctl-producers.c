/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl producers: the producers the daemon knows (D-Bus ListProducers()): their
 * programs, the record types their BTF declares with the fields perfrelayd decodes, and their
 * counters; as a table, or as JSON. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "common/bus-json.h"
#include "ctl/ctl.h"
#include "ctl/format.h"
#include "json-util.h"

static const char *jstr_or(json_object *o, const char *key, const char *dflt) {
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ?
		json_object_get_string(v) :
		dflt;
}

static uint64_t jnum(json_object *o, const char *key) {
	uint64_t v = 0;

	return juint(o, key, &v) ? v : 0;
}

static void print_types(json_object *types) {
	for (size_t i = 0; i < json_object_array_length(types); i++) {
		json_object *t = json_object_array_get_idx(types, i), *fields;

		printf("    type 0x%04" PRIx64 " %s: decoder %s, %" PRIu64 " bytes\n",
		       jnum(t, "type"),
		       jstr_or(t, "name", "?"),
		       jstr_or(t, "decoder", "?"),
		       jnum(t, "size"));
		if (!json_object_object_get_ex(t, "fields", &fields) ||
		    !json_object_is_type(fields, json_type_array))
			continue;
		for (size_t k = 0; k < json_object_array_length(fields); k++) {
			json_object *f = json_object_array_get_idx(fields, k);

			if (!json_object_is_type(f, json_type_array) || json_object_array_length(f) != 5)
				continue;
			printf("      %*s%-20s %-8s offset %3d, %d bytes\n",
			       2 * json_object_get_int(json_object_array_get_idx(f, 2)),
			       "",
			       json_object_get_string(json_object_array_get_idx(f, 0))[0] ?
				       json_object_get_string(json_object_array_get_idx(f, 0)) :
				       "[]",
			       json_object_get_string(json_object_array_get_idx(f, 1)),
			       json_object_get_int(json_object_array_get_idx(f, 3)),
			       json_object_get_int(json_object_array_get_idx(f, 4)));
		}
	}
}

static void print_producers(json_object *list) {
	printf("%-6s %-20s %12s %12s %10s %10s %10s  %s\n",
	       "ID",
	       "NAME",
	       "ATTEMPTS",
	       "RECEIVED",
	       "FAILED",
	       "MALFORMED",
	       "SEQ-GAPS",
	       "PROGRAMS");
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *p = json_object_array_get_idx(list, i), *progs, *types;

		printf("%-6" PRIu64 " %-20s %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %10" PRIu64
		       " %10" PRIu64 " ",
		       jnum(p, "id"),
		       jstr_or(p, "name", "")[0] ? jstr_or(p, "name", "") : "-",
		       jnum(p, "attempts"),
		       jnum(p, "received"),
		       jnum(p, "failures"),
		       jnum(p, "malformed"),
		       jnum(p, "seq_gaps"));
		if (json_object_object_get_ex(p, "programs", &progs) &&
		    json_object_is_type(progs, json_type_array))
			for (size_t k = 0; k < json_object_array_length(progs); k++) {
				json_object *g = json_object_array_get_idx(progs, k);

				printf(" %s(%d)",
				       json_object_get_string(json_object_array_get_idx(g, 1)),
				       json_object_get_int(json_object_array_get_idx(g, 0)));
			}
		printf("\n");
		if (json_object_object_get_ex(p, "types", &types) &&
		    json_object_is_type(types, json_type_array))
			print_types(types);
	}
}

static void producers_help(void) {
	printf("%s producers [OPTIONS...]\n\n"
	       "List the producers perfrelayd knows (D-Bus ListProducers()): every producer id with\n"
	       "activity or declared by a loaded program (PERFRELAY_PRODUCER), its programs, the\n"
	       "record types their BTF declares with the fields perfrelayd decodes, and its counters.\n"
	       "See docs/producers.md.\n\n"
	       "  -j --json    One JSON array, the ListProducers() answer as is\n"
	       "     --types   Only the names of the record types, one per line (for scripts\n"
	       "               and shell completion: what 'monitor --type' takes)\n"
	       "  -h --help    Show this help\n",
	       program);
}

static void print_type_names(json_object *list) {
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *types;

		if (!json_object_object_get_ex(json_object_array_get_idx(list, i), "types", &types) ||
		    !json_object_is_type(types, json_type_array))
			continue;
		for (size_t k = 0; k < json_object_array_length(types); k++) {
			const char *name = jstr_or(json_object_array_get_idx(types, k), "name", "");

			if (name[0])
				puts(name);
		}
	}
}

int verb_producers(int argc, char *argv[]) {
	enum { ARG_TYPES = 0x100 };
	static const struct option options[] = { { "help", no_argument, NULL, 'h' },
						 { "json", no_argument, NULL, 'j' },
						 { "types", no_argument, NULL, ARG_TYPES },
						 {} };
	_cleanup_(json_object_putp) json_object *o = NULL;
	bool json = false, types = false;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "hj", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			producers_help();
			return 0;
		case 'j':
			json = true;
			break;
		case ARG_TYPES:
			types = true;
			break;
		default:
			return -EINVAL;
		}
	if (optind < argc)
		return error_msg("producers: unexpected argument '%s'", argv[optind]);
	if (json && types)
		return error_msg("producers: --json and --types exclude each other");
	r = bus_call_json("ListProducers", &o);
	if (r < 0)
		return r;
	if (json)
		puts(json_object_to_json_string_ext(
			o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	else if (!json_object_is_type(o, json_type_array))
		return error_msg("ListProducers() did not answer an array");
	else if (types)
		print_type_names(o);
	else
		print_producers(o);
	return 0;
}
