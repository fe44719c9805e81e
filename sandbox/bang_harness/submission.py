"""The submission's own settings: grade.toml's `module` and `extension` (everything else is the host's)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODULE = "ops"
DEFAULT_EXTENSION = "my_ops_ext"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SubmissionError(Exception):
    """The submission's layout or grade.toml is unusable."""


@dataclass(frozen=True)
class SubmissionConfig:
    module: str = DEFAULT_MODULE
    extension: str = DEFAULT_EXTENSION

    @classmethod
    def load(cls, submission: Path) -> SubmissionConfig:
        path = submission / "grade.toml"
        if not path.is_file():
            return cls()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SubmissionError(f"grade.toml is not valid TOML: {exc}") from exc
        # DESIGN.md lists the keys beside [student]; accept them at the top level or inside that table.
        student = data.get("student") if isinstance(data.get("student"), dict) else {}
        module = data.get("module", student.get("module", DEFAULT_MODULE))
        extension = data.get("extension", student.get("extension", DEFAULT_EXTENSION))
        # Both names end up in file names, a -D macro and an import statement: identifiers only.
        for key, value in (("module", module), ("extension", extension)):
            if not isinstance(value, str) or not _IDENTIFIER.match(value):
                raise SubmissionError(f"grade.toml: {key} must be a Python identifier, got {value!r}")
        return cls(module=module, extension=extension)
