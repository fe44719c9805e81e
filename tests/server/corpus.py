"""The adversarial corpus and the known-bad fixtures (reference_kernels/*/expected.toml) through the server: the
fixtures that grade on the emulator, each uploaded as a student would (`grade submit --server` packs with
uploads.pack_folder), and its verdict checked against what local grading gives (expected.toml is the
contract tests/sandbox/test_adversarial_corpus.py and tests/test_reference_kernels.py hold local grading to)."""

from __future__ import annotations

import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.server.uploads import UploadError, pack_folder

KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"
REFUSED_BEFORE_UPLOAD = "refused before upload"


def agrees(verdict: str, allowed: set[str]) -> bool:
    """Whether the server's outcome is local grading's: the same verdict, or, for what local grading calls an
    ungradable layout (a FIFO, a link), the client's packer refusing the folder before anything is uploaded."""
    if verdict.startswith(REFUSED_BEFORE_UPLOAD):
        return allowed == {"ungradable_layout"}
    return not allowed or verdict in allowed


@dataclass
class Fixture:
    path: Path
    expected: dict

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def assignment(self) -> str:
        return self.expected.get("assignment", "sigmoid")

    def gradable(self, scratch: Path) -> Path:
        """The folder as graded: the fixture, or a copy in `scratch` with what git cannot hold made in it
        (expected.toml `special`: a FIFO, a non-UTF-8 name), by the corpus's own make_fixtures.materialise."""
        if not self.expected.get("special"):
            return self.path
        import importlib.util

        spec = importlib.util.spec_from_file_location("make_fixtures", KERNELS / "adversarial" / "make_fixtures.py")
        assert spec is not None and spec.loader is not None
        module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))  # its dataclasses need it
        spec.loader.exec_module(module)
        return module.materialise(self.path, scratch / self.path.name)

    def allowed(self) -> set[str]:
        """The verdicts local grading may give (empty: expected.toml asks for none in particular)."""
        if "verdict" in self.expected:
            return {self.expected["verdict"]}
        return set(self.expected.get("verdict_one_of", []))


def fixtures() -> list[Fixture]:
    """Every fixture graded on the emulator by one `grade submit` (not the mlu-only ones, not the batch-only)."""
    found = [Fixture(p.parent, tomllib.loads(p.read_text()))
             for corpus in ("known_bad", "adversarial") for p in sorted((KERNELS / corpus).glob("*/expected.toml"))]
    return [f for f in found if f.expected.get("backend", "emu") == "emu" and not f.expected.get("batch")]


def through_server(server, who: str, fixture: Fixture, mode: str = "benchmark",  # noqa: ANN001 - cluster.Server
                   timeout: float = 1800) -> tuple[str, float]:
    """(verdict, seconds) of `fixture` uploaded by `who` and graded by the server's workers; the verdict is
    "refused: <status> <reason>" when the server (or the client's packing) does not take it."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fixture-") as scratch:
        try:
            data = pack_folder(fixture.gradable(Path(scratch)))
        except UploadError as exc:  # `grade submit --server` stops here: nothing uploaded, no attempt
            return f"{REFUSED_BEFORE_UPLOAD}: {exc}", 0.0
    with server.client(who) as c:
        r = c.post("/api/submissions", data={"assignment": fixture.assignment, "mode": mode},
                   files={"archive": ("s.tar.gz", data, "application/gzip")})
        if r.status_code != 201:
            return f"refused: {r.status_code} {r.json().get('error', '')}", time.monotonic() - started
        sub_id = r.json()["id"]
    # the grading's own verdict, as the instructor sees it (a student's view hides after_deadline groups)
    with server.client("teacher") as c:
        while (state := c.get(f"/api/submissions/{sub_id}").json())["status"] != "done":
            if time.monotonic() - started > timeout:
                return f"not graded in {timeout:.0f} s ({state['status']})", time.monotonic() - started
            time.sleep(1.0)
    return state["verdict"], time.monotonic() - started
