/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Finds the programs that publish through perfrelayd's "events" map and builds decoders from
 * their BTF (see producer-scan.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>

#include "decode/decode.h"
#include "json-util.h"
#include "macro.h"
#include "decode/producer-scan.h"

/* Maps one program may use that we look at; programs with more are not producers we can see. */
#define PROG_MAX_MAPS 64u

ProducerScan *producers_scan_free(ProducerScan *s) {
	if (!s)
		return NULL;
	for (size_t i = 0; i < s->n_types; i++) {
		btfrec_free(s->types[i].rec);
		free(s->types[i].schema);
	}
	free(s);
	return NULL;
}

bool producers_scan_same(const ProducerScan *a, const ProducerScan *b) {
	if (!a || !b || a->n_progs != b->n_progs)
		return false;
	for (size_t i = 0; i < a->n_progs; i++)
		if (a->progs[i].prog_id != b->progs[i].prog_id)
			return false;
	return true;
}

const ProducerType *producers_scan_find(const ProducerScan *s, uint16_t type) {
	for (size_t i = 0; i < s->n_types; i++)
		if (s->types[i].type == type)
			return &s->types[i];
	return NULL;
}

/* Whether program fd uses map_id; fills *ret with its id, name and BTF id. */
static int prog_uses_map(int fd, uint32_t map_id, ProducerProg *ret) {
	uint32_t ids[PROG_MAX_MAPS];
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);

	info.nr_map_ids = PROG_MAX_MAPS;
	info.map_ids = (uint64_t) (uintptr_t) ids;
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return -errno;
	*ret = (ProducerProg){ .prog_id = info.id, .btf_id = info.btf_id };
	memcpy(ret->name, info.name, sizeof(ret->name) - 1);
	for (uint32_t i = 0; i < MIN(info.nr_map_ids, PROG_MAX_MAPS); i++)
		if (ids[i] == map_id)
			return 1;
	return 0;
}

int producers_prog_uses_map(int fd, uint32_t map_id) {
	ProducerProg p;

	return prog_uses_map(fd, map_id, &p);
}

static void add_types(ProducerScan *s, ProducerProg *p) {
	BtfRecDecl decls[BTFREC_MAX_DECLS];
	struct btf *btf;
	unsigned bad = 0;
	size_t n;

	btf = btf__load_from_kernel_by_id(p->btf_id);
	if (!btf)
		return;
	if (!btfrec_btf_aligned(btf)) {
		s->bad_decls++;
		btf__free(btf);
		return;
	}
	if (btfrec_find_producer(btf, &p->producer, p->producer_name) < 0)
		s->bad_decls++;
	n = btfrec_find_decls(btf, decls, BTFREC_MAX_DECLS, &bad);
	s->bad_decls += bad;
	for (size_t i = 0; i < n; i++) {
		ProducerType *t;

		/* Several programs of one object share its BTF: the first declaration wins. */
		if (producers_scan_find(s, decls[i].type))
			continue;
		if (s->n_types >= PRODUCERS_MAX_TYPES) {
			s->bad_decls++;
			continue;
		}
		t = &s->types[s->n_types++];
		*t = (ProducerType){ .prog_id = p->prog_id, .type = decls[i].type };
		memcpy(t->name, decls[i].name, sizeof(t->name));
		/* Its events would read as the daemon's own lines or another type's. */
		if (event_type_name_is_reserved(t->name)) {
			t->refused = BTFREC_RESERVED_NAME;
			s->refused++;
			continue;
		}
		if (btfrec_build(btf, decls[i].type_id, decls[i].type, decls[i].name, &t->rec, &t->refused) <
		    0) {
			t->rec = NULL;
			if (t->refused == BTFREC_OK)
				t->refused = BTFREC_BAD_TYPE; /* out of memory: no decoder either */
			s->refused++;
		}
	}
	btf__free(btf);
}

/* The decoder of t as the schema frame's JSON (docs/protocol.md, "Schema frames"):
 * {"record_type":N,"name":..,"producer_name":..,"size":N,"fields":[{"name":..,"kind":..,
 * "depth":N,"offset":N,"size":N[,"signed":true][,"enum":{"NAME":value,...}]},...]}. */
