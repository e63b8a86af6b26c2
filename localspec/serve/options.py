"""How the server was asked to run, and the one rule about where it may listen."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from localspec.catalog.models_toml import Pair
from localspec.engine.drafters import registry
from localspec.engine.errors import EngineError
from localspec.errors import UsageError
from localspec.session.generation_request import Asked

LOOPBACK_NAMES = ("localhost",)
MAX_PARALLEL = 64
DEFAULT_PARALLEL = 4  # measured: the README's "Several clients at once" says why


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    alias: str = "localspec"
    drafter: str = registry.DEFAULT
    draft_max: int | None = None  # None: the drafter's default (auto's cap, else the pair's K, else llama.cpp's)
    draft_p_min: float | None = None  # None: the pair's, else the default
    pair: Pair | None = None  # the catalog's pair served (--pair): its recommended K and p-min
    insecure_no_api_key: bool = False  # the user's explicit choice to listen beyond this machine without a key
    parallel: int = 1  # slots: requests generated at once, batched together

    @property
    def standing(self) -> Asked:
        """What a request that says nothing of speculation gets (the request resolver layers requests over it)."""
        return Asked(drafter=self.drafter, draft_max=self.draft_max, draft_p_min=self.draft_p_min)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_parallel(options: ServeOptions) -> None:
    """Several slots share one batch, which runs the drafters that need no sequence of their own."""
    if not 1 <= options.parallel <= MAX_PARALLEL:
        raise UsageError(f"--parallel {options.parallel} is out of range: it takes a whole number from 1 to {MAX_PARALLEL}.")
    if options.parallel > 1:
        refuse_unbatchable(options.drafter)


def refuse_unbatchable(drafter: str) -> None:
    """A UsageError, in the registry's words, for a drafter several slots cannot run together (at start, per request)."""
    try:
        registry.check_batchable(drafter)
    except EngineError as exc:
        raise UsageError(str(exc)) from None


def check_bind(options: ServeOptions) -> None:
    """Anything reachable from another machine needs a key, unless the user says, by name, that it is insecure."""
    if is_loopback(options.host) or options.api_key or options.insecure_no_api_key:
        return
    raise UsageError(
        f"--host {options.host} would let other machines use this server, and no --api-key is set. Give --api-key KEY "
        "(clients then send 'Authorization: Bearer KEY'), keep the default --host 127.0.0.1, or, on a network you "
        "trust, add --insecure-no-api-key."
    )
