/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Checks BPF objects built for another architecture against that architecture's kernel BTF:
 * core-check BTF OBJECT...
 * Each object is opened with BTF as its CO-RE target (libbpf's btf_custom_path), and loaded, which
 * makes libbpf resolve every CO-RE relocation of every program against the other kernel's types
 * before any program reaches this kernel. A relocation that finds no target (a type or field the
 * other kernel lacks) leaves a poisoned instruction (libbpf's call to 0xbad2310) in the program:
 * the check fails on any, since perfrelay's programs have no bpf_core_*_exists() guard around
 * one. Whether this kernel's verifier then accepts a program is printed, not judged: a program
 * that loads through BTF-typed pointers (tp_btf) is verified against this kernel's layout of
 * those types, which the other architecture's offsets do not match. Nothing is attached, nothing
 * pinned. Exits 0 when every relocation resolved, 1 when one did not, 77 without root. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <linux/bpf.h>

#include <bpf/btf.h>
#include <bpf/libbpf.h>

/* libbpf's poisoned instruction: a call to a helper that does not exist. */
#define POISON_IMM 0xbad2310

static unsigned relocated; /* relocations libbpf applied, over all objects (its debug lines) */

static int print(enum libbpf_print_level level, const char *fmt, va_list ap) {
	char line[1024];

	vsnprintf(line, sizeof(line), fmt, ap);
	if (level == LIBBPF_DEBUG) {
		/* its line for each instruction a relocation patched */
		if (strstr(line, ": relo #") && strstr(line, "patched insn"))
			relocated++;
		/* and for one it could not: kept, to say which */
		if (strstr(line, "substituting insn") || strstr(line, "poison") ||
		    strstr(line, "no matching targets"))
			fputs(line, stderr);
		return 0;
	}
	/* The verifier's refusals of this kernel are expected for tp_btf programs: their log is
	 * long and not the point; libbpf's other warnings are. */
	if (!strchr(" 0123456789;", line[0]) && !strstr(line, "PROG LOAD LOG"))
		fprintf(stderr, "  %s", line);
	return 0;
}

static int check(const char *btf_path, const char *obj_path) {
	LIBBPF_OPTS(bpf_object_open_opts, opts, .btf_custom_path = btf_path);
	unsigned before = relocated, n = 0, poisoned = 0;
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_map *map;
	int r;

	obj = bpf_object__open_file(obj_path, &opts);
	if (!obj) {
		fprintf(stderr, "%s: cannot open: %s\n", obj_path, strerror(errno));
		return -1;
	}
	/* The objects pin some maps by name: here they must not (nor reuse a pin of that name). */
	bpf_object__for_each_map(map, obj) if (bpf_map__set_pin_path(map, NULL) < 0) {
		fprintf(stderr, "%s: cannot unpin map %s\n", obj_path, bpf_map__name(map));
		bpf_object__close(obj);
		return -1;
	}
	r = bpf_object__load(obj);
	bpf_object__for_each_program(prog, obj) {
		const struct bpf_insn *insn = bpf_program__insns(prog);
		size_t cnt = bpf_program__insn_cnt(prog);

		n++;
		for (size_t i = 0; i < cnt; i++)
			if (insn[i].code == (BPF_JMP | BPF_CALL) && insn[i].imm == POISON_IMM) {
				fprintf(stderr,
					"%s: program %s: instruction %zu poisoned: a CO-RE relocation found no target in %s\n",
					obj_path,
					bpf_program__name(prog),
					i,
					btf_path);
				poisoned++;
			}
	}
	bpf_object__close(obj);
	printf("%s: %u programs, %u instructions relocated against %s, %u poisoned; this kernel's verifier: %s\n",
	       obj_path,
	       n,
	       relocated - before,
	       btf_path,
	       poisoned,
	       r < 0 ? strerror(-r) : "accepted");
	if (relocated == before && poisoned == 0 && r < 0) {
		/* Nothing was relocated because the load stopped before relocating: no answer. */
		fprintf(stderr, "%s: the load stopped before CO-RE relocation\n", obj_path);
		return -1;
	}
	return poisoned ? -1 : 0;
}

int main(int argc, char **argv) {
	struct btf *btf;
	int rc = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: %s BTF OBJECT...\n", argv[0]);
		return 2;
	}
	btf = btf__parse_raw(argv[1]);
	if (!btf) {
		fprintf(stderr, "%s: not raw BTF: %s\n", argv[1], strerror(errno));
		return 1;
	}
	printf("%s: %u types\n", argv[1], btf__type_cnt(btf) - 1);
	btf__free(btf);
	if (geteuid() != 0) {
		printf("SKIP: loading BPF programs needs root\n");
		return 77;
	}
	libbpf_set_print(print);
	for (int i = 2; i < argc; i++)
		if (check(argv[1], argv[i]) < 0)
			rc = 1;
	return rc;
}
