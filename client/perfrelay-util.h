/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What perfrelay's own programs add to libperfrelay's API: its cleanup function. Not installed. */
#pragma once

#include "macro.h"
#include "perfrelay.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(perfrelay_client *, perfrelay_close);
