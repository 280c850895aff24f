/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* perfrelayctl capture: a unit's packets as pcapng (docs/capture.md). Starts a capture over
 * D-Bus (StartCapture()), reads its packet records from the event socket in binary format,
 * writes one interface block per ifindex and a packet block per record, and at the end stops
 * the capture and writes each interface's statistics with the packets lost (over the rate, not
 * written to the ring, or dropped from this client's queue) as isb_ifdrop. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "common/bus-json.h"
#include "ctl/ctl.h"
#include "event.h"
#include "ctl/format.h"
#include "json-util.h"
#include "ctl/pcapng.h"
#include "common/perfrelay-util.h"
#include "time-util.h"

#define MAX_INTERFACES   256u
#define DRAIN_TIMEOUT_MS 5000

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig) {
	stop_requested = 1;
}

typedef struct CaptureFile {
	FILE *f;
	const char *unit;
	uint32_t snaplen;
	uint32_t ifindex[MAX_INTERFACES]; /* pcapng interface id -> ifindex */
	uint8_t link[MAX_INTERFACES];     /* and the records' link (PERFRELAY_PACKET_LINK_*) */
	unsigned n_interfaces;
	uint32_t capture_id; /* the records to keep */
	uint64_t packets, lost;
	int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME */
} CaptureFile;

static int interface_of(CaptureFile *cf, uint32_t ifindex, uint8_t link, uint32_t *ret) {
	char name[IF_NAMESIZE + 16], comment[300];
	int r;

	for (unsigned i = 0; i < cf->n_interfaces; i++)
		if (cf->ifindex[i] == ifindex && cf->link[i] == link) {
			*ret = i;
			return 0;
		}
	if (cf->n_interfaces >= MAX_INTERFACES)
		return -E2BIG;
	/* The name here, if the interface is in our network namespace; else its index. */
	if (ifindex == 0 || !if_indextoname(ifindex, name))
		snprintf(name, sizeof(name), "ifindex %" PRIu32, ifindex);
	snprintf(comment, sizeof(comment), "perfrelay capture of %s", cf->unit);
	r = pcapng_write_idb(
		cf->f,
		link == PERFRELAY_PACKET_LINK_ETHER ? PCAPNG_LINKTYPE_ETHERNET : PCAPNG_LINKTYPE_RAW,
		cf->snaplen,
		name,
		comment);
	if (r < 0)
		return r;
	cf->ifindex[cf->n_interfaces] = ifindex;
	cf->link[cf->n_interfaces] = link;
	*ret = cf->n_interfaces++;
	return 0;
}

static int write_packet(CaptureFile *cf, const uint8_t *rec, uint32_t len) {
	struct perfrelay_packet p;
	uint32_t interface;
	uint64_t ts;
	int r;

	if (len < sizeof(p))
		return -EBADMSG;
	memcpy(&p, rec, sizeof(p));
	if (p.hdr.size != sizeof(p) || len - sizeof(p) != p.cap_len)
		return -EBADMSG;
	if (p.capture_id != cf->capture_id)
		return 0; /* another capture's */
	r = interface_of(cf, p.ifindex, p.link, &interface);
	if (r < 0)
		return r;
	ts = (uint64_t) ((int64_t) p.hdr.ts_ns + cf->realtime_offset_ns);
	cf->packets++;
	r = pcapng_write_epb(cf->f, interface, ts, rec + sizeof(p), p.cap_len, p.orig_len);
	return r < 0 ? r : 1;
}

/* Subscribes to every packet before the capture exists (its id is not known yet): a capture's
 * first packets, taken as soon as it is attached, must find this client already there. Records
 * of other captures are skipped (write_packet()). */
static int subscribe(const char *socket_path, perfrelay_client **ret) {
	static const char *const types[] = { "packet" };
	const struct perfrelay_subscription sub = {
		.types = types,
		.n_types = ELEMENTSOF(types),
		.format = PERFRELAY_FORMAT_BINARY,
	};
	_cleanup_(perfrelay_closep) perfrelay_client *c = NULL;
	int r;

	r = perfrelay_client_new(&c);
	if (r < 0)
		return error_errno(r, "Failed to allocate a client");
	r = perfrelay_connect(c, socket_path, &sub);
	if (r < 0)
		return error_errno(
			r,
			"Failed to subscribe on %s%s%s",
			socket_path,
			perfrelay_client_error(c) ? ": " : "",
			perfrelay_client_error(c) ?: "");
	*ret = TAKE_PTR(c);
	return 0;
}

/* Takes one record within timeout_ms (0: only one already there): a packet of this capture
 * is written (unless -c has enough), a loss notice counted. 1 if a record came, 0 if none did
 * (or a signal came first), negative on errors. */
