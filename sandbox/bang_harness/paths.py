"""Where the harness finds the submission, the build tree and the job I/O folder."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HarnessPaths:
    submission: Path
    build: Path
    io: Path

    @classmethod
    def from_env(cls) -> HarnessPaths:
        # Runners without mount namespaces (process, bwrap) point the harness at their own folders.
        return cls(
            submission=Path(os.environ.get("BANG_GRADER_SUBMISSION", "/submission")),
            build=Path(os.environ.get("BANG_GRADER_BUILD", "/build")),
            io=Path(os.environ.get("BANG_GRADER_IO", "/io")),
        )

    @property
    def extension_dir(self) -> Path:
        return self.build / "ext"

    @property
    def outputs(self) -> Path:
        return self.io / "outputs"

    def extension_library(self, extension: str) -> Path:
        return self.extension_dir / f"{extension}.so"
