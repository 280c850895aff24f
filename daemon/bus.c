/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon on the system bus: the manager object's properties and methods, the counters'
 * PropertiesChanged and EventsLost signals, and event subscriptions as monitor objects. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "perfrelay-config.h"

#include "bus.h"
#include "encode.h"
#include "filter.h"
#include "log.h"
#include "manager.h"
#include "request.h"
#include "stats.h"
#include "time-util.h"

/* Counters are compared, and PropertiesChanged and EventsLost emitted, at most this often. */
#define STATS_INTERVAL_USEC USEC_PER_SEC
/* The window of BusEventsPerSecond=: at most that many Event signals per subscriber in it. */
#define RATE_WINDOW_USEC    USEC_PER_SEC
/* A Subscribe() filter becomes a request of depth 3 ({"subscribe":{"pid":[1]}}). */
#define FILTER_JSON_DEPTH   4u

typedef struct BusSubscriber BusSubscriber;

/* One Subscribe() call: a hub client whose JSON lines the main thread takes from the hub
 * (hub_client_consume(), with each event's type and timestamp) and sends to `sender` as
 * signals. */
struct BusSubscriber {
	Bus *bus;
	BusSubscriber *prev, *next;
	uint64_t id;
	char *path;        /* /org/perfrelay1/monitor/<id> */
	char *sender;      /* the subscriber's unique bus name */
	uid_t uid;         /* its effective uid when it subscribed */
	Subscription *sub; /* read by reader threads through the hub while attached */
	char *filter_text; /* subscription_to_json(sub): the Filter property */
	HubClient *client;
	sd_event_source *window_timer; /* on while drops wait to be told in a Dropped signal */
	sd_bus_slot *slot;             /* the monitor object */
	sd_bus_track *track;           /* the subscriber's name: when it goes, so does the monitor */
	uint64_t window_start;         /* CLOCK_MONOTONIC usec; 0: no window yet */
	uint64_t tokens;               /* Event signals left in the window */
	uint64_t pending_drops;        /* dropped since the last Dropped signal */
	uint64_t dropped_at;           /* CLOCK_MONOTONIC usec of the last Dropped signal; 0: none */
	uint64_t delivered;            /* Event signals sent */
	uint64_t dropped; /* events taken from the hub but not sent: over the rate, or sd-bus refused */
};

struct Bus {
	Manager *manager;
	const Config *config; /* the manager's; replaced by bus_set_config() on reload */
	sd_event *event;
	sd_bus *bus;
	sd_event_source *stats_timer;
	sd_event_source *gone_source; /* deferred cleanup after the connection was lost */
	bool gone;
	ManagerCounters last;     /* the counters as of the last PropertiesChanged (or start) */
	uint64_t *lost_signalled; /* per ring, in reader order: lost count as of the last EventsLost */
	size_t n_rings;

	BusSubscriber *subscribers;
	size_t n_subscribers;
	uint64_t next_id;
	uint64_t gone_delivered, gone_dropped; /* subscribers that left */
};

DEFINE_TRIVIAL_CLEANUP_FUNC(json_object *, json_object_put);

static const char *strna(const char *s) {
	return s ?: "n/a";
}

static uint64_t bus_now(Bus *b) {
	uint64_t t = 0;

	(void) sd_event_now(b->event, CLOCK_MONOTONIC, &t);
	return t;
}

/* Methods that change state need root. The bus policy says so too; this is the check that does
 * not depend on the policy file being installed right. No uid, no access. */
static int check_root(sd_bus_message *message, const char *what, sd_bus_error *error) {
	_cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
	uid_t euid = (uid_t) -1; /* nobody until the bus says otherwise */
	int r;

	r = sd_bus_query_sender_creds(message, SD_BUS_CREDS_EUID | SD_BUS_CREDS_AUGMENT, &creds);
	if (r >= 0)
		r = sd_bus_creds_get_euid(creds, &euid);
	if (r < 0) {
		log_debug_errno(
			r,
			"%s from %s: cannot determine the caller's uid (%m), refusing",
			what,
			strna(sd_bus_message_get_sender(message)));
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root; the caller's user id could not be determined",
			what);
	}
	if (euid != 0)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"%s needs root (the caller is uid %u)",
			what,
			(unsigned) euid);
	return 0;
}

/* Manager properties ------------------------------------------------------------------------ */

static int property_get_version(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	return sd_bus_message_append(reply, "s", PERFRELAY_VERSION_STRING);
}

static int property_get_state(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;

	return sd_bus_message_append(reply, "s", manager_state_to_string(manager_state(b->manager)));
}

static int property_get_pin_path(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;

	return sd_bus_message_append(reply, "s", manager_pin_path(b->manager));
}

static int property_get_cpus(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;

	return sd_bus_message_append(reply, "u", (uint32_t) cpuset_count(manager_cpus(b->manager)));
}

static int property_get_readers(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;

	return sd_bus_message_append(reply, "u", (uint32_t) manager_n_readers(b->manager));
}

static int property_get_probes(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;
	Probes *p = manager_probes(b->manager);
	int r;

	r = sd_bus_message_open_container(reply, 'a', "s");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++)
		if (probes_is_enabled(p, i)) {
			r = sd_bus_message_append(reply, "s", probe_to_string(i));
			if (r < 0)
				return r;
		}
	return sd_bus_message_close_container(reply);
}

/* a(sbbss): name, available, required, first kernel version with it, what is off without it. */
static int property_get_kernel_features(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;
	const Features *f = manager_features(b->manager);
	int r;

	r = sd_bus_message_open_container(reply, 'a', "(sbbss)");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _FEATURE_MAX; i++) {
		r = sd_bus_message_append(
			reply,
			"(sbbss)",
			feature_to_string(i),
			(int) features_has(f, i),
			(int) feature_required(i),
			feature_since(i),
			feature_without(i));
		if (r < 0)
			return r;
	}
	return sd_bus_message_close_container(reply);
}

