/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Kernel feature probing at start (docs/kernels.md): what the running kernel offers, which of it
 * the daemon cannot run without, and what it does without the rest. Main thread only. */
#pragma once

#include <stdbool.h>

typedef enum KernelFeature {
	FEATURE_PERF_EVENT_ARRAY,
	FEATURE_PRESERVE_ELEMS,
	FEATURE_BTF,
	FEATURE_TRACEPOINT,
	FEATURE_PERF_EVENT_OUTPUT,
	FEATURE_KTIME_BOOT_NS,
	FEATURE_TP_BTF,
	FEATURE_LINK_PIN,
	FEATURE_MMAPABLE,
	FEATURE_TASK_STORAGE,
	FEATURE_MEMBARRIER,
	FEATURE_BPF_EVENT,
	FEATURE_FETCH_ATOMICS,
	FEATURE_ANCESTOR_CGROUP,
	_FEATURE_MAX,
} KernelFeature;

typedef struct KernelFeatures KernelFeatures;

/* Probes every feature once, leaving nothing behind (no pin: a SIGKILL at any moment must leave
 * the pin root as it was). KernelFeatures named in $PERFRELAY_TEST_DISABLE_FEATURES (comma
 * separated, test-only) are reported missing without probing. Fails only on allocation failure. */
int kernel_features_probe(KernelFeatures **ret);
KernelFeatures *kernel_features_free(KernelFeatures *f);

bool kernel_features_has(const KernelFeatures *f, KernelFeature x);
/* Whether the daemon loads its BPF objects' compat build (bpf/meson.build), made for kernels
 * without fetching atomics or bpf_get_current_ancestor_cgroup_id() in tracing programs: the
 * verifier refuses a program with either wherever it stands, even in dead code. */
bool kernel_features_need_compat(const KernelFeatures *f);
/* Whether the feature was forced off by $PERFRELAY_TEST_DISABLE_FEATURES. */
bool kernel_features_forced_off(const KernelFeatures *f, KernelFeature x);
/* The first required feature the kernel lacks, or _FEATURE_MAX when the daemon can run. */
KernelFeature kernel_features_first_missing_required(const KernelFeatures *f);

const char *kernel_feature_to_string(KernelFeature x);
bool kernel_feature_required(KernelFeature x);
/* The first mainline kernel version with the feature, e.g. "5.10". */
const char *kernel_feature_since(KernelFeature x);
/* What the daemon does without the feature (for required ones: why it cannot start). */
const char *kernel_feature_without(KernelFeature x);
