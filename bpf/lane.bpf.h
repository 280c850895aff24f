/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The protected lane of the built-in probes (docs/pipeline.md, "The protected lane"), before
 * everything that emits exec, fork or exit records: the probes and the counters' deferred exit
 * (counters.bpf.h). */
#pragma once

#include "producer.bpf.h"

/* The protected lane (docs/pipeline.md): the exec, fork and exit probes' records go into a
 * perf event array of their own, with a small ring per CPU that the readers drain before the
 * main ones, so a flood of other records that fills the main rings costs none of them (the
 * process table, units and every lineage depend on them). Sized and filled like "events". */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(map_flags, PERFRELAY_BPF_F_PRESERVE_ELEMS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} critical SEC(".maps");

static __always_inline void emit_critical(void *ctx, void *rec, __u32 size, __u16 type, __u32 producer) {
	perfrelay__emit_to(ctx, &critical, rec, size, type, producer, 0);
}