/* The counters, by property name: one getter, so that each name is spelled once here. */
static int property_get_counter(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;
	bool failures = streq(property, "ProducerFailures");
	ManagerCounters c;
	int r;

	r = manager_get_counters(b->manager, failures, &c);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error,
			r,
			"Failed to read the producers' counters under %s: %m",
			manager_pin_path(b->manager));
	if (streq(property, "Clients"))
		return sd_bus_message_append(reply, "u", (uint32_t) MIN(c.clients, (uint64_t) UINT32_MAX));
	if (streq(property, "EventsReceived"))
		return sd_bus_message_append(reply, "t", c.events_received);
	if (streq(property, "EventsDelivered"))
		return sd_bus_message_append(reply, "t", c.events_delivered);
	if (streq(property, "EventsLost"))
		return sd_bus_message_append(reply, "t", c.events_lost);
	if (failures)
		return sd_bus_message_append(reply, "t", c.producer_failures);
	if (streq(property, "ClientDrops"))
		return sd_bus_message_append(reply, "t", c.client_drops);
	return -EINVAL; /* a vtable entry without a case here */
}

static int property_get_started_at(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	Bus *b = userdata;

	return sd_bus_message_append(reply, "t", manager_started_at(b->manager));
}

/* Manager methods --------------------------------------------------------------------------- */

/* GetCpuStats() and GetReaderStats() are views of the one snapshot GetStats() returns. */
static int method_get_cpu_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Bus *b = userdata;
	int r;

	r = stats_snapshot(b->manager, &st);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", manager_pin_path(b->manager));
	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(uuttttttt)");
	if (r < 0)
		return r;
	for (size_t i = 0; i < st->n_cpus; i++) {
		const CpuSnapshot *c = &st->cpus[i];

		r = sd_bus_message_append(
			reply,
			"(uuttttttt)",
			(uint32_t) c->cpu,
			(uint32_t) c->reader,
			c->ring.received,
			c->ring.lost,
			c->ring.bytes,
			c->ring.malformed,
			c->failures,
			c->ring.corrupt,
			c->ring.corrupt_bytes);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_get_reader_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *st = NULL;
	Bus *b = userdata;
	int r;

	r = stats_snapshot(b->manager, &st);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", manager_pin_path(b->manager));
	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(uauttt)");
	if (r < 0)
		return r;
	for (size_t i = 0; i < st->n_readers; i++) {
		const ReaderSnapshot *rd = &st->readers[i];
		CpuSet cpus;

		r = cpuset_parse(rd->cpus, &cpus);
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'r', "uauttt");
		if (r >= 0)
			r = sd_bus_message_append(reply, "u", (uint32_t) rd->id);
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'a', "u");
		FOREACH_CPU(cpu, &cpus) {
			if (r < 0)
				break;
			r = sd_bus_message_append(reply, "u", (uint32_t) cpu);
		}
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r >= 0)
			r = sd_bus_message_append(reply, "ttt", rd->wakeups, rd->batches, rd->events);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int append_client(const ServerClientInfo *c, void *userdata) {
	sd_bus_message *reply = userdata;
	_cleanup_free_ char *filter = NULL;
	int r;

	r = subscription_to_json(c->sub, &filter);
	if (r < 0)
		return r;
	return sd_bus_message_append(
		reply,
		"(tuusttt)",
		c->id,
		(uint32_t) c->uid,
		(uint32_t) c->pid,
		filter,
		c->stats.sent,
		c->stats.dropped,
		c->stats.queued_bytes);
}

static int method_list_clients(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	Bus *b = userdata;
	int r;

	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(tuusttt)");
	if (r < 0)
		return r;
	r = server_foreach_client(manager_server(b->manager), append_client, reply);
	if (r < 0)
		return r;
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_list_probes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	Bus *b = userdata;
	Probes *p = manager_probes(b->manager);
	int r;

	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(sbt)");
	if (r < 0)
		return r;
	for (unsigned i = 0; i < _PROBE_MAX; i++) {
		struct perfrelay_counters sum;

		r = probes_read_counters(p, probe_producer(i), &sum, NULL);
		if (r < 0)
			return sd_bus_error_set_errnof(
				error, r, "Failed to read the counters of probe %s: %m", probe_to_string(i));
		r = sd_bus_message_append(
			reply, "(sbt)", probe_to_string(i), (int) probes_is_enabled(p, i), sum.attempts);
		if (r < 0)
			return r;
	}
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int method_set_probe_enabled(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	const char *name;
	int enabled, probe, r;

	r = sd_bus_message_read(message, "sb", &name, &enabled);
	if (r < 0)
		return r;
	r = check_root(message, "SetProbeEnabled", error);
	if (r < 0)
		return r;
	probe = probe_from_string(name);
	if (probe < 0)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_INVALID_ARGS,
			"Unknown probe \"%s\" (known: exec exit fork open connect)",
			name);
	r = manager_set_probe_enabled(b->manager, (unsigned) probe, enabled);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to %s probe %s: %m", enabled ? "attach" : "detach", name);
	return sd_bus_reply_method_return(message, NULL);
}

static int method_disconnect_client(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	uint64_t id;
	int r;

	r = sd_bus_message_read(message, "t", &id);
	if (r < 0)
		return r;
	r = check_root(message, "DisconnectClient", error);
	if (r < 0)
		return r;
	r = server_disconnect_client(manager_server(b->manager), id);
	if (r == -ESRCH)
		return sd_bus_error_setf(
			error, BUS_ERROR_NO_SUCH_CLIENT, "No socket client with id %" PRIu64, id);
	if (r < 0)
		return r;
	return sd_bus_reply_method_return(message, NULL);
}

static int method_reload(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	_cleanup_free_ char *text = NULL;
	int r;

	r = check_root(message, "Reload", error);
	if (r < 0)
		return r;
	log_info("Reload requested by %s", strna(sd_bus_message_get_sender(message)));
	r = manager_reload(b->manager, &text);
	/* A file that cannot be read or parsed: nothing changed, and the text says where. */
	if (r < 0 && text)
		return sd_bus_error_setf(error, BUS_ERROR_INVALID_CONFIG, "%s", text);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Reloaded, but attaching or detaching a probe for Probes= failed: %m");
	return sd_bus_reply_method_return(message, NULL);
}

/* Subscriptions ----------------------------------------------------------------------------- */

static bool subscriber_match(const void *filter, const DecodedEvent *ev, const char *unit) {
	return filter_match(filter, ev, unit);
}

