/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reload (SIGHUP, Reload()): what a running daemon can change. */
#include <stdio.h>
#include <stdlib.h>

#include "perfrelay-config.h"

#include "base/log.h"
#include "core/manager-internal.h"
#include "core/stats.h"
#include "time-util.h"

int manager_reload(Manager *m, char **ret_error) {
	_cleanup_(config_freep) Config *c = NULL;
	_cleanup_free_ char *error = NULL, *restart = NULL;
	Config *old;
	ApiOptions api;
	int r;

	log_info("Reloading configuration from %s and %s/", m->o.config_path, m->dropin_dir);
	r = config_new(m->config_parts, m->n_config_parts, &c);
	if (r < 0)
		return log_error_errno(r, "Failed to allocate a configuration: %m");
	r = config_load(c, m->o.config_path, m->dropin_dir, &error);
	if (r < 0) {
		if (!error) {
			errno = -r;
			if (asprintf(&error, "%s: %m", m->o.config_path) < 0)
				return log_oom();
		}
		log_error("Reload failed, keeping the previous configuration: %s", error);
		if (ret_error)
			*ret_error = TAKE_PTR(error);
		return r;
	}
	if (m->o.pin_path) {
		/* --pin-path wins over PinPath= as it did at start. */
		char *p = strdup(m->o.pin_path);

		if (!p)
			return -ENOMEM;
		free(c->pin_path);
		c->pin_path = p;
	}
	r = config_keep_restart_keys(c, m->config, &restart);
	if (r < 0)
		return log_error_errno(r, "Failed to compare the configurations: %m");

	old = m->config;
	m->config = TAKE_PTR(c);
	api = manager_api_options(m->config);
	server_set_options(m->server, &api);
	bus_set_options(m->bus, &api);
	config_free(old); /* the old options' group lists with it: both were just replaced */

	if (restart)
		log_warning(
			"Reload: changes to %s take effect only after a restart "
			"(systemctl restart perfrelay)",
			restart);

	r = manager_features_reload(m);
	if (r < 0)
		/* The feature logged what failed; the rest is applied all the same. */
		return r;
	log_info("Reloaded configuration");
	return 0;
}
