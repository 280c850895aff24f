/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Subscribe() and Unsubscribe(): each subscription is an org.perfrelay1.Monitor object and a hub
 * client whose events the main thread takes from the hub (hub_client_consume()) and sends to
 * the subscriber as Event signals, at most BusEventsPerSecond= a second, drops told in Dropped. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/bus-internal.h"
#include "decode/decode.h"
#include "hub/filter.h"
#include "base/log.h"

/* Subscriptions ----------------------------------------------------------------------------- */

static bool subscriber_match(
	const void *filter, const DecodedEvent *ev, const HubOrigin *origin, Lineage *lineage) {
	return filter_match_in(filter, ev, origin->unit, origin->container, lineage);
}

static bool subscriber_wants_types(const void *filter, const uint16_t *types, size_t n, bool third_party) {
	return filter_wants_types(filter, types, n, third_party);
}

static BusSubscriber *subscriber_free(BusSubscriber *s) {
	Bus *b;

	if (!s)
		return NULL;
	b = s->bus;
	if (s->client) {
		HubClientStats st;

		/* After this no reader touches the client or its subscription. */
		hub_client_detach(b->hub, s->client);
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
	if (s->charged)
		users_release(b->users, s->uid, s->pooled, 1, s->charged_bytes);
	subscription_free(s->sub);
	sd_event_source_disable_unref(s->window_timer);
	sd_bus_slot_unref(s->slot);
	sd_bus_track_unref(s->track);
	free(s->filter_text);
	free(s->sender);
	free(s->path);
	LIST_REMOVE(subscribers, b->subscribers, s);
	b->n_subscribers--;
	free(s);
	return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(BusSubscriber *, subscriber_free);

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
	if (!ratelimit_window_over(&s->rate, now))
		return;
	subscriber_send_dropped(s, now);
	ratelimit_start(&s->rate, now, s->bus->o.bus_events_per_second);
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
	subscriber_arm_window_timer(s, MAX(ratelimit_end(&s->rate), s->dropped_at + RATE_WINDOW_USEC));
}

/* One frame the hub hands over: an event, or a notice of events dropped in the hub queue. */
static void subscriber_frame(const HubFrame *f, void *userdata) {
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
	BusSubscriber *s = userdata;
	const char *type;
	int r;

	if (f->type == PERFRELAY_TYPE_LOST && f->notice) {
		/* Records lost upstream (docs/protocol.md): an Event of type "lost" carrying the
		 * notice, outside the events' rate (at most a few a second) and not one of them. */
		r = subscriber_signal(s, &msg, "Event");
		if (r >= 0)
			r = sd_bus_message_append(msg, "sts", "lost", UINT64_C(0), f->line);
		if (r >= 0)
			r = sd_bus_send(s->bus->bus, msg, NULL);
		if (r < 0)
			log_debug_errno(r, "Bus subscriber %s: failed to send a notice: %m", s->path);
		return;
	}
	if (f->type == PERFRELAY_TYPE_LOST) {
		/* Dropped in the hub queue: already in the hub client's stats, told here. */
		subscriber_drop(s, f->value);
		return;
	}

	subscriber_refill(s, bus_now(s->bus));
	if (s->rate.left == 0) {
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
	(void) ratelimit_take(&s->rate);
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

/* A monitor's properties are its subscriber's and root's: its filter says what it watches, and
 * its counters, polled, give the rate of its events (another user's activity, or the moments a
 * watched process acts). The denial names neither the owner nor its uid. */
static int monitor_check_viewer(sd_bus *bus, const BusSubscriber *s, sd_bus_error *error) {
	sd_bus_message *call = sd_bus_get_current_message(bus);

	if (!call || !bus_viewer_sees(bus_viewer(call), s->uid))
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_ACCESS_DENIED,
			"The properties of %s are for its subscriber and root",
			s->path);
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
	int r;

	/* A subscriber's filter (the pids, comms and units it watches) is its business and root's. */
	r = monitor_check_viewer(bus, s, error);
	if (r < 0)
		return r;
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
	int r;

	r = monitor_check_viewer(bus, s, error);
	if (r < 0)
		return r;
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

static int subscriber_new(
	Bus *b,
	const char *sender,
	uid_t uid,
	Subscription *sub_in,
	UsersRefusal *ret_refusal,
	BusSubscriber **ret) {
	_cleanup_(subscription_freep) Subscription *sub = sub_in;
	HubClientOptions o = {
		.format = HUB_FORMAT_JSON_TAGGED,
		.overflow = HUB_OVERFLOW_DROP,
		.queue_bytes = b->o.client_queue_bytes,
		.match = subscriber_match,
		.wants_types = subscriber_wants_types,
		.flush = subscriber_flush,
		.redact = sub->access != SUBSCRIPTION_ACCESS_ALL,
		.redact_uid = uid,
		.demand = subscription_demand(sub),
	};
	_cleanup_(subscriber_freep) BusSubscriber *s = NULL;
	UsersLimits limits;
	uint64_t bytes;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->bus = b;
	s->id = ++b->next_id;
	s->rate.interval = RATE_WINDOW_USEC;
	s->uid = uid;
	LIST_PREPEND(subscribers, b->subscribers, s);
	b->n_subscribers++;

	if (asprintf(&s->path, BUS_MONITOR_PATH_PREFIX "/%" PRIu64, s->id) < 0) {
		s->path = NULL;
		return -ENOMEM;
	}
	s->sender = strdup(sender);
	r = subscription_to_json(sub, &s->filter_text);
	if (!s->sender || r < 0)
		return -ENOMEM;
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
	if (r < 0)
		return r;

	o.filter = sub;
	o.userdata = s;
	r = hub_client_new(b->hub, -EBADF, &o, &s->client);
	if (r < 0)
		return r;
	/* A monitor is a client of its uid like a socket connection: one count, its queues. */
	limits = b->o.users;
	bytes = hub_client_capacity(s->client);
	s->pooled = sub->access != SUBSCRIPTION_ACCESS_ALL;
	r = users_charge(b->users, &limits, uid, s->pooled, 1, bytes, ret_refusal);
	if (r < 0)
		return r;
	s->charged = true;
	s->charged_bytes = bytes;
	s->sub = TAKE_PTR(sub);
	r = hub_client_attach(b->hub, s->client);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(s);
	return 0;
}

static int method_subscribe(sd_bus_message *message, void *userdata, sd_bus_error *error) {
	_cleanup_(subscription_freep) Subscription *sub = NULL;
	Bus *b = userdata;
	const char *sender = sd_bus_message_get_sender(message);
	SubscriptionAccess access = SUBSCRIPTION_ACCESS_NONE;
	UsersRefusal refusal = _USERS_REFUSAL_MAX;
	BusSubscriber *s;
	uid_t uid = (uid_t) -1;
	int r;

	if (!sender)
		return sd_bus_error_set(error, SD_BUS_ERROR_NOT_SUPPORTED, "Subscribe needs a bus connection");
	r = bus_sender_access(b, message, &uid, &access, error);
	if (r < 0)
		return r;
	r = bus_read_filter(b, message, NULL, NULL, &sub, error);
	if (r < 0)
		return r;

	sub->access = access;
	sub->access_uid = uid;
	r = subscriber_new(b, sender, uid, TAKE_PTR(sub), &refusal, &s);
	if (r == -EDQUOT) {
		unsigned clients;
		uint64_t bytes;

		users_get(b->users, uid, &clients, &bytes);
		return sd_bus_error_setf(
			error,
			SD_BUS_ERROR_LIMITS_EXCEEDED,
			"uid %u holds %u clients and %" PRIu64
			" bytes of event queues, on the socket and the bus; "
			"one more passes %s",
			(unsigned) uid,
			clients,
			bytes,
			users_refusal_to_string(refusal));
	}
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
	BusSubscriber *s = NULL;
	int r;

	r = sd_bus_message_read(message, "o", &path);
	if (r < 0)
		return r;
	LIST_FOREACH(subscribers, i, b->subscribers)
		if (streq(i->path, path)) {
			s = i;
			break;
		}
	if (!s)
		return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_OBJECT, "No monitor %s", path);
	/* Its subscriber, or root. */
	if (!sender || !streq(sender, s->sender)) {
		r = bus_check_root(message, "Unsubscribing another connection's monitor", error);
		if (r < 0)
			return r;
	}
	log_debug("Bus subscriber %s unsubscribed %s", s->sender, s->path);
	subscriber_free(s);
	return sd_bus_reply_method_return(message, NULL);
}

void bus_monitors_free_all(Bus *b) {
	while (b->subscribers)
		subscriber_free(b->subscribers);
}

void bus_monitors_revoke(Bus *b) {
	const ApiOptions *config = &b->o;

	/* As on the socket: a group taken out of AllowGroups= takes along the access it gave.
	 * Such a monitor is removed (its events still queued count as dropped); the subscriber
	 * may subscribe again and then sees its own uid's events. */
	LIST_FOREACH(subscribers, s, b->subscribers) {
		_cleanup_free_ gid_t *groups = NULL;
		int n = 0;

		if (s->uid == 0 || s->sub->access != SUBSCRIPTION_ACCESS_ALL)
			continue;
		if (config->allow_groups.n + config->control_groups.n > 0 &&
		    (n = bus_sender_groups(b, s->sender, &groups)) < 0)
			n = 0;
		if (filter_access(
			    s->uid, (gid_t) -1, groups, (size_t) n, &config->allow_groups, &config->control_groups) ==
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

void bus_monitors_add_stats(const Bus *b, BusStats *st) {
	LIST_FOREACH(subscribers, s, b->subscribers) {
		HubClientStats hs;

		st->delivered += s->delivered;
		st->dropped += s->dropped;
		if (s->client) {
			hub_client_get_stats(s->client, &hs);
			st->dropped += hs.dropped;
		}
	}
}

/* clang-format off */
const sd_bus_vtable bus_monitor_manager_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("Subscribe",
	                         "a{sv}", SD_BUS_PARAM(filter),
	                         "o", SD_BUS_PARAM(monitor),
	                         method_subscribe, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Unsubscribe",
	                         "o", SD_BUS_PARAM(monitor),
	                         NULL, "",
	                         method_unsubscribe, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
/* clang-format on */
