"""A cluster's `ha:` section: `kind` names the HA manager, whose own model (`Config`, a subclass of
`HaConfig` in its module of `chaoskit/ha/`) validates the rest, and which engines it manages. The
inventory finds those models by plugin discovery (`chaoskit.plugins`), so it reads the managers'
settings without depending on the managers: a new manager is still its module alone."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError, model_validator
from pydantic_core import PydanticUndefined

from chaoskit.models import Frozen
from chaoskit.plugins import Plugins
from chaoskit.secrets import refuse_secret_fields


class HaConfig(Frozen):
    """Base of every manager's inventory section; `kind` picks the manager."""

    kind: str
    engines: ClassVar[frozenset[str]] = frozenset({"postgres", "mysql", "dameng"})  # what it can manage

    def members_error(self, hosts: list[str]) -> str | None:
        """What is wrong with these settings for a cluster of these member hosts (a manager that
        names its members, as DM's instance names do); None when nothing is."""
        return None

    @model_validator(mode="before")
    @classmethod
    def _credentials_by_reference(cls, data: Any) -> Any:
        """A manager setting named like a secret takes a reference only, whatever its type says."""
        return refuse_secret_fields(data)


def _kind(config: type[HaConfig]) -> str | None:
    default = config.model_fields["kind"].default
    return None if default is PydanticUndefined else default


HA_CONFIGS: Plugins[type[HaConfig]] = Plugins("chaoskit.ha", HaConfig, _kind, "HA manager", skip=("base", "registry"))


def validate_config(value: Any) -> HaConfig:
    """The manager's own config model from an inventory's `ha:` mapping; errors as ValueError
    naming the field inside `ha`."""
    if isinstance(value, HaConfig):
        return value
    if value is None:
        value = {"kind": "none"}
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping with kind (e.g. {kind: patroni})")
    config = HA_CONFIGS.get(value.get("kind"))  # UnknownPlugin is a ValueError naming the known ones
    try:
        return config.model_validate(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}: {msg}" if where else msg) from None
