# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Build once, install everywhere: which node builds each fingerprint and which install the result. Pure."""

from __future__ import annotations


def fanout_roles(plans, offline=False):
    """plans: [{host, fingerprint, needs, cached}] in play order (needs: the node lacks this build; cached: the
    controller cache holds it). Returns {host: role}:

      none  - nothing to do here;
      cache - install the cached build;
      build - build it (the first node that needs an uncached fingerprint), and export it to the cache;
      wait  - another node of this run builds it; install from the cache after.

    offline: nothing may be built; a needed, uncached fingerprint is an error (ValueError naming the hosts).
    """
    roles, builders, missing = {}, {}, []
    for plan in plans:
        host, fp = plan["host"], plan.get("fingerprint")
        if not plan.get("needs"):
            roles[host] = "none"
        elif plan.get("cached"):
            roles[host] = "cache"
        elif offline:
            missing.append("%s (fingerprint %s)" % (host, fp))
        elif fp in builders:
            roles[host] = "wait"
        else:
            builders[fp] = host
            roles[host] = "build"
    if missing:
        raise ValueError("offline: the cache lacks the build %s need(s); build it once on a connected node with the "
                         "same inputs (same deepep_cache_dir), or carry that artifact in" % ", ".join(missing))
    return roles
