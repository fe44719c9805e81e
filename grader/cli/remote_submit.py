"""`grade submit --server URL ./my_ops`: the student's side. Packs the folder (uploads.pack_folder, the
intake's caps), uploads it with the student's token, follows the queue position and the phases live, then
fetches the result and the report: the same summary, report.html and exit status as grading locally."""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path

import httpx
from rich.console import Console

from grader.cli.summary import print_summary
from grader.i18n import N_, _, use_language
from grader.results import GradeResult
from grader.server.db import PHASES
from grader.server.uploads import UploadError, pack_folder

ENV_TOKEN = "BANG_GRADER_TOKEN"
TOKEN_FILE = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "bang-grader" / "token"


class RemoteError(Exception):
    """The submission was not graded (refused upload, wrong token, server unreachable): one line saying why."""


def read_token() -> str:
    """$BANG_GRADER_TOKEN, else ~/.config/bang-grader/token (one line)."""
    token = os.environ.get(ENV_TOKEN, "").strip()
    if not token and TOKEN_FILE.is_file():
        token = TOKEN_FILE.read_text(encoding="utf-8").strip()
    if not token:
        raise RemoteError(_("no token: set {env} or write it to {file}").format(env=ENV_TOKEN, file=TOKEN_FILE))
    return token


def assignment_of(folder: Path, given: str | None) -> str:
    if given:
        return given
    toml = folder / "grade.toml"
    if toml.is_file():
        try:
            name = tomllib.loads(toml.read_text(encoding="utf-8")).get("assignment")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            name = None
        if isinstance(name, str) and name:
            return name
    raise RemoteError(_("which assignment? pass --assignment or set `assignment` in grade.toml"))


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error") or response.text)
    except ValueError:
        return response.text[:300]


# A phase reached -> what the student is told the grading does now.
PHASE_WORDS = {"queued": N_("queued"), "started": N_("building"), "built": N_("running"), "ran": N_("scoring"),
               "scored": N_("reporting")}


def submit_remote(server: str, folder: Path, *, assignment: str | None, mode: str, out_dir: Path, console: Console,
                  token: str | None = None, poll_seconds: float = 0.5, timeout_seconds: float = 3600.0,
                  device: str | None = None) -> GradeResult:
    """Uploads `folder` (to be graded on device type `device`, default the assignment's), follows it to its
    result, saves results.json and report.html in `out_dir`; returns the result. Raises RemoteError when
    nothing was graded."""
    token = token or read_token()
    name = assignment_of(folder, assignment)
    try:
        data = pack_folder(folder)
    except UploadError as exc:
        raise RemoteError(str(exc)) from exc
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=60.0) as http:
        try:
            form = {"assignment": name, "mode": mode, **({"device": device} if device else {})}
            response = http.post("/api/submissions", data=form,
                                 files={"archive": ("submission.tar.gz", data, "application/gzip")})
        except httpx.HTTPError as exc:
            raise RemoteError(_("cannot reach {server}: {error}").format(server=server, error=exc)) from exc
        if response.status_code != 201:
            raise RemoteError(_("the server refused the submission: {error}").format(error=_error(response)))
        sub_id = response.json()["id"]
        console.print(_("submission #{id} uploaded ({size} bytes, mode {mode})").format(id=sub_id, size=len(data),
                                                                                          mode=mode))
        _follow(http, sub_id, console, poll_seconds, timeout_seconds)
        document = http.get(f"/api/submissions/{sub_id}/result")
        report = http.get(f"/api/submissions/{sub_id}/report")
        if document.status_code != 200 or report.status_code != 200:
            raise RemoteError(_("the server has no result for #{id}: {error}").format(id=sub_id, error=_error(document)))
    result = GradeResult.from_json(document.text)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(document.text, encoding="utf-8")
    (out_dir / "report.html").write_text(report.text, encoding="utf-8")
    return result


def _follow(http: httpx.Client, sub_id: int, console: Console, poll_seconds: float, timeout_seconds: float) -> None:
    """Prints the queue position while queued and each phase once reached, until the result is committed."""
    shown: set[str] = set()
    position, waiting = None, False
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        response = http.get(f"/api/submissions/{sub_id}")
        if response.status_code != 200:
            raise RemoteError(_error(response))
        state = response.json()
        for phase in PHASES:
            at = state["phases"].get(phase)
            if at is not None and phase not in shown and phase in PHASE_WORDS:
                shown.add(phase)
                console.print(f"  {time.strftime('%H:%M:%S', time.localtime(at))}  {_(PHASE_WORDS[phase])}")
        if state["status"] == "queued" and state.get("position") not in (None, position):
            position = state["position"]
            console.print("  " + _("queue position: {n}").format(n=position))
            if state.get("estimate_seconds") is not None:
                console.print("  " + _("result in about {s:.0f} s").format(s=state["estimate_seconds"]))
        if state.get("waiting_for") and not waiting:
            waiting = True
            console.print("  " + _("no worker for device type {type} is running: the job waits until one "
                                   "joins").format(type=state["waiting_for"]))
        if state["status"] == "done":
            return
        if state["status"] == "cancelled":
            raise RemoteError(_("submission #{id} was cancelled").format(id=sub_id))
        time.sleep(poll_seconds)
    raise RemoteError(_("no result after {s:.0f} s; see the server's page for #{id}").format(s=timeout_seconds, id=sub_id))


def print_remote(result: GradeResult, console: Console, out_dir: Path) -> None:
    with use_language(result.lang):
        print_summary(result, console)
        console.print(_("results:     {path}").format(path=out_dir / "results.json"))
        console.print(_("report:      {path}").format(path=out_dir / "report.html"))