static BusSubscriber *subscriber_free(BusSubscriber *s) {
	Bus *b;

	if (!s)
		return NULL;
	b = s->bus;
	if (s->client) {
		HubClientStats st;

		/* After this no reader touches the client or its subscription. */
		hub_client_detach(manager_hub(b->manager), s->client);
		hub_client_discard(s->client);
		hub_client_get_stats(s->client, &st);
		/* Events left in the hub queue are in st.dropped now. */
		b->gone_delivered += s->delivered;
		b->gone_dropped += s->dropped + st.dropped;
		log_debug(
			"Bus subscriber %s (%s) gone: %" PRIu64 " events offered, %" PRIu64 " sent, %" PRIu64
			" dropped",
			s->path,
			s->sender,
			st.offered,
			s->delivered,
			s->dropped + st.dropped);
		hub_client_free(s->client);
	}
	subscription_free(s->sub);
	sd_event_source_disable_unref(s->window_timer);
	sd_bus_slot_unref(s->slot);
	sd_bus_track_unref(s->track);
	free(s->filter_text);
	free(s->sender);
	free(s->path);
	if (s->prev)
		s->prev->next = s->next;
	else if (b->subscribers == s)
		b->subscribers = s->next;
	if (s->next)
		s->next->prev = s->prev;
	b->n_subscribers--;
	free(s);
	return NULL;
}

/* A signal on the monitor object, to its subscriber only. */
static int subscriber_signal(BusSubscriber *s, sd_bus_message **ret, const char *member) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
	int r;

	r = sd_bus_message_new_signal(s->bus->bus, &msg, s->path, BUS_INTERFACE_MONITOR, member);
	if (r < 0)
		return r;
	r = sd_bus_message_set_destination(msg, s->sender);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(msg);
	return 0;
}

/* Arms the timer that tells pending drops: when the window ends, and never sooner than a
 * second after the last Dropped. */
static void subscriber_arm_window_timer(BusSubscriber *s, uint64_t when) {
	int r;

	r = sd_event_source_set_time(s->window_timer, when);
	if (r >= 0)
		r = sd_event_source_set_enabled(s->window_timer, SD_EVENT_ONESHOT);
	if (r < 0)
		log_debug_errno(r, "Bus subscriber %s: failed to arm its window timer: %m", s->path);
}

static void subscriber_send_dropped(BusSubscriber *s, uint64_t now) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
	int r;

	if (s->pending_drops == 0)
		return;
	if (s->dropped_at != 0 && now < s->dropped_at + RATE_WINDOW_USEC) {
		subscriber_arm_window_timer(s, s->dropped_at + RATE_WINDOW_USEC);
		return;
	}
	r = subscriber_signal(s, &msg, "Dropped");
	if (r >= 0)
		r = sd_bus_message_append(msg, "t", s->pending_drops);
	if (r >= 0)
		r = sd_bus_send(s->bus->bus, msg, NULL);
	if (r < 0) {
		/* Kept: told a window later. */
		log_debug_errno(r, "Bus subscriber %s: failed to send Dropped: %m", s->path);
		subscriber_arm_window_timer(s, now + RATE_WINDOW_USEC);
		return;
	}
	s->pending_drops = 0;
	s->dropped_at = now;
}

/* Starts a new window if the last one is over, telling the subscriber first what it lost in
 * the last one. */
static void subscriber_refill(BusSubscriber *s, uint64_t now) {
	if (s->window_start != 0 && now < s->window_start + RATE_WINDOW_USEC)
		return;
	subscriber_send_dropped(s, now);
	s->window_start = now;
	s->tokens = s->bus->config->bus_events_per_second;
}

static int on_window_end(sd_event_source *es, uint64_t usec, void *userdata) {
	BusSubscriber *s = userdata;

	/* The window is over: its drops are told now, without waiting for another event. The
	 * next window starts with the next event. */
	subscriber_send_dropped(s, bus_now(s->bus));
	return 0;
}

static void subscriber_drop(BusSubscriber *s, uint64_t n) {
	s->pending_drops += n;
	subscriber_arm_window_timer(s, MAX(s->window_start, s->dropped_at) + RATE_WINDOW_USEC);
}

/* One frame the hub hands over: an event, or a notice of events dropped in the hub queue. */
static void subscriber_frame(const HubFrame *f, void *userdata) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
	BusSubscriber *s = userdata;
	const char *type;
	int r;

	if (f->type == PERFRELAY_TYPE_LOST) {
		/* Dropped in the hub queue: already in the hub client's stats, told here. */
		subscriber_drop(s, f->value);
		return;
	}

	subscriber_refill(s, bus_now(s->bus));
	if (s->tokens == 0) {
		s->dropped++;
		subscriber_drop(s, 1);
		return;
	}
	/* The name the JSON line's "type" carries (encode.c). */
	type = f->known ? event_type_to_string(f->type) : NULL;
	r = subscriber_signal(s, &msg, "Event");
	if (r >= 0)
		r = sd_bus_message_append(msg, "sts", type ?: "unknown", f->value, f->line);
	if (r >= 0)
		r = sd_bus_send(s->bus->bus, msg, NULL);
	if (r < 0) {
		log_debug_errno(r, "Bus subscriber %s: failed to send an Event: %m", s->path);
		s->dropped++;
		subscriber_drop(s, 1);
		return;
	}
	s->tokens--;
	s->delivered++;
}

/* The subscriber's consumer (HubClientOptions.flush): every frame queued now becomes a signal
 * (or a counted drop) at once, so the client never blocks the hub. */
static void subscriber_flush(HubClient *c, void *userdata) {
	hub_client_consume(c, subscriber_frame, userdata);
}

static int on_subscriber_gone(sd_bus_track *track, void *userdata) {
	BusSubscriber *s = userdata;

	log_debug("Bus subscriber %s left the bus, removing %s", s->sender, s->path);
	subscriber_free(s);
	return 0;
}

static int monitor_property_get_filter(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	BusSubscriber *s = userdata;

	return sd_bus_message_append(reply, "s", s->filter_text);
}

static int monitor_property_get_counter(
	sd_bus *bus,
	const char *path,
	const char *interface,
	const char *property,
	sd_bus_message *reply,
	void *userdata,
	sd_bus_error *error) {
	BusSubscriber *s = userdata;
	HubClientStats st;

	if (streq(property, "EventsDelivered"))
		return sd_bus_message_append(reply, "t", s->delivered);
	hub_client_get_stats(s->client, &st);
	return sd_bus_message_append(reply, "t", s->dropped + st.dropped);
}

