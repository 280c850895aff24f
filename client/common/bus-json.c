/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* D-Bus values (basic types, variants, arrays, structs, a{s...} dictionaries) to json-c objects. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "common/bus-json.h"

/* Converts the next value of m (basic types, variants, arrays, a{s...} dictionaries) into JSON:
 * GetStats() is an a{sv} tree, and this keeps perfrelayctl in step with whatever the daemon
 * adds to it. */
int bus_value_to_json(sd_bus_message *m, json_object **ret) {
	const char *contents = NULL;
	char type;
	int r;

	r = sd_bus_message_peek_type(m, &type, &contents);
	if (r <= 0)
		return r < 0 ? r : -EBADMSG;
	switch (type) {
	case 't': {
		uint64_t v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_uint64(v);
		return r;
	}
	case 'u': {
		uint32_t v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_int64(v);
		return r;
	}
	case 'q': {
		uint16_t v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_int64(v);
		return r;
	}
	case 'y': {
		uint8_t v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_int64(v);
		return r;
	}
	case 'i': {
		int32_t v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_int64(v);
		return r;
	}
	case 'x': {
		int64_t v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_int64(v);
		return r;
	}
	case 'b': {
		int v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_boolean(v);
		return r;
	}
	case 'd': {
		double v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = json_object_new_double(v);
		return r;
	}
	case 's':
	case 'o': {
		const char *v;

		r = sd_bus_message_read_basic(m, type, &v);
		*ret = r >= 0 ? json_object_new_string(v) : NULL;
		return r;
	}
	case 'v':
		r = sd_bus_message_enter_container(m, 'v', contents);
		if (r >= 0)
			r = bus_value_to_json(m, ret);
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		return r;
	case 'a': {
		bool dict = contents[0] == '{';
		json_object *o = dict ? json_object_new_object() : json_object_new_array();
		char entry[64] = ""; /* a dictionary entry's signature without the braces: "sv", "st" */

		if (dict) {
			size_t n = strlen(contents);

			if (n < 4 || n - 2 >= sizeof(entry)) {
				json_object_put(o);
				return -EBADMSG;
			}
			memcpy(entry, contents + 1, n - 2);
		}

		r = sd_bus_message_enter_container(m, 'a', contents);
		while (r >= 0) {
			json_object *v = NULL;
			const char *key;

			if (dict) {
				r = sd_bus_message_enter_container(m, 'e', entry);
				if (r == 0)
					break;
				if (r >= 0)
					r = sd_bus_message_read_basic(m, 's', &key);
				if (r >= 0)
					r = bus_value_to_json(m, &v);
				if (r >= 0) {
					json_object_object_add(o, key, v);
					r = sd_bus_message_exit_container(m);
				}
			} else {
				r = sd_bus_message_at_end(m, false);
				if (r > 0)
					break;
				if (r >= 0)
					r = bus_value_to_json(m, &v);
				if (r >= 0)
					json_object_array_add(o, v);
			}
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		if (r < 0) {
			json_object_put(o);
			return r;
		}
		*ret = o;
		return 1;
	}
	case 'r': {
		/* A struct: a JSON array of its members. */
		json_object *a = json_object_new_array();

		r = sd_bus_message_enter_container(m, 'r', contents);
		while (r >= 0 && (r = sd_bus_message_at_end(m, false)) == 0) {
			json_object *v = NULL;

			r = bus_value_to_json(m, &v);
			if (r >= 0)
				json_object_array_add(a, v);
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		if (r < 0) {
			json_object_put(a);
			return r;
		}
		*ret = a;
		return 1;
	}
	default:
		return -EBADMSG;
	}
}
