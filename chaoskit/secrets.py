"""Secrets are references (an environment variable or a file), never values in an inventory.

Why: an inventory travels with the evidence (a copy of it is in run.json) and is read by people
who must not learn passwords from it. Every credential-bearing field has the type `Secret`: it
takes `{env: NAME}` or `{file: PATH}` only, so a free value is refused at validate whatever the
field is called; `refuse_secret_fields` catches fields whose name says "password" but whose type
forgot to say so (a manager's config written later).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, StringConstraints, model_validator

from chaoskit.models import Frozen
from chaoskit.validation import NoControl, secret_like

INLINE_REFUSED = "inline secrets are not allowed; use {env: NAME} or {file: PATH}"


class SecretRef(Frozen):
    """Where a secret lives: an environment variable or a file (first line, stripped)."""

    env: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")] | None = None
    file: NoControl | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self

    def resolve(self) -> str:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise LookupError(f"environment variable {self.env} is not set")
            return value
        assert self.file is not None
        try:
            return Path(self.file).read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise LookupError(f"cannot read secret file {self.file}: {exc}") from None

    def describe(self) -> str:
        return f"env:{self.env}" if self.env else f"file:{self.file}"


def _reference_only(value: object) -> object:
    if value is None or isinstance(value, dict | SecretRef):
        return value
    raise ValueError(INLINE_REFUSED)


Secret = Annotated[SecretRef, BeforeValidator(_reference_only)]


def refuse_secret_fields(data: Any) -> Any:
    """A model's raw input: any key that names a secret must hold a reference (a mapping)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and secret_like(key) and value is not None \
                    and not isinstance(value, dict | SecretRef):
                raise ValueError(f"{key}: {INLINE_REFUSED}")
    return data