static const sd_bus_vtable monitor_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_PROPERTY("Filter", "s", monitor_property_get_filter, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("EventsDelivered", "t", monitor_property_get_counter, 0, 0),
	SD_BUS_PROPERTY("EventsDropped", "t", monitor_property_get_counter, 0, 0),
	SD_BUS_SIGNAL_WITH_NAMES(
		"Event", "sts", SD_BUS_PARAM(type) SD_BUS_PARAM(timestamp) SD_BUS_PARAM(json), 0),
	SD_BUS_SIGNAL_WITH_NAMES("Dropped", "t", SD_BUS_PARAM(count), 0),
	SD_BUS_VTABLE_END
};

/* Reads one a{sv} filter value: an array of strings or of uint32 into a JSON array. */
static int read_filter_list(
	sd_bus_message *message, const char *key, char kind, json_object **ret, sd_bus_error *error) {
	_cleanup_(json_object_putp) json_object *a = json_object_new_array();
	const char *contents = NULL, *want = kind == 's' ? "as" : "au";
	char type;
	size_t n = 0;
	int r;

	if (!a)
		return -ENOMEM;
	r = sd_bus_message_peek_type(message, &type, &contents);
	if (r < 0)
		return r;
	if (type != 'v' || !contents || !streq(contents, want))
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_INVALID_ARGS,
			"filter \"%s\": expected a variant of type %s, "
			"got %s",
			key,
			want,
			strna(contents));
	r = sd_bus_message_enter_container(message, 'v', want);
	if (r >= 0)
		r = sd_bus_message_enter_container(message, 'a', want + 1);
	if (r < 0)
		return r;
	for (;;) {
		json_object *v;

		if (kind == 's') {
			const char *s;

			r = sd_bus_message_read(message, "s", &s);
			if (r <= 0)
				break;
			/* Types may be given by number too, as on the socket ("32768"). */
			if (streq(key, "types") && s[0] >= '0' && s[0] <= '9' &&
			    strspn(s, "0123456789") == strlen(s) && strlen(s) <= 10)
				v = json_object_new_int64(strtoll(s, NULL, 10));
			else
				v = json_object_new_string(s);
		} else {
			uint32_t u;

			r = sd_bus_message_read(message, "u", &u);
			if (r <= 0)
				break;
			v = json_object_new_int64(u);
		}
		if (!v || json_object_array_add(a, v) < 0) {
			json_object_put(v);
			return -ENOMEM;
		}
		/* Bounded before it is all copied; request_parse() names the limit. */
		if (++n > SUBSCRIPTION_MAX_ENTRIES)
			return sd_bus_error_setf(
				error,
				SD_BUS_ERROR_INVALID_ARGS,
				"filter \"%s\": more than %u entries",
				key,
				SUBSCRIPTION_MAX_ENTRIES);
	}
	if (r < 0)
		return r;
	r = sd_bus_message_exit_container(message);
	if (r >= 0)
		r = sd_bus_message_exit_container(message);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(a);
	return 0;
}

/* The a{sv} filter in the socket protocol's terms, checked by the socket's own parser. */
static int read_filter(Bus *b, sd_bus_message *message, Subscription **ret, sd_bus_error *error) {
	_cleanup_(json_object_putp) json_object *root = json_object_new_object(),
						*sub = json_object_new_object();
	RequestLimits limits = { .max_bytes = b->config->max_request_bytes, .max_depth = FILTER_JSON_DEPTH };
	RequestError e;
	const char *text;
	int r;

	if (!root || !sub)
		return -ENOMEM;
	r = sd_bus_message_enter_container(message, 'a', "{sv}");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_enter_container(message, 'e', "sv")) > 0) {
		json_object *list = NULL;
		const char *key;
		char kind;

		r = sd_bus_message_read(message, "s", &key);
		if (r < 0)
			return r;
		if (streq(key, "types") || streq(key, "comm") || streq(key, "unit"))
			kind = 's';
		else if (streq(key, "pid") || streq(key, "uid"))
			kind = 'u';
		else
			return sd_bus_error_setf(
				error,
				SD_BUS_ERROR_INVALID_ARGS,
				"unknown filter \"%s\" (known: types as, pid au, uid au, comm as, unit as)",
				key);
		r = read_filter_list(message, key, kind, &list, error);
		if (r < 0)
			return r;
		if (json_object_object_add(sub, key, list) < 0) {
			json_object_put(list);
			return -ENOMEM;
		}
		r = sd_bus_message_exit_container(message);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	r = sd_bus_message_exit_container(message);
	if (r < 0)
		return r;

	if (json_object_object_add(root, "subscribe", sub) < 0)
		return -ENOMEM;
	sub = NULL; /* owned by root now */
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
	if (!text)
		return -ENOMEM;
	r = request_parse(text, strlen(text), &limits, ret, &e);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "%s", e.message);
	return 0;
}

/* The caller's supplementary groups as the bus recorded them when it connected (SO_PEERGROUPS,
 * "UnixGroupIDs" of GetConnectionCredentials; sd-bus does not ask for them). Returns the count,
 * 0 if the bus does not say, or a negative errno. */
static int sender_groups(Bus *b, const char *sender, gid_t **ret) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_free_ gid_t *groups = NULL;
	size_t n = 0;
	int r;

	r = sd_bus_call_method(
		b->bus,
		"org.freedesktop.DBus",
		"/org/freedesktop/DBus",
		"org.freedesktop.DBus",
		"GetConnectionCredentials",
		NULL,
		&reply,
		"s",
		sender);
	if (r < 0)
		return r;
	r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *key, *contents = NULL;
		char type;

		r = sd_bus_message_read(reply, "s", &key);
		if (r >= 0)
			r = sd_bus_message_peek_type(reply, &type, &contents);
		if (r < 0)
			return r;
		if (!streq(key, "UnixGroupIDs") || !contents || !streq(contents, "au")) {
			r = sd_bus_message_skip(reply, "v");
		} else {
			const void *a;
			size_t size;

			r = sd_bus_message_enter_container(reply, 'v', "au");
			if (r >= 0)
				r = sd_bus_message_read_array(reply, 'u', &a, &size);
			if (r >= 0) {
				free(groups);
				n = size / sizeof(uint32_t);
				groups = n > 0 ? malloc(size) : NULL;
				if (n > 0 && !groups)
					return -ENOMEM;
				if (n > 0)
					memcpy(groups, a, size); /* gid_t is uint32_t on Linux */
				r = sd_bus_message_exit_container(reply);
			}
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	if (r < 0)
		return r;
	*ret = TAKE_PTR(groups);
	return (int) MIN(n, (size_t) INT32_MAX);
}

