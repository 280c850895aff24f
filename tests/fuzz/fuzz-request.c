/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fuzzes the client request parser: any bytes a client can send as its request line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hub/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	static const RequestLimits limits[] = { { 65536, 8 }, { 256, 2 }, { 1u << 20, 64 } };
	const RequestLimits *l = &limits[size % 3];
	Subscription *s = NULL;
	RequestError e;
	int r;

	memset(&e, 0x5a, sizeof(e));
	r = request_parse((const char *) data, size, l, &s, &e);
	if (r >= 0) {
		if (!s || s->n_types > SUBSCRIPTION_MAX_ENTRIES || s->n_pids > SUBSCRIPTION_MAX_ENTRIES ||
		    s->n_uids > SUBSCRIPTION_MAX_ENTRIES || s->n_comms > SUBSCRIPTION_MAX_ENTRIES ||
		    s->n_units > SUBSCRIPTION_MAX_ENTRIES)
			abort();
		for (size_t i = 0; i < s->n_comms; i++)
			if (strnlen(s->comms[i], sizeof(s->comms[i])) > SUBSCRIPTION_COMM_MAX)
				abort();
		subscription_free(s);
	} else {
		/* Every refusal carries a code with a name and a terminated one-line message. */
		if (!protocol_error_to_string(e.code) || e.code == PROTOCOL_OK ||
		    !memchr(e.message, '\0', sizeof(e.message)) || strchr(e.message, '\n'))
			abort();
	}
	return 0;
}