static int read_record(perfrelay_client *c, int timeout_ms, CaptureFile *cf, uint64_t limit) {
	const struct perfrelay_hdr *h;
	const void *payload;
	size_t size;
	int r;

	r = perfrelay_next_record(c, &h, &payload, &size, timeout_ms);
	if (r <= 0)
		return r == -EINTR ? 0 : r;
	if (h->type == PERFRELAY_TYPE_LOST && size >= sizeof(uint64_t)) {
		uint64_t count;

		memcpy(&count, payload, sizeof(count));
		cf->lost += count;
	} else if (h->type == PERFRELAY_TYPE_PACKET && (limit == 0 || cf->packets < limit)) {
		r = write_packet(cf, (const uint8_t *) h, (uint32_t) (sizeof(*h) + size));
		if (r < 0)
			return r;
	}
	return 1;
}

/* Reads records for up to timeout_ms; a stream to standard output is flushed whenever the
 * client has caught up, so that a reader at the other end of the pipe sees packets as they
 * come. */
static int read_records(perfrelay_client *c, int timeout_ms, CaptureFile *cf, uint64_t limit, bool stream) {
	int r = read_record(c, 0, cf, limit);

	if (r != 0)
		return r;
	if (stream)
		fflush(cf->f);
	return read_record(c, timeout_ms, cf, limit);
}

/* The capture's figures from GetStats() (it keeps them after the capture ended). */
static int capture_figures(uint32_t id, uint64_t *ret_seen, uint64_t *ret_captured, uint64_t *ret_dropped) {
	_cleanup_(json_object_putp) json_object *stats = NULL;
	json_object *capture, *list;
	int r;

	r = bus_call_json("GetStats", &stats);
	if (r < 0)
		return r;
	if (!json_object_object_get_ex(stats, "capture", &capture) ||
	    !json_object_object_get_ex(capture, "captures", &list))
		return error_msg("GetStats() has no capture list");
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *c = json_object_array_get_idx(list, i);
		uint64_t cid = 0, rate = 0, failed = 0;

		if (!juint(c, "id", &cid) || cid != id)
			continue;
		(void) juint(c, "seen", ret_seen);
		(void) juint(c, "captured", ret_captured);
		(void) juint(c, "rate_dropped", &rate);
		(void) juint(c, "failed", &failed);
		*ret_dropped = rate + failed;
		return 0;
	}
	return error_msg("GetStats() does not list capture %" PRIu32, id);
}

static void help(void) {
	printf("%s capture --unit=UNIT|--cgroup=PATH|--container=C|--interface=NAME -w FILE [OPTIONS...]\n\n"
	       "Capture a unit's packets (its sockets' traffic) as pcapng (root, D-Bus).\n\n"
	       "  -h --help              Show this help\n"
	       "     --unit=UNIT         The unit whose packets to capture\n"
	       "     --cgroup=PATH       Or a cgroup, as a path below the cgroup2 root\n"
	       "     --container=C       Or a container: its name, image or id\n"
	       "  -i --interface=NAME   Or every packet of an interface (a name or an index)\n"
	       "  -w --write=FILE       Write pcapng to FILE (- for standard output)\n"
	       "  -c --count=N          Stop after N packets (default: until interrupted)\n"
	       "  -s --snaplen=BYTES    Bytes per packet (default and most: CaptureBytes=)\n"
	       "     --direction=DIR    ingress, egress or both (default)\n"
	       "     --rate=N           At most N packets per second (below CapturePacketsPerSecond=)\n"
	       "     --socket=PATH      The event socket (default $PERFRELAY_SOCKET or %s)\n",
	       program,
	       PERFRELAY_SOCKET_DEFAULT);
}

/* What `perfrelayctl capture` was asked. */
typedef struct CaptureArgs {
	const char *unit, *cgroup, *container, *interface, *direction, *out, *socket_path;
	uint32_t count, snaplen, rate, ifindex;
} CaptureArgs;

