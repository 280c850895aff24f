/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Podman's and Docker's state files (container-state.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "json-util.h"
#include "macro.h"
#include "features/containers/container-state.h"

/* A copy of s cut to at most max bytes, not in the middle of a UTF-8 sequence; NULL for an
 * empty or missing s (and on ENOMEM, which the caller tells apart by s). */
static char *bounded(const char *s, size_t max) {
	size_t n;

	if (!s || !*s)
		return NULL;
	n = strnlen(s, max + 1);
	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char) s[n] & 0xc0) == 0x80)
			n--;
	}
	return strndup(s, n);
}

ContainerNames *container_names_new(const char *name, const char *image, const char *image_id) {
	ContainerNames *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->name = bounded(name, CONTAINER_NAME_MAX);
	n->image = bounded(image, CONTAINER_IMAGE_MAX);
	n->image_id = bounded(image_id, CONTAINER_ID_MAX - 1);
	if ((name && *name && !n->name) || (image && *image && !n->image) ||
	    (image_id && *image_id && !n->image_id))
		return container_names_free(n);
	return n;
}

static json_object *parse(const char *text, size_t len) {
	json_tokener *tok;
	json_object *o;

	if (len > CONTAINER_STATE_MAX || len > INT32_MAX)
		return NULL;
	tok = json_tokener_new_ex(64);
	if (!tok)
		return NULL;
	o = json_tokener_parse_ex(tok, text, (int) len);
	if (o && json_tokener_get_error(tok) != json_tokener_success) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

/* The string member key of o, or NULL if it is missing or no string. */
static const char *get_string(json_object *o, const char *key) {
	json_object *v;

	if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

int container_state_podman(const char *text, size_t len, const char *id, ContainerNames **ret) {
	_cleanup_(json_object_putp) json_object *list = parse(text, len);
	size_t n;

	*ret = NULL;
	if (!list || !json_object_is_type(list, json_type_array))
		return -EBADMSG;
	n = json_object_array_length(list);
	for (size_t i = 0; i < n; i++) {
		json_object *c = json_object_array_get_idx(list, i), *names;
		_cleanup_(json_object_putp) json_object *meta = NULL;
		const char *cid = get_string(c, "id"), *name = NULL, *m;

		if (!cid || !streq(cid, id))
			continue;
		/* "names": the first is the container's; "metadata": a JSON string of its own
		 * with "image-name" and "image-id" (and "name" again). */
		if (json_object_object_get_ex(c, "names", &names) &&
		    json_object_is_type(names, json_type_array) && json_object_array_length(names) > 0 &&
		    json_object_is_type(json_object_array_get_idx(names, 0), json_type_string))
			name = json_object_get_string(json_object_array_get_idx(names, 0));
		m = get_string(c, "metadata");
		if (m)
			meta = parse(m, strlen(m));
		if (!name)
			name = get_string(meta, "name");
		*ret = container_names_new(
			name,
			get_string(meta, "image-name"),
			get_string(meta, "image-id") ?: get_string(c, "image"));
		return *ret ? 1 : -ENOMEM;
	}
	return 0;
}

int container_state_docker(const char *text, size_t len, const char *id, ContainerNames **ret) {
	_cleanup_(json_object_putp) json_object *o = parse(text, len);
	json_object *config = NULL;
	const char *cid, *name, *image_id;

	*ret = NULL;
	if (!o || !json_object_is_type(o, json_type_object))
		return -EBADMSG;
	cid = get_string(o, "ID");
	if (!cid)
		return -EBADMSG;
	if (!streq(cid, id))
		return 0;
	/* "Name": "/web"; "Config": {"Image": "nginx:1.27"}; "Image": "sha256:<hex>". */
	name = get_string(o, "Name");
	if (name && *name == '/')
		name++;
	(void) json_object_object_get_ex(o, "Config", &config);
	image_id = get_string(o, "Image");
	if (image_id && strncmp(image_id, "sha256:", 7) == 0)
		image_id += 7;
	*ret = container_names_new(name, get_string(config, "Image"), image_id);
	return *ret ? 1 : -ENOMEM;
}
