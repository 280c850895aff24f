/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A pcapng writer (the IETF draft "PCAP Now Generic", as Wireshark and tcpdump read it): the
 * section header, interface descriptions, enhanced packet blocks and interface statistics,
 * written to a stdio stream in the host's byte order (the section header says which).
 * Timestamps are nanoseconds since the epoch (if_tsresol 9). Pure apart from the writes. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#define PCAPNG_LINKTYPE_ETHERNET 1u   /* packets start with their Ethernet header */
#define PCAPNG_LINKTYPE_RAW      101u /* packets start with their IPv4 or IPv6 header */

int pcapng_write_shb(FILE *f, const char *application);
/* name and comment may be NULL. */
int pcapng_write_idb(FILE *f, uint16_t linktype, uint32_t snaplen, const char *name, const char *comment);
int pcapng_write_epb(
	FILE *f, uint32_t interface, uint64_t ts_ns, const void *data, uint32_t caplen, uint32_t origlen);
/* isb_starttime, isb_endtime, and isb_ifrecv (packets the source saw) and isb_ifdrop (those
 * lost) unless NULL: an option left out is unknown, where 0 would claim nothing was seen. */
int pcapng_write_isb(
	FILE *f,
	uint32_t interface,
	uint64_t ts_ns,
	uint64_t start_ns,
	uint64_t end_ns,
	const uint64_t *ifrecv,
	const uint64_t *ifdrop);