/* Returns 0 to go on, 1 when --help was shown, or a negative errno (the message written). */
static int capture_parse_args(int argc, char *argv[], CaptureArgs *a) {
	enum { ARG_UNIT = 0x100, ARG_CGROUP, ARG_CONTAINER, ARG_DIRECTION, ARG_RATE, ARG_SOCKET };
	static const struct option options[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "unit", required_argument, NULL, ARG_UNIT },
		{ "cgroup", required_argument, NULL, ARG_CGROUP },
		{ "container", required_argument, NULL, ARG_CONTAINER },
		{ "interface", required_argument, NULL, 'i' },
		{ "write", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'c' },
		{ "snaplen", required_argument, NULL, 's' },
		{ "direction", required_argument, NULL, ARG_DIRECTION },
		{ "rate", required_argument, NULL, ARG_RATE },
		{ "socket", required_argument, NULL, ARG_SOCKET },
		{},
	};
	int opt;

	a->socket_path = getenv("PERFRELAY_SOCKET") ?: PERFRELAY_SOCKET_DEFAULT;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "hw:c:s:i:", options, NULL)) >= 0)
		switch (opt) {
		case 'h':
			help();
			return 1;
		case ARG_CONTAINER:
			a->container = optarg;
			break;
		case ARG_UNIT:
			a->unit = optarg;
			break;
		case ARG_CGROUP:
			a->cgroup = optarg;
			break;
		case 'i':
			a->interface = optarg;
			if (parse_u32(optarg, &a->ifindex) < 0 || a->ifindex == 0) {
				a->ifindex = if_nametoindex(optarg);
				if (a->ifindex == 0)
					return error_errno(-errno, "--interface=%s: no such interface", optarg);
			}
			break;
		case 'w':
			a->out = optarg;
			break;
		case 'c':
			if (parse_u32(optarg, &a->count) < 0 || a->count == 0)
				return error_msg("--count=%s: a positive number", optarg);
			break;
		case 's':
			if (parse_u32(optarg, &a->snaplen) < 0 || a->snaplen == 0 ||
			    a->snaplen > PERFRELAY_CAPTURE_BYTES_MAX)
				return error_msg(
					"--snaplen=%s: 1 to %u bytes", optarg, PERFRELAY_CAPTURE_BYTES_MAX);
			break;
		case ARG_DIRECTION:
			a->direction = optarg;
			break;
		case ARG_RATE:
			if (parse_u32(optarg, &a->rate) < 0 || a->rate == 0)
				return error_msg("--rate=%s: a positive number", optarg);
			break;
		case ARG_SOCKET:
			a->socket_path = optarg;
			break;
		default:
			return -EINVAL;
		}
	if (!!a->unit + !!a->cgroup + !!a->container + !!a->interface != 1)
		return error_msg(
			"capture needs one of --unit=, --cgroup=, --container= and --interface= (see --help)");
	if (!a->out)
		return error_msg("capture needs -w FILE (or -w - for standard output)");
	return 0;
}

/* StartCapture() with what was asked: the capture's object path in *ret_path (the reply's, kept
 * alive by *ret_reply), its id and its bytes per packet. */
static int capture_start(
	sd_bus *bus,
	const CaptureArgs *a,
	sd_bus_message **ret_reply,
	const char **ret_path,
	uint32_t *ret_id,
	uint32_t *ret_bytes) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *call = NULL, *reply = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	const char *path = NULL;
	char *slash;
	int r;

	r = sd_bus_message_new_method_call(bus, &call, BUS_NAME, BUS_PATH, BUS_INTERFACE, "StartCapture");
	if (r >= 0)
		r = sd_bus_message_open_container(call, 'a', "{sv}");
	if (r >= 0)
		r = a->unit          ? sd_bus_message_append(call, "{sv}", "unit", "s", a->unit) :
			a->container ? sd_bus_message_append(call, "{sv}", "container", "s", a->container) :
			a->interface ? sd_bus_message_append(call, "{sv}", "ifindex", "u", a->ifindex) :
				       sd_bus_message_append(call, "{sv}", "cgroup", "s", a->cgroup);
	if (r >= 0 && a->direction)
		r = sd_bus_message_append(call, "{sv}", "direction", "s", a->direction);
	if (r >= 0 && a->snaplen)
		r = sd_bus_message_append(call, "{sv}", "bytes", "u", a->snaplen);
	if (r >= 0 && a->rate)
		r = sd_bus_message_append(call, "{sv}", "packets_per_second", "u", a->rate);
	if (r >= 0)
		r = sd_bus_message_close_container(call);
	if (r < 0)
		return error_errno(r, "Failed to build the StartCapture() call");
	r = sd_bus_call(bus, call, 0, &e, &reply);
	if (r < 0) {
		error_msg("StartCapture() failed: %s", e.message ?: strerror(-r));
		sd_bus_error_free(&e);
		return r;
	}
	r = sd_bus_message_read(reply, "o", &path);
	if (r < 0)
		return error_errno(r, "Failed to read the StartCapture() reply");
	slash = strrchr(path, '/');
	if (!slash || parse_u32(slash + 1, ret_id) < 0)
		return error_msg("StartCapture() returned an odd path: %s", path);
	r = sd_bus_get_property_trivial(
		bus, BUS_NAME, path, "org.perfrelay1.Capture", "Bytes", &e, 'u', ret_bytes);
	if (r < 0)
		*ret_bytes = a->snaplen ?: 65535;
	sd_bus_error_free(&e);
	*ret_path = path;
	*ret_reply = TAKE_PTR(reply);
	return 0;
}

