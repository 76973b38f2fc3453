"""One refusal of bad input checked the way every such test checks it: the file, the line a user
looks at (the first line holding `at_line_of`) and the field, and the words of the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaoskit.errors import InputError


def assert_refused(path: Path, text: str, at_line_of: str, field: str, message: str,
                   load: Callable[[Path], Any]) -> None:
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if at_line_of in ln)  # where the user looks
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load(path)
    err = info.value
    assert (err.source, err.line, err.field) == (str(path), line, field), err.one_line()
    assert message in err.detail, err.one_line()
