/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Cleanup functions for json-c objects, declared once for every user of json-c. */
#pragma once

#include <json-c/json.h>

#include "macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(json_object *, json_object_put);
DEFINE_TRIVIAL_CLEANUP_FUNC(json_tokener *, json_tokener_free);
