"""Work sharding on the group protocol: the built-in :class:`WorkSharding`.

A set of named resources (tenants, shards, cron jobs, ...) is spread across the members:
balanced (counts differ by at most one), sticky (a member keeps what it has, up to its
share) and, by default, cooperative (a rebalance moves only what must move; the rest keeps
running). Each member advertises the resources it knows; the leader shares out the union,
so a resource is sharded while at least one member lists it. To add or remove resources at
runtime, call :meth:`WorkSharding.set_resources` on every member (each then rejoins; see
its docstring).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .._errors import ConfigError, RemoteProtocolError
from ._assignors import RebalanceProtocol
from ._consumer_protocol import Reader, pack_int32, write_string
from ._group_protocol import GroupProtocol, ProtocolAssignment, ProtocolMember, balanced_sticky

__all__ = ["WorkSharding"]


def _check(resources: Iterable[str]) -> frozenset[str]:
    items = frozenset(resources)
    for r in items:
        if not isinstance(r, str) or not r:
            raise ConfigError("resources", f"resource names must be non-empty strings, got {r!r}")
    return items


class WorkSharding(GroupProtocol):
    """Share ``resources`` out among the members (see the module docstring).

    What this member holds: ``member.assignment`` (resource names), with the listener's
    ``on_partitions_assigned`` / ``_revoked`` / ``_lost`` called with resource names.
    ``cooperative`` (default True) keeps resources running through rebalances."""

    protocol_type = "kgroup-shards"
    name = "balanced-sticky"

    def __init__(self, resources: Iterable[str], *, cooperative: bool = True) -> None:
        self.resources = _check(resources)
        self.rebalance_protocol = (
            RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER
        )

    def set_resources(self, resources: Iterable[str]) -> bool:
        """Replace this member's resource list; True when it changed. Then call
        ``member.enforce_rebalance(...)`` so the group shares out the new set (the member's
        next JoinGroup advertises it)."""
        new = _check(resources)
        changed = new != self.resources
        self.resources = new
        return changed

    def metadata(self) -> bytes:
        out = bytearray()
        ordered = sorted(self.resources)
        out += pack_int32(len(ordered), "resources count")
        for i, name in enumerate(ordered):
            write_string(out, name, f"resources[{i}]", nullable=False)
        return bytes(out)

    def assign(self, members: Sequence[ProtocolMember]) -> Mapping[str, ProtocolAssignment]:
        universe: set[str] = set()
        for m in members:
            try:
                universe.update(
                    Reader(m.metadata, "WorkSharding metadata").string_array("resources")
                )
            except RemoteProtocolError:
                continue  # a member whose list we cannot read contributes none
        shares = balanced_sticky(universe, members)
        return {mid: ProtocolAssignment(items) for mid, items in shares.items()}

    def __repr__(self) -> str:
        return f"WorkSharding({len(self.resources)} resources, {self.rebalance_protocol.name})"