static int schema_build(ProducerType *t) {
	_cleanup_(json_object_putp) json_object *o = json_object_new_object(),
						*fields = json_object_new_array();
	const char *text;
	size_t len;
	int r = 0;

	if (!o || !fields)
		return -ENOMEM;
	for (unsigned i = 0; r >= 0 && i < btfrec_n_steps(t->rec); i++) {
		json_object *f = json_object_new_object(), *e = NULL;
		BtfRecValue v;

		btfrec_describe(t->rec, i, &v);
		if (!f || json_object_array_add(fields, f) < 0) {
			json_object_put(f);
			return -ENOMEM;
		}
		if (v.name)
			r = json_object_object_add(f, "name", json_object_new_string(v.name));
		if (r >= 0)
			r = json_object_object_add(
				f, "kind", json_object_new_string(btfrec_kind_to_string(v.kind)));
		if (r >= 0)
			r = json_object_object_add(f, "depth", json_object_new_int64(v.depth));
		if (r >= 0)
			r = json_object_object_add(f, "offset", json_object_new_int64(v.offset));
		if (r >= 0)
			r = json_object_object_add(f, "size", json_object_new_int64(v.size));
		if (r >= 0 && v.is_signed)
			r = json_object_object_add(f, "signed", json_object_new_boolean(true));
		if (r >= 0 && btfrec_n_enums(t->rec, i) > 0) {
			e = json_object_new_object();
			r = json_object_object_add(f, "enum", e);
		}
		for (unsigned k = 0; r >= 0 && e && k < btfrec_n_enums(t->rec, i); k++) {
			const char *name;
			uint64_t value;

			btfrec_enum(t->rec, i, k, &value, &name);
			r = json_object_object_add(
				e,
				name,
				v.is_signed ? json_object_new_int64((int64_t) value) :
					      json_object_new_uint64(value));
		}
	}
	if (r >= 0)
		r = json_object_object_add(o, "record_type", json_object_new_int64(t->type));
	if (r >= 0)
		r = json_object_object_add(o, "name", json_object_new_string(t->name));
	if (r >= 0 && t->producer_name)
		r = json_object_object_add(o, "producer_name", json_object_new_string(t->producer_name));
	if (r >= 0)
		r = json_object_object_add(o, "size", json_object_new_int64(btfrec_size(t->rec)));
	if (r >= 0)
		r = json_object_object_add(o, "fields", TAKE_PTR(fields));
	if (r < 0)
		return -ENOMEM;
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	if (len > PRODUCERS_SCHEMA_MAX)
		return 0; /* binary clients get this type's records without a schema */
	t->schema = strdup(text);
	if (!t->schema)
		return -ENOMEM;
	t->schema_len = (uint32_t) len;
	return 1;
}

static bool declares_types(const ProducerScan *s, uint32_t prog_id) {
	for (size_t i = 0; i < s->n_types; i++)
		if (s->types[i].prog_id == prog_id)
			return true;
	return false;
}

int producers_scan(uint32_t events_map_id, ProducerScan **ret) {
	_cleanup_(producers_scan_freep) ProducerScan *s = calloc(1, sizeof(ProducerScan));
	uint32_t id = 0;

	if (!s)
		return -ENOMEM;
	while (bpf_prog_get_next_id(id, &id) == 0) {
		_cleanup_close_ int fd = bpf_prog_get_fd_by_id(id);
		ProducerProg p;

		if (fd < 0)
			continue; /* unloaded since: not an error */
		if (prog_uses_map(fd, events_map_id, &p) <= 0)
			continue;
		if (s->n_progs >= PRODUCERS_MAX_PROGS)
			break;
		s->progs[s->n_progs] = p;
		if (p.btf_id != 0)
			add_types(s, &s->progs[s->n_progs]);
		/* Only programs that declare something: perfrelayd's own probes (and producers
		 * without declarations) are known by their producer ids alone. */
		if (s->progs[s->n_progs].producer != 0 || declares_types(s, p.prog_id))
			s->n_progs++;
	}
	for (size_t i = 0; i < s->n_types; i++) {
		ProducerType *t = &s->types[i];

		for (size_t k = 0; k < s->n_progs; k++)
			if (s->progs[k].prog_id == t->prog_id)
				t->producer_name = s->progs[k].producer_name[0] ? s->progs[k].producer_name :
										  s->progs[k].name;
		if (t->rec) {
			int r = schema_build(t);

			if (r == -ENOMEM)
				return r;
			if (r == 0)
				s->schemas_too_large++;
		}
	}
	*ret = TAKE_PTR(s);
	return 0;
}