/* Root and AllowGroups= members see everything, others their own uid, as on the socket. The
 * uid and groups are what the bus recorded when the caller connected, never read from /proc,
 * where a caller that execs a set-uid or set-gid program right after its call could pass for
 * someone else. */
static int sender_access(
	Bus *b, sd_bus_message *message, uid_t *ret_uid, SubscriptionAccess *ret_access, sd_bus_error *error) {
	_cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
	_cleanup_free_ gid_t *groups = NULL;
	const char *sender = sd_bus_message_get_sender(message);
	uid_t uid;
	int r, n = 0;

	r = sd_bus_query_sender_creds(message, SD_BUS_CREDS_EUID, &creds);
	if (r >= 0)
		r = sd_bus_creds_get_euid(creds, &uid);
	if (r < 0)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"Subscribe: the caller's user id could not be determined");
	if (uid != 0 && b->config->n_allow_groups > 0) {
		n = sender_groups(b, sender, &groups);
		if (n < 0) {
			/* Without the groups, AllowGroups= cannot grant more than the caller's own events. */
			log_debug_errno(
				n,
				"Subscribe from %s: no supplementary groups from the bus (%m), AllowGroups= does not apply",
				strna(sender));
			n = 0;
		}
	}
	_Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");
	*ret_uid = uid;
	*ret_access = filter_access(
		uid, (gid_t) -1, groups, (size_t) n, b->config->allow_groups, b->config->n_allow_groups);
	return 0;
}

static int subscriber_new(Bus *b, const char *sender, uid_t uid, Subscription *sub_in, BusSubscriber **ret) {
	_cleanup_(subscription_freep) Subscription *sub = sub_in;
	HubClientOptions o = {
		.format = HUB_FORMAT_JSON_TAGGED,
		.overflow = HUB_OVERFLOW_DROP,
		.queue_bytes = b->config->client_queue_bytes,
		.match = subscriber_match,
		.flush = subscriber_flush,
	};
	int r;
	BusSubscriber *s;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->bus = b;
	s->id = ++b->next_id;
	s->uid = uid;
	s->next = b->subscribers;
	if (b->subscribers)
		b->subscribers->prev = s;
	b->subscribers = s;
	b->n_subscribers++;

	if (asprintf(&s->path, BUS_MONITOR_PATH_PREFIX "/%" PRIu64, s->id) < 0) {
		s->path = NULL;
		subscriber_free(s);
		return -ENOMEM;
	}
	s->sender = strdup(sender);
	r = subscription_to_json(sub, &s->filter_text);
	if (!s->sender || r < 0) {
		subscriber_free(s);
		return -ENOMEM;
	}
	r = sd_event_add_time(b->event, &s->window_timer, CLOCK_MONOTONIC, 0, USEC_PER_MSEC, on_window_end, s);
	if (r >= 0)
		r = sd_event_source_set_enabled(s->window_timer, SD_EVENT_OFF);
	if (r >= 0)
		r = sd_bus_add_object_vtable(
			b->bus, &s->slot, s->path, BUS_INTERFACE_MONITOR, monitor_vtable, s);
	if (r >= 0)
		r = sd_bus_track_new(b->bus, &s->track, on_subscriber_gone, s);
	if (r >= 0)
		r = sd_bus_track_add_name(s->track, sender);
	if (r < 0) {
		subscriber_free(s);
		return r;
	}

	o.filter = sub;
	o.userdata = s;
	r = hub_client_new(manager_hub(b->manager), -EBADF, &o, &s->client);
	if (r < 0) {
		subscriber_free(s);
		return r;
	}
	s->sub = TAKE_PTR(sub);
	r = hub_client_attach(manager_hub(b->manager), s->client);
	if (r < 0) {
		subscriber_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

static int method_subscribe(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(subscription_freep) Subscription *sub = NULL;
	Bus *b = userdata;
	const char *sender = sd_bus_message_get_sender(message);
	SubscriptionAccess access = SUBSCRIPTION_ACCESS_NONE;
	BusSubscriber *s;
	size_t same_uid = 0;
	uid_t uid = (uid_t) -1;
	int r;

	if (!sender)
		return sd_bus_error_set(error, SD_BUS_ERROR_NOT_SUPPORTED, "Subscribe needs a bus connection");
	r = sender_access(b, message, &uid, &access, error);
	if (r < 0)
		return r;
	r = read_filter(b, message, &sub, error);
	if (r < 0)
		return r;

	for (BusSubscriber *i = b->subscribers; i; i = i->next)
		same_uid += i->uid == uid;
	if (b->n_subscribers >= b->config->max_clients)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_LIMITS_EXCEEDED,
			"The daemon serves at most %u bus subscribers at once (MaxClients=)",
			b->config->max_clients);
	if (same_uid >= b->config->max_clients_per_uid)
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_LIMITS_EXCEEDED,
			"uid %u has %zu bus subscribers already (MaxClientsPerUid=)",
			(unsigned) uid,
			same_uid);

	sub->access = access;
	sub->access_uid = uid;
	r = subscriber_new(b, sender, uid, TAKE_PTR(sub), &s);
	if (r < 0)
		return sd_bus_error_set_errnof(error, r, "Failed to set up the subscription: %m");
	log_debug(
		"Bus subscriber %s (uid %u) subscribed as %s, filter %s, access %s",
		sender,
		(unsigned) uid,
		s->path,
		s->filter_text,
		access == SUBSCRIPTION_ACCESS_ALL ? "all" : "own uid");
	return sd_bus_reply_method_return(message, "o", s->path);
}

static int method_unsubscribe(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	const char *path, *sender = sd_bus_message_get_sender(message);
	BusSubscriber *s;
	int r;

	r = sd_bus_message_read(message, "o", &path);
	if (r < 0)
		return r;
	for (s = b->subscribers; s; s = s->next)
		if (streq(s->path, path))
			break;
	if (!s)
		return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_OBJECT, "No monitor %s", path);
	/* Its subscriber, or root. */
	if (!sender || !streq(sender, s->sender)) {
		r = check_root(message, "Unsubscribing another connection's monitor", error);
		if (r < 0)
			return r;
	}
	log_debug("Bus subscriber %s unsubscribed %s", s->sender, s->path);
	subscriber_free(s);
	return sd_bus_reply_method_return(message, NULL);
}

