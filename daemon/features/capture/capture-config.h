/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Packet captures' [Capture] section (docs/config.md, docs/capture.md). Pure: the configuration parser
 * (config.c) reads it as a ConfigPart. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct CaptureConfig {
	uint32_t bytes;              /* CaptureBytes=, 1..65000, default 128: the most a capture takes */
	unsigned max_captures;       /* MaxCaptures=, 1..64, default 8 */
	uint32_t packets_per_second; /* CapturePacketsPerSecond=, 0..10000000, default 10000 (0: none) */
	bool allow_host_captures; /* AllowHostCaptures=, default no: ControlGroups= members may capture / and interfaces */
} CaptureConfig;

extern const ConfigPart capture_config;
