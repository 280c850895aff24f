/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* D-Bus values to JSON, for the clients that print or export the daemon's a{sv} answers
 * (GetStats()): perfrelayctl and perfrelay-metrics. */
#pragma once

#include <json-c/json.h>
#include <systemd/sd-bus.h>

/* Reads the next value of m into a new JSON value; 1 on success, negative errno otherwise. */
int bus_value_to_json(sd_bus_message *m, json_object **ret);
