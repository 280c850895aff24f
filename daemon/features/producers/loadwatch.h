/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The watch of BPF program loads (docs/producers.md, "Producers that load late"): a ring of
 * PERF_RECORD_BPF_EVENT records per CPU, read by a thread of its own at the readers' priority,
 * which opens each loaded program by id at once (a producer may unload within milliseconds,
 * and its BTF with it) and keeps those that write into the events map open until the main
 * thread's next scan takes them (load_watch_take()). Main thread for everything but the
 * thread itself. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode/decoders.h"
#include "macro.h"

typedef struct LoadWatch LoadWatch;

/* Opens a ring on each of the n_cpus CPUs that are online (-ENODEV for none), hands them to
 * `decoders` and starts the thread at `nice` (as ReaderNice=; kept when it cannot be set). */
int load_watch_new(unsigned n_cpus, uint32_t events_map_id, Decoders *decoders, int nice, LoadWatch **ret);
/* Stops the thread, closes the programs it holds and the rings; the readers must have stopped. */
LoadWatch *load_watch_free(LoadWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(LoadWatch *, load_watch_free);

/* A CPU came online: its ring, if it has none yet. */
void load_watch_cpu_online(LoadWatch *w, unsigned cpu);
/* Rings open. */
unsigned load_watch_n_rings(const LoadWatch *w);
/* Hands over the programs held since the last call (open fds, now the caller's): up to max
 * into fds; returns how many. */
size_t load_watch_take(LoadWatch *w, int *fds, size_t max);
/* Producer programs seen loading, and programs gone before they could be opened. */
void load_watch_stats(const LoadWatch *w, uint64_t *ret_loads, uint64_t *ret_missed);
