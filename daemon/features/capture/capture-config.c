/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The keys of CaptureConfig (its header says what they are for). */
#include "event.h"
#include "macro.h"
#include "features/capture/capture-config.h"

static const CaptureConfig defaults = {
	.bytes = 128,
	.max_captures = 8,
	.packets_per_second = 10000,
};

/* clang-format off */
static const ConfigKey keys[] = {
	{ "Capture", "CaptureBytes", VALUE_UINT, CONFIG_FIELD(CaptureConfig, bytes), 1, PERFRELAY_CAPTURE_BYTES_MAX, NULL, true },
	{ "Capture", "MaxCaptures", VALUE_UINT, CONFIG_FIELD(CaptureConfig, max_captures), 1, 64, NULL, false },
	{ "Capture", "CapturePacketsPerSecond", VALUE_UINT, CONFIG_FIELD(CaptureConfig, packets_per_second), 0, 10000000, NULL, true },
	{ "Capture", "AllowHostCaptures", VALUE_BOOL, CONFIG_FIELD(CaptureConfig, allow_host_captures), 0, 0, NULL, true },
};
/* clang-format on */

const ConfigPart capture_config = {
	.section = "Capture",
	.keys = keys,
	.n_keys = ELEMENTSOF(keys),
	.size = sizeof(CaptureConfig),
	.defaults = &defaults,
};
