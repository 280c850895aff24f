/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The shared fan-out path (docs/shared-ring.md): one ring set per distinct subscription, in a
 * sealed memfd that its clients map read-only, written once per event by the hub; each client
 * (a member) reads it at its own position, published in a page of its own. A member that falls
 * a ring behind is moved forward by the writer and its loss counted, exactly; nothing a member
 * does can make the writer wait or touch another member.
 *
 * Threads: shared_ring_reserve() and shared_ring_publish() run on the writer of the slot (a
 * reader thread, or the main thread for its own slots), with the hub slot's lock held. Member
 * attach/detach run on the main thread with every slot lock held (hub_lock_all()). The rest is
 * the main thread's. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"
#include "shared-ring.h"

typedef struct SharedRing SharedRing;
typedef struct SharedMember SharedMember;

/* Per slot, the smallest ring: four of the largest frames (a JSON line of ENCODE_JSON_MAX, or a
 * schema frame with its record) always fit. */
#define SHARED_RING_MIN         (512u * 1024u)
/* The writer reclaims at least this share of a ring at once, so that members are checked once
 * per sixteenth of a ring rather than once per frame. */
#define SHARED_RING_EVICT_SHIFT 4
/* A member whose position changes under the writer's compare-and-swap this many times in a row
 * is not reading (a reader swaps once per copy of many frames): it is dropped as hostile. */
#define SHARED_RING_CAS_TRIES   16

/* n_slots rings: the first n_slots - n_small share `bytes` (a power of two each, at least
 * SHARED_RING_MIN), the last n_small get SHARED_RING_MIN. */
int shared_ring_new(unsigned n_slots, unsigned n_small, uint64_t bytes, SharedRing **ret);
SharedRing *shared_ring_free(SharedRing *r); /* no members left */
DEFINE_TRIVIAL_CLEANUP_FUNC(SharedRing *, shared_ring_free);
/* Frees the ring set's memory now, even if a former member still maps it (it then reads zeros,
 * in pages of its own): without this, a client that keeps its mapping after it left would keep
 * the pages the daemon wrote, charged to the daemon, for as long as it likes. */
int shared_ring_release(SharedRing *r);

unsigned shared_ring_n_slots(const SharedRing *r);
uint8_t *shared_ring_data(const SharedRing *r, unsigned slot);
uint64_t shared_ring_size(const SharedRing *r, unsigned slot);
uint64_t shared_ring_bytes(const SharedRing *r); /* the memfd's size */
/* A new read-only descriptor of the ring set, for a client: it cannot be mapped writable, nor
 * reopened read-write but by root. */
int shared_ring_open_readonly(const SharedRing *r);

/* Writer side ------------------------------------------------------------------------------ */

/* Room for one event of `len` bytes at *head (a frame boundary; `seq` events before it):
 * reclaims old frames as needed (moving members behind them forward and counting their loss),
 * writes a padding frame if the event would not fit before the ring's end, and the frame's
 * header. On return *head is where the event's bytes go; after them the caller rounds *head up
 * to PERFRELAY_SHARED_ALIGN. False if len can never fit (the ring is too small: not with
 * SHARED_RING_MIN). */
bool shared_ring_reserve(SharedRing *r, unsigned slot, uint64_t *head, uint64_t seq, uint64_t len);
/* Publishes the frames up to head (seq events) to the members, notes how far each has read,
 * and wakes the ones that sleep. True if a member was found hostile (the main thread should
 * run shared_ring_reap()). */
bool shared_ring_publish(SharedRing *r, unsigned slot, uint64_t head, uint64_t seq);
/* True once after the writer moved into a new half of the ring, or a member joined: binary
 * rings then describe third-party types again (schema frames), so that every member finds the
 * schema of a type within the frames it can still read. */
bool shared_ring_take_schema_reset(SharedRing *r, unsigned slot);

/* Members (main thread) ------------------------------------------------------------------- */

/* A member of r that wakes through socket `sock` (not owned). Its page is a sealed memfd. */
int shared_member_new(SharedRing *r, int sock, SharedMember **ret);
/* Detached members only. Counts what the member had not read as dropped. */
SharedMember *shared_member_free(SharedMember *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(SharedMember *, shared_member_free);
int shared_member_fd(const SharedMember *m); /* the page's memfd, for the client */
/* With every slot lock held: the member starts at every ring's head. */
int shared_ring_attach_locked(SharedRing *r, SharedMember *m);
/* With every slot lock held: the member's figures are final; the writer forgets it. `final`:
 * the ring set is never written again (shutdown, or it is retired), so what the member has not
 * read stays in its mapping and counts as sent; else it counts as dropped. */
void shared_ring_detach_locked(SharedRing *r, SharedMember *m, bool final);
size_t shared_ring_n_members(const SharedRing *r);
/* True if the writer found the member hostile (see SHARED_RING_CAS_TRIES). */
bool shared_member_hostile(const SharedMember *m);
/* True if any member of r is (one load per member). */
bool shared_ring_has_hostile(const SharedRing *r);

/* offered = sent + dropped + pending; after detach pending is 0 (see shared_ring_detach_locked()). */
typedef struct SharedMemberStats {
	uint64_t offered; /* events written to the rings since the member joined */
	uint64_t sent;    /* events the member passed before they were reclaimed */
	uint64_t dropped; /* reclaimed before it passed them, or unread when it left */
} SharedMemberStats;
void shared_member_get_stats(const SharedMember *m, SharedMemberStats *ret);
