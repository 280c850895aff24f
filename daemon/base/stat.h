/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Statistics with one writer thread and any number of reader threads. Every counter is written by
 * exactly one thread with relaxed atomic stores and read by others with relaxed atomic loads:
 * values are exact and never torn; no ordering with other memory is implied (a reader that
 * needs one takes it from the data's own release/acquire pair). */
#pragma once

#define STAT_LOAD(x)     __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STAT_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
/* Single writer: a relaxed load + store is an exact increment and avoids a locked add. */
#define STAT_ADD(x, v)   STAT_STORE(x, STAT_LOAD(x) + (v))