/* GetStats() -------------------------------------------------------------------------------- */

/* One "{sv}" entry holding a uint64. */
static int append_t(sd_bus_message *m, const char *key, uint64_t v) {
	return sd_bus_message_append(m, "{sv}", key, "t", v);
}

/* Opens "{sv}" with a variant of `contents`; close with close_entry(). */
static int open_entry(sd_bus_message *m, const char *key, const char *contents) {
	int r = sd_bus_message_open_container(m, 'e', "sv");

	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', contents);
	return r;
}

static int close_entry(sd_bus_message *m) {
	int r = sd_bus_message_close_container(m);

	return r < 0 ? r : sd_bus_message_close_container(m);
}

/* "malformed_by_reason": a{st} of the reasons with a count. */
static int append_reasons(sd_bus_message *m, const uint64_t *by_reason) {
	int r = open_entry(m, "malformed_by_reason", "a{st}");

	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{st}");
	for (unsigned e = 1; r >= 0 && e < _DECODE_ERROR_MAX; e++)
		if (by_reason[e])
			r = sd_bus_message_append(m, "{st}", decode_error_to_string(e), by_reason[e]);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r < 0 ? r : close_entry(m);
}

/* The fields of one producer (or of the total) as {sv} entries of an open a{sv}. */
static int append_producer_fields(sd_bus_message *m, const ProducerSnapshot *p) {
	const struct {
		const char *key;
		uint64_t v;
	} f[] = {
		{ "attempts", p->attempts },
		{ "failures", p->failures },
		{ "failures_downtime", p->failures_downtime },
		{ "failures_serving", p->failures_serving },
		{ "received", p->received },
		{ "malformed", p->malformed },
		{ "crash_lost", p->crash_lost },
		{ "crash_lost_at_start", p->crash_lost_at_start },
		{ "seq_gaps", p->seq_gaps },
		{ "received_session", p->received_session },
		{ "malformed_session", p->malformed_session },
	};
	int r = 0;

	for (size_t i = 0; r >= 0 && i < ELEMENTSOF(f); i++)
		r = append_t(m, f[i].key, f[i].v);
	return r < 0 ? r : append_reasons(m, p->malformed_by_reason);
}

