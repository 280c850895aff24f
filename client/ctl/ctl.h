/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What perfrelayctl's verb files share: the program name and error messages, option parsing,
 * the D-Bus helpers and the verbs themselves (perfrelayctl.c dispatches). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "macro.h"

#define BUS_NAME           "org.perfrelay1"
#define BUS_PATH           "/org/perfrelay1"
#define BUS_INTERFACE      "org.perfrelay1.Manager"
#define DEFAULT_SYSTEM_BUS "unix:path=/run/dbus/system_bus_socket"

extern const char *program;

/* "perfrelayctl: MESSAGE[: strerror(-r)]" on stderr; returns r, or -EINVAL for r >= 0. */
int _printf_(2, 3) error_errno(int r, const char *fmt, ...);
#define error_msg(...) error_errno(0, __VA_ARGS__)

int parse_u32(const char *s, uint32_t *ret);
int parse_uid(const char *s, uint32_t *ret); /* a number or a user name */
/* A time span: N followed by s, m, h or d ("10s", "5m"), in ns. */
int parse_span(const char *s, int64_t *ret_ns);

/* ctl-bus.c */
int bus_connect(sd_bus **ret);
/* An error of a bus call said once: the bus, the method, the D-Bus error and a hint; returns r. */
int bus_call_error(const char *method, const sd_bus_error *e, int r);
int bus_call(sd_bus *bus, const char *method, sd_bus_message **ret_reply, const char *types, ...);
/* Calls method (no arguments) on a new connection; its answer as JSON (bus-json.h). */
int bus_call_json(const char *method, json_object **ret);
/* A verb's options when they are -h/--help and -j/--json only: 1 with *ret_json, 0 after
 * printing the help, or a negative errno after a message. */
int parse_json_options(int argc, char *argv[], const char *verb, void (*help)(void), bool *ret_json);
/* The same for a verb whose only option is -h/--help: 1, 0 after the help, or a negative errno. */
int parse_help_option(int argc, char *argv[], const char *verb, void (*help)(void));

int verb_monitor(int argc, char *argv[]);   /* ctl-monitor.c */
int verb_query(int argc, char *argv[]);     /* ctl-monitor.c */
int verb_status(int argc, char *argv[]);    /* ctl-status.c */
int verb_probes(int argc, char *argv[]);    /* ctl-probes.c */
int verb_clients(int argc, char *argv[]);   /* ctl-clients.c */
int verb_probe(int argc, char *argv[]);     /* ctl-probes.c */
int verb_stats(int argc, char *argv[]);     /* ctl-stats.c */
int verb_producers(int argc, char *argv[]); /* ctl-producers.c */
int verb_snapshot(int argc, char *argv[]);  /* ctl-snapshot.c */
int verb_snapshots(int argc, char *argv[]); /* ctl-snapshot.c */
int verb_top(int argc, char *argv[]);       /* ctl-top.c */
int verb_capture(int argc, char *argv[]);   /* ctl-capture.c */
int verb_tree(int argc, char *argv[]);      /* ctl-tree.c */
