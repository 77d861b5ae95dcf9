"""The nodes' side of a directory (spec identity.directory): SSSD's files and their sizing.

One place for the artifact paths, the bind-password placeholder the roles fill in, and how
a cache outlives the directory, so that the renderer, the common role and the tests agree.
"""
from __future__ import annotations

from estate.model import bridge

SSSD_CONF = "common/sssd/sssd.conf"
NSSWITCH = "common/nsswitch.conf"
# Login nodes only: the pam-auth-update profiles to enable (people log in there, nowhere
# else; the other nodes resolve names through NSS but keep PAM to local accounts).
PAM_PROFILES = "common/sssd/pam-profiles"
DOMAIN = "directory"                 # the [domain/...] section's name
# The bind password never enters the rendered tree, and sssd.conf stays byte for byte the
# rendered one (estate verify compares it): the common role writes the password into a
# snippet that SSSD merges into the domain's section (sssd.conf(5), "SNIPPET FILES": root's,
# 0600, *.conf), from the secrets directory's file that BIND names.
BIND = "common/sssd/bind.json"
BIND_DROPIN = "/etc/sssd/conf.d/estate-bind.conf"


def bind_doc(secret_file: str) -> dict:
    return {"secret_file": secret_file, "dropin": BIND_DROPIN, "section": f"domain/{DOMAIN}",
            "key": "ldap_default_authtok"}


ESTATE_CA = bridge.TLS_CA            # identity.directory.ca: estate
ESTATE_CA_SECRET = bridge.CA_CERT    # ...installed from the secrets directory's ca.crt


def ca_path(directory) -> str:
    return ESTATE_CA if directory.ca == "estate" else directory.ca


def cache_sizing(offline_hours: int) -> dict[str, int]:
    """sssd.conf's cache settings for a node that loses the directory for offline_hours.

    Offline, SSSD answers from its cache whatever the entries' age, and logs people in with
    cached credentials until offline_credentials_expiration (whole days). The entries also
    stay valid (not merely cached) for the outage plus half an hour, and are refreshed in
    the background at three quarters of that, so a user seen in the last hour before the
    outage never waits on a dead server's timeout."""
    entry = offline_hours * 3600 + 1800
    return {"entry_timeout": entry, "refresh_interval": entry * 3 // 4,
            "offline_days": -(-offline_hours // 24)}