static int append_stats(sd_bus_message *m, const StatsSnapshot *s) {
	int r;

	r = sd_bus_message_open_container(m, 'a', "{sv}");

	/* producers: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "producers", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_producers; i++) {
		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(m, "{sv}", "id", "u", s->producers[i].id);
		if (r >= 0)
			r = append_producer_fields(m, &s->producers[i]);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* total: a{sv} */
	if (r >= 0)
		r = open_entry(m, "total", "a{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = append_producer_fields(m, &s->total);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* cpus: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "cpus", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_cpus; i++) {
		const CpuSnapshot *c = &s->cpus[i];

		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(m, "{sv}{sv}", "cpu", "u", c->cpu, "reader", "u", c->reader);
		if (r >= 0)
			r = append_t(m, "received", c->ring.received);
		if (r >= 0)
			r = append_t(m, "bytes", c->ring.bytes);
		if (r >= 0)
			r = append_t(m, "lost", c->ring.lost);
		if (r >= 0)
			r = append_t(m, "malformed", c->ring.malformed);
		if (r >= 0)
			r = append_t(m, "other", c->ring.other);
		if (r >= 0)
			r = append_t(m, "corrupt", c->ring.corrupt);
		if (r >= 0)
			r = append_t(m, "corrupt_bytes", c->ring.corrupt_bytes);
		if (r >= 0)
			r = append_t(m, "attempts", c->attempts);
		if (r >= 0)
			r = append_t(m, "failures", c->failures);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* readers: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "readers", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_readers; i++) {
		const ReaderSnapshot *rd = &s->readers[i];

		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(m, "{sv}{sv}", "id", "u", rd->id, "cpus", "s", rd->cpus);
		if (r >= 0)
			r = append_t(m, "events", rd->events);
		if (r >= 0)
			r = append_t(m, "wakeups", rd->wakeups);
		if (r >= 0)
			r = append_t(m, "batches", rd->batches);
		if (r >= 0)
			r = append_reasons(m, rd->malformed_by_reason);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* clients: a{sv} */
	if (r >= 0)
		r = open_entry(m, "clients", "a{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = append_t(m, "connected", s->clients_connected);
	if (r >= 0)
		r = append_t(m, "offered", s->clients_offered);
	if (r >= 0)
		r = append_t(m, "delivered", s->clients_delivered);
	if (r >= 0)
		r = append_t(m, "dropped", s->clients_dropped);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	/* client_list: aa{sv} */
	if (r >= 0)
		r = open_entry(m, "client_list", "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < s->n_clients; i++) {
		const ClientSnapshot *c = &s->clients[i];

		r = sd_bus_message_open_container(m, 'a', "{sv}");
		if (r >= 0)
			r = sd_bus_message_append(
				m, "{sv}{sv}{sv}", "id", "t", c->id, "uid", "u", c->uid, "pid", "u", c->pid);
		if (r >= 0)
			r = append_t(m, "offered", c->offered);
		if (r >= 0)
			r = append_t(m, "sent", c->sent);
		if (r >= 0)
			r = append_t(m, "dropped", c->dropped);
		if (r >= 0)
			r = append_t(m, "queued_bytes", c->queued_bytes);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_entry(m);

	if (r >= 0)
		r = append_t(m, "ring_lost", s->ring_lost);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

static int method_get_stats(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(stats_snapshot_freep) StatsSnapshot *s = NULL;
	Bus *b = userdata;
	int r;

	r = stats_snapshot(b->manager, &s);
	if (r < 0)
		return sd_bus_error_set_errnof(
			error, r, "Failed to read the counters under %s: %m", manager_pin_path(b->manager));
	r = sd_bus_message_new_method_return(message, &reply);
	if (r < 0)
		return r;
	r = append_stats(reply, s);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

/* The manager object --------------------------------------------------------------------- */

#define COUNTER_FLAGS SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE

/* clang-format off */
static const sd_bus_vtable manager_vtable[] = {
	SD_BUS_VTABLE_START(0),

	SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("State", "s", property_get_state, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	SD_BUS_PROPERTY("PinPath", "s", property_get_pin_path, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Cpus", "u", property_get_cpus, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Readers", "u", property_get_readers, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Probes", "as", property_get_probes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	/* The counters: PropertiesChanged from on_stats_timer(), at most once a second. */
	SD_BUS_PROPERTY("Clients", "u", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("EventsReceived", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("EventsDelivered", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("EventsLost", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("ProducerFailures", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("ClientDrops", "t", property_get_counter, 0, COUNTER_FLAGS),
	SD_BUS_PROPERTY("StartedAt", "t", property_get_started_at, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("KernelFeatures", "a(sbbss)", property_get_kernel_features, 0, SD_BUS_VTABLE_PROPERTY_CONST),

	SD_BUS_METHOD_WITH_NAMES("GetCpuStats",
	                         NULL, "",
	                         "a(uuttttttt)", SD_BUS_PARAM(cpus),
	                         method_get_cpu_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetReaderStats",
	                         NULL, "",
	                         "a(uauttt)", SD_BUS_PARAM(readers),
	                         method_get_reader_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("GetStats",
	                         NULL, "",
	                         "a{sv}", SD_BUS_PARAM(stats),
	                         method_get_stats, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("ListClients",
	                         NULL, "",
	                         "a(tuusttt)", SD_BUS_PARAM(clients),
	                         method_list_clients, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("ListProbes",
	                         NULL, "",
	                         "a(sbt)", SD_BUS_PARAM(probes),
	                         method_list_probes, SD_BUS_VTABLE_UNPRIVILEGED),
	/* UNPRIVILEGED only keeps sd-bus from applying its own CAP_SYS_ADMIN check: these three
	 * check the sender's uid themselves (check_root()). */
	SD_BUS_METHOD_WITH_NAMES("SetProbeEnabled",
	                         "sb", SD_BUS_PARAM(name) SD_BUS_PARAM(enabled),
	                         NULL, "",
	                         method_set_probe_enabled, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("DisconnectClient",
	                         "t", SD_BUS_PARAM(id),
	                         NULL, "",
	                         method_disconnect_client, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Reload",
	                         NULL, "",
	                         NULL, "",
	                         method_reload, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Subscribe",
	                         "a{sv}", SD_BUS_PARAM(filter),
	                         "o", SD_BUS_PARAM(monitor),
	                         method_subscribe, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Unsubscribe",
	                         "o", SD_BUS_PARAM(monitor),
	                         NULL, "",
	                         method_unsubscribe, SD_BUS_VTABLE_UNPRIVILEGED),

	SD_BUS_SIGNAL_WITH_NAMES("EventsLost", "ut", SD_BUS_PARAM(cpu) SD_BUS_PARAM(count), 0),

	SD_BUS_VTABLE_END
};
/* clang-format on */

/* Counters and loss, once a second ---------------------------------------------------------- */

static void bus_emit_events_lost(Bus *b) {
	Manager *m = b->manager;
	size_t idx = 0;

	for (size_t i = 0; i < manager_n_readers(m); i++) {
		const Reader *rd = manager_reader(m, i);

		for (size_t k = 0; k < reader_n_rings(rd) && idx < b->n_rings; k++, idx++) {
			uint64_t lost = STAT_LOAD(reader_cpu_stats(rd, k)->lost);
			uint32_t cpu = reader_slot_cpu(rd, k);
			int r;

			if (lost <= b->lost_signalled[idx])
				continue;
			r = sd_bus_emit_signal(
				b->bus,
				BUS_PATH,
				BUS_INTERFACE_MANAGER,
				"EventsLost",
				"ut",
				cpu,
				lost - b->lost_signalled[idx]);
			if (r < 0) {
				log_debug_errno(r, "Failed to emit EventsLost for CPU %u: %m", cpu);
				continue;
			}
			b->lost_signalled[idx] = lost;
		}
	}
}

static int on_stats_timer(sd_event_source *es, uint64_t usec, void *userdata) {
	Bus *b = userdata;
	ManagerCounters c;
	char *names[8];
	size_t n = 0;
	int r;

	if (manager_get_counters(b->manager, true, &c) < 0)
		c.producer_failures = b->last.producer_failures; /* unreadable now: not a change */
#define CHANGED(field, name)                        \
	do {                                        \
		if (c.field != b->last.field)       \
			names[n++] = (char *) name; \
	} while (0)
	CHANGED(clients, "Clients");
	CHANGED(events_received, "EventsReceived");
	CHANGED(events_delivered, "EventsDelivered");
	CHANGED(events_lost, "EventsLost");
	CHANGED(producer_failures, "ProducerFailures");
	CHANGED(client_drops, "ClientDrops");
#undef CHANGED
	names[n] = NULL;
	if (n > 0) {
		r = sd_bus_emit_properties_changed_strv(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, names);
		if (r < 0)
			log_debug_errno(r, "Failed to emit PropertiesChanged for the counters: %m");
		else
			b->last = c;
	}
	bus_emit_events_lost(b);

	r = sd_event_source_set_time_relative(es, STATS_INTERVAL_USEC);
	if (r >= 0)
		r = sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
	if (r < 0)
		log_warning_errno(
			r,
			"Failed to re-arm the D-Bus counter timer, counters no longer emit "
			"PropertiesChanged: %m");
	return 0;
}

/* Losing the bus ------------------------------------------------------------------------- */

static void bus_drop_subscribers(Bus *b) {
	while (b->subscribers)
		subscriber_free(b->subscribers);
}

static int on_bus_gone(sd_event_source *es, void *userdata) {
	Bus *b = userdata;

	bus_drop_subscribers(b);
	b->stats_timer = sd_event_source_disable_unref(b->stats_timer);
	b->gone_source = sd_event_source_disable_unref(b->gone_source);
	(void) sd_bus_detach_event(b->bus);
	return 0;
}

/* sd-bus reports a lost connection as a local Disconnected message. The cleanup cannot run in
 * sd-bus's own dispatch, so it is deferred. */
static int on_bus_message(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	Bus *b = userdata;
	int r;

	if (b->gone || !sd_bus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected"))
		return 0;
	b->gone = true;
	log_warning(
		"Lost the connection to the system bus: the D-Bus interface and its %zu subscribers are gone "
		"until perfrelayd restarts; the event socket keeps working",
		b->n_subscribers);
	r = sd_event_add_defer(b->event, &b->gone_source, on_bus_gone, b);
	if (r < 0)
		log_warning_errno(r, "Failed to schedule the D-Bus cleanup: %m");
	return 0;
}

/* Life cycle ------------------------------------------------------------------------------ */

int bus_new(Manager *m, sd_event *event, const Config *config, Bus **ret) {
	Bus *b;
	int r;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->manager = m;
	b->event = sd_event_ref(event);
	b->config = config;
	for (size_t i = 0; i < manager_n_readers(m); i++)
		b->n_rings += reader_n_rings(manager_reader(m, i));
	b->lost_signalled = calloc(b->n_rings ?: 1, sizeof(uint64_t));
	if (!b->lost_signalled) {
		bus_free(b);
		return -ENOMEM;
	}

	r = sd_bus_open_system(&b->bus);
	if (r < 0) {
		const char *address = getenv("DBUS_SYSTEM_BUS_ADDRESS");

		log_warning_errno(
			r,
			"Cannot connect to the system bus (%s): %m; running without D-Bus (no "
			"org.perfrelay1, no perfrelayctl status), the event socket works as usual",
			address ?: "unix:path=/run/dbus/system_bus_socket");
		bus_free(b);
		*ret = NULL;
		return 0;
	}
	(void) sd_bus_set_exit_on_disconnect(b->bus, false);

	r = sd_bus_add_filter(b->bus, NULL, on_bus_message, b);
	if (r >= 0)
		r = sd_bus_add_object_vtable(b->bus, NULL, BUS_PATH, BUS_INTERFACE_MANAGER, manager_vtable, b);
	if (r < 0) {
		bus_free(b);
		return log_error_errno(r, "Failed to publish %s on the system bus: %m", BUS_PATH);
	}
	r = sd_bus_attach_event(b->bus, event, SD_EVENT_PRIORITY_NORMAL);
	if (r < 0) {
		bus_free(b);
		return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
	}

	/* Synchronous: READY=1 follows, and by then the name must answer. */
	r = sd_bus_request_name(b->bus, BUS_NAME, 0);
	if (r < 0)
		log_warning_errno(
			r,
			"Failed to acquire the name %s on the system bus (%s): %m; the object is "
			"reachable only by the unique name. Is the bus policy %s installed, or is "
			"another perfrelayd running?",
			BUS_NAME,
			r == -EEXIST ? "another connection owns it" : "refused",
			"/usr/share/dbus-1/system.d/org.perfrelay1.conf");
	else
		log_info("Acquired %s on the system bus", BUS_NAME);

	(void) manager_get_counters(m, true, &b->last);
	for (size_t i = 0, idx = 0; i < manager_n_readers(m); i++)
		for (size_t k = 0; k < reader_n_rings(manager_reader(m, i)) && idx < b->n_rings; k++, idx++)
			b->lost_signalled[idx] = STAT_LOAD(reader_cpu_stats(manager_reader(m, i), k)->lost);
	r = sd_event_add_time_relative(
		event,
		&b->stats_timer,
		CLOCK_MONOTONIC,
		STATS_INTERVAL_USEC,
		10 * USEC_PER_MSEC,
		on_stats_timer,
		b);
	if (r < 0) {
		bus_free(b);
		return log_error_errno(r, "Failed to set up the D-Bus counter timer: %m");
	}
	*ret = b;
	return 0;
}

Bus *bus_free(Bus *b) {
	if (!b)
		return NULL;
	bus_drop_subscribers(b);
	sd_event_source_disable_unref(b->stats_timer);
	sd_event_source_disable_unref(b->gone_source);
	if (b->bus) {
		(void) sd_bus_detach_event(b->bus);
		sd_bus_flush_close_unref(b->bus);
	}
	sd_event_unref(b->event);
	free(b->lost_signalled);
	free(b);
	return NULL;
}

void bus_set_config(Bus *b, const Config *config) {
	if (!b)
		return;
	b->config = config;

	/* As on the socket: a group taken out of AllowGroups= takes along the access it gave.
	 * Such a monitor is removed (its events still queued count as dropped); the subscriber
	 * may subscribe again and then sees its own uid's events. */
	for (BusSubscriber *s = b->subscribers, *next; s; s = next) {
		_cleanup_free_ gid_t *groups = NULL;
		int n = 0;

		next = s->next;
		if (s->uid == 0 || s->sub->access != SUBSCRIPTION_ACCESS_ALL)
			continue;
		if (config->n_allow_groups > 0 && (n = sender_groups(b, s->sender, &groups)) < 0)
			n = 0;
		if (filter_access(
			    s->uid, (gid_t) -1, groups, (size_t) n, config->allow_groups, config->n_allow_groups) ==
		    SUBSCRIPTION_ACCESS_ALL)
			continue;
		log_info(
			"Bus subscriber %s (%s, uid %u): AllowGroups= no longer grants it every event, removing it",
			s->path,
			s->sender,
			(unsigned) s->uid);
		subscriber_free(s);
	}
}

void bus_emit_state_changed(Bus *b) {
	if (b && !b->gone)
		(void) sd_bus_emit_properties_changed(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, "State", NULL);
}

void bus_emit_probes_changed(Bus *b) {
	if (b && !b->gone)
		(void) sd_bus_emit_properties_changed(b->bus, BUS_PATH, BUS_INTERFACE_MANAGER, "Probes", NULL);
}

void bus_flush(Bus *b) {
	if (b && !b->gone)
		(void) sd_bus_flush(b->bus);
}

void bus_get_stats(const Bus *b, BusStats *ret) {
	BusStats st = {};

	if (b) {
		st.subscribers = b->n_subscribers;
		st.delivered = b->gone_delivered;
		st.dropped = b->gone_dropped;
		for (const BusSubscriber *s = b->subscribers; s; s = s->next) {
			HubClientStats hs;

			st.delivered += s->delivered;
			st.dropped += s->dropped;
			if (s->client) {
				hub_client_get_stats(s->client, &hs);
				st.dropped += hs.dropped;
			}
		}
	}
	*ret = st;
}