/* After StopCapture(): reads what the capture took and is still on its way (up to
 * DRAIN_TIMEOUT_MS), then writes the statistics block and says what was lost. */
static int capture_finish(perfrelay_client *client, CaptureFile *cf, const CaptureArgs *a, uint64_t start_ns) {
	uint64_t seen = 0, captured = 0, dropped = 0, lost;
	uint64_t deadline = now_msec(CLOCK_MONOTONIC) + DRAIN_TIMEOUT_MS;
	int r = 0;

	if (capture_figures(cf->capture_id, &seen, &captured, &dropped) < 0)
		return 0;
	while ((a->count == 0 || cf->packets < a->count) && cf->packets + cf->lost < captured &&
	       now_msec(CLOCK_MONOTONIC) < deadline &&
	       (r = read_records(client, 200, cf, a->count, cf->f == stdout)) >= 0)
		;
	if (r >= 0 && cf->n_interfaces == 0) {
		uint32_t any;

		r = interface_of(cf, 0, PERFRELAY_PACKET_LINK_RAW, &any); /* a block for the statistics */
	}
	/* The figures go on the first interface: a capture does not know them per interface, so
	 * the others' are left out (unknown), not 0. */
	lost = dropped + cf->lost;
	for (unsigned i = 0; r >= 0 && i < cf->n_interfaces; i++)
		r = pcapng_write_isb(
			cf->f,
			i,
			now_nsec(CLOCK_REALTIME),
			start_ns,
			now_nsec(CLOCK_REALTIME),
			i == 0 ? &seen : NULL,
			i == 0 ? &lost : NULL);
	if (r >= 0)
		fprintf(stderr,
			"%" PRIu64 " packets written; %" PRIu64 " lost (%" PRIu64
			" over the rate or not written to the ring, %" PRIu64
			" dropped from this client's queue)\n",
			cf->packets,
			dropped + cf->lost,
			dropped,
			cf->lost);
	return r;
}

int verb_capture(int argc, char *argv[]) {
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(perfrelay_closep) perfrelay_client *client = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	const char *path = NULL;
	uint32_t id = 0, bytes = 0;
	uint64_t start_ns = now_nsec(CLOCK_REALTIME);
	CaptureArgs a = {};
	CaptureFile cf = {};
	int r;

	r = capture_parse_args(argc, argv, &a);
	if (r != 0)
		return r > 0 ? 0 : r;
	r = bus_connect(&bus);
	if (r < 0)
		return r;
	r = subscribe(a.socket_path, &client);
	if (r < 0)
		return r;
	r = capture_start(bus, &a, &reply, &path, &id, &bytes);
	if (r < 0)
		return r;

	cf.unit = a.unit ?: a.cgroup ?: a.container ?: a.interface;
	cf.capture_id = id;
	cf.snaplen = bytes;
	cf.realtime_offset_ns = (int64_t) now_nsec(CLOCK_REALTIME) - (int64_t) now_nsec(CLOCK_BOOTTIME);
	cf.f = streq(a.out, "-") ? stdout : fopen(a.out, "we");
	if (!cf.f) {
		r = error_errno(-errno, "Failed to open %s", a.out);
		goto stop;
	}
	r = pcapng_write_shb(cf.f, "perfrelayctl capture");
	if (r < 0)
		goto stop;
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	signal(SIGPIPE, SIG_IGN);
	while (!stop_requested && (a.count == 0 || cf.packets < a.count)) {
		r = read_records(client, 200, &cf, a.count, cf.f == stdout);
		if (r < 0)
			goto stop;
	}

stop:
	/* Stopped first, then counted: the capture's figures are final, and every packet it
	 * took is either read here or reported lost, unless -c had enough already. */
	(void) sd_bus_call_method(bus, BUS_NAME, BUS_PATH, BUS_INTERFACE, "StopCapture", &e, NULL, "o", path);
	sd_bus_error_free(&e);
	if (r >= 0)
		r = capture_finish(client, &cf, &a, start_ns);
	if (cf.f && fflush(cf.f) != 0 && r >= 0)
		r = error_errno(-EIO, "Failed to write %s", a.out);
	if (cf.f && cf.f != stdout)
		fclose(cf.f);
	if (r < 0 && r != -ECONNRESET)
		return r;
	return 0;
}
