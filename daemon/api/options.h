/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the event socket and the bus take of the configuration ([Socket], [Bus], AllowGroups=,
 * ControlGroups=; docs/config.md): the manager makes it from its Config (manager_api_options())
 * and hands it to server_new() and bus_new(), and a new one on reload, so that api/ reads its
 * limits from here and never from the Config. The group lists are views of the Config's, which
 * the manager frees only after handing over the options of its successor. Main thread only. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "api/users.h"
#include "config/config.h"

typedef struct ApiOptions {
	const char *socket_path; /* SocketPath= (restart) */
	UsersLimits users;       /* MaxClients=, MaxClientsPerUid=, MaxQueueBytes=, MaxQueueBytesPerUid= */
	uint64_t client_queue_bytes; /* ClientQueueBytes=: each socket client's and bus monitor's queues */
	size_t max_request_bytes;    /* MaxRequestBytes=: a request line, a bus filter */
	unsigned max_json_depth;     /* MaxJsonDepth= */
	unsigned request_timeout_ms; /* RequestTimeoutMs= */
	uint64_t shared_ring_bytes;  /* SharedRingBytes= (0: no shared path) */
	unsigned max_shared_rings;   /* MaxSharedRings= */
	unsigned max_shared_rings_per_uid; /* MaxSharedRingsPerUid= */
	unsigned bus_events_per_second;    /* BusEventsPerSecond= */
	GroupList allow_groups;            /* AllowGroups=: members see every user's events */
	GroupList control_groups;          /* ControlGroups=: members act, so see every user's events */
} ApiOptions;
