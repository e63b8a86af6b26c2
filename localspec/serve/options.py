"""How the server was asked to run, and the one rule about where it may listen."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from localspec.engine import defaults
from localspec.engine.drafters import registry
from localspec.errors import UsageError

LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    alias: str = "localspec"
    drafter: str = registry.DEFAULT
    draft_max: int | None = None  # None: the drafter's default (auto's cap, else llama.cpp's K)
    draft_p_min: float = defaults.DRAFT_P_MIN
    insecure_no_api_key: bool = False  # the user's explicit choice to listen beyond this machine without a key


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(options: ServeOptions) -> None:
    """Anything reachable from another machine needs a key, unless the user says, by name, that it is insecure."""
    if is_loopback(options.host) or options.api_key or options.insecure_no_api_key:
        return
    raise UsageError(
        f"--host {options.host} would let other machines use this server, and no --api-key is set. Give --api-key KEY "
        "(clients then send 'Authorization: Bearer KEY'), keep the default --host 127.0.0.1, or, on a network you "
        "trust, add --insecure-no-api-key."
    )
