"""No HA manager: the members' roles come from SQL only, nothing fails over by itself, and there
is no detection signal (T_detect is null with that reason, never invented)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from chaoskit.db.roles import sql_roles
from chaoskit.ha.base import DOWN, LEADER, REPLICA, HaConfig, HAManager, MemberView


class NoneConfig(HaConfig):
    kind: Literal["none"] = "none"


class NoManager(HAManager):
    kind = "none"
    Config = NoneConfig
    observable: ClassVar[bool] = False

    def members(self) -> list[MemberView]:
        return sql_member_views(self.cluster, self.inventory)


def sql_member_views(cluster: Any, inventory: Any) -> list[MemberView]:
    """Each member's role as the server itself says (writable: leader), for a cluster without a
    manager (MHA asks the same of each server on its kept sessions, `HAManager.sessions`)."""
    return [sql_member_view(member, role, error) for member, (role, error) in sql_roles(cluster, inventory).items()]


def sql_member_view(member: str, role: str, error: str | None) -> MemberView:
    """A member's view from the server's own answer (primary | replica | down)."""
    mapped = LEADER if role == "primary" else REPLICA if role == "replica" else DOWN
    return MemberView(member, mapped, state=role, error=error)
