/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the fuzzers of the record writers (fuzz-encode.c, fuzz-export.c) share: a built-in record
 * filled with fuzz bytes, made valid where the decoder insists (strings terminated, argv and
 * ancestors in bounds), so that the target is the writer; the decoder has its own fuzzer. */
#pragma once

#include <stdint.h>

#include "event.h"

static inline void fuzz_record_make_valid(uint8_t *rec, uint16_t type) {
	switch (type) {
	case PERFRELAY_TYPE_EXEC: {
		struct perfrelay_exec *e = (struct perfrelay_exec *) rec;

		e->comm[sizeof(e->comm) - 1] = e->filename[sizeof(e->filename) - 1] =
			e->argv[sizeof(e->argv) - 1] = 0;
		e->argv_len %= PERFRELAY_ARGV_LEN + 1;
		if (e->argv_len)
			e->argv[e->argv_len - 1] = 0;
		e->n_ancestors %= PERFRELAY_ANCESTORS_MAX + 1;
		for (unsigned i = 0; i < PERFRELAY_ANCESTORS_MAX; i++)
			e->ancestors[i].comm[PERFRELAY_COMM_LEN - 1] = 0;
		e->exe[sizeof(e->exe) - 1] = e->cwd[sizeof(e->cwd) - 1] = 0;
		break;
	}
	case PERFRELAY_TYPE_EXIT:
		((struct perfrelay_exit *) rec)->comm[PERFRELAY_COMM_LEN - 1] = 0;
		break;
	case PERFRELAY_TYPE_FORK:
		((struct perfrelay_fork *) rec)->comm[PERFRELAY_COMM_LEN - 1] = 0;
		break;
	case PERFRELAY_TYPE_OPEN: {
		struct perfrelay_open *e = (struct perfrelay_open *) rec;

		e->comm[sizeof(e->comm) - 1] = e->path[sizeof(e->path) - 1] = 0;
		break;
	}
	case PERFRELAY_TYPE_CONNECT:
		((struct perfrelay_connect *) rec)->comm[PERFRELAY_COMM_LEN - 1] = 0;
		break;
	}
}
