# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Build once, install everywhere: which node builds each fingerprint and which install the result. Pure."""

from __future__ import annotations


def fanout_roles(plans, offline=False):
    """plans: [{host, fingerprint, needs, cached}] in play order (needs: the node lacks this build; cached: the
    controller cache holds it). Returns {host: role}:

      none   - nothing to do here;
      export - nothing to build here, but the cache lacks this node's build and no node of this run builds it:
               the one node (the first) that exports it to the cache;
      cache  - install the cached build;
      build  - build it (the first node that needs an uncached fingerprint), and export it to the cache;
      wait   - another node of this run builds it; install from the cache after.

    One node at most exports a fingerprint (build or export): the controller records the digest of what it
    fetched from that node, and the other nodes install only what matches it.

    offline: nothing may be built; a needed, uncached fingerprint is an error (ValueError naming the hosts).
    """
    roles, builders, missing = {}, {}, []
    cached = set(plan.get("fingerprint") for plan in plans if plan.get("cached"))
    built = set(plan.get("fingerprint") for plan in plans if plan.get("needs")) - cached
    for plan in plans:
        host, fp = plan["host"], plan.get("fingerprint")
        if not plan.get("needs"):
            exports = fp and fp not in cached and fp not in built and fp not in builders
            roles[host] = "export" if exports else "none"
            if exports:
                builders[fp] = host
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


ROLE_ORDER = ("build", "export", "wait", "cache", "none")
NO_FINGERPRINT = "(fingerprint known once the source is on the node)"


def fanout_lines(roles, fingerprints, label):
    """{host: role} (fanout_roles'), {host: fingerprint} -> one line per fingerprint, in play order: which host
    builds or exports it, which install it after (wait) or from the cache, and where it is up to date (none)."""
    groups = {}
    for host, role in roles.items():
        groups.setdefault(fingerprints.get(host) or NO_FINGERPRINT, {}).setdefault(role, []).append(host)
    return ["%s %s: %s" % (label, fingerprint, "; ".join(
        "%s %s" % (role, ", ".join(by_role[role])) for role in ROLE_ORDER if role in by_role))
        for fingerprint, by_role in groups.items()]
