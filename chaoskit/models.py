"""Base for every boundary model: frozen, no unknown fields, finite numbers, no control characters.

`replace()` is the only way to derive a changed copy: it validates again (pydantic's `model_copy`
does not, which once let a fault TTL of 999999 h through to a host's dead-man).
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, model_validator

from chaoskit.validation import free_text, no_control


def _allows_newlines(model: type[BaseModel], name: str) -> bool:
    info = model.model_fields[name]
    return any(getattr(m, "func", None) is free_text for m in info.metadata)


def _check_strings(value: Any, path: str) -> None:
    if isinstance(value, str):
        try:
            no_control(value)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_strings(k, path)
            _check_strings(v, f"{path}.{k}")
    elif isinstance(value, list | tuple | set | frozenset):
        for i, v in enumerate(value):
            _check_strings(v, f"{path}[{i}]")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="after")
    def _no_control_characters(self) -> Self:
        """Belt and braces: whatever type a string field has, it holds no control characters
        unless it is free text (a description)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, BaseModel) or _allows_newlines(type(self), name):
                continue
            _check_strings(value, name)
        return self

    def replace(self, **changes: Any) -> Self:
        """A changed copy, validated like the original."""
        data = self.model_dump(mode="python", by_alias=True, exclude_unset=True)
        data.update(changes)
        return type(self).model_validate(data)
