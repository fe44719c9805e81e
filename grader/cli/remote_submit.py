"""`grade submit --server URL ./my_ops`: the student's side. Asks the server about the assignment first (open?
late now, and at what penalty? what counts?), packs the folder (uploads.pack_folder, the intake's caps), uploads
it with the student's token, follows the queue position and the phases live, then fetches the result and the
report in the student's language: the same summary, report.html and exit status as grading locally, the score
as it counts (pending hidden points, a late penalty, a test run that counts nothing) and which submission counts.

Light by design (a submit-only client: httpx, rich, typer, pydantic, babel; no torch, docker or grading stack):
tests/server/test_remote_client.py imports it with those made unimportable."""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import httpx
from rich.console import Console

from grader.cli.summary import print_summary
from grader.i18n import N_, _, current_language
from grader.results import GradeResult
from grader.server.uploads import UploadError, pack_folder

ENV_TOKEN = "BANG_GRADER_TOKEN"
TOKEN_FILE = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "bang-grader" / "token"


class RemoteError(Exception):
    """The submission was not graded (refused upload, wrong token, server unreachable): one line saying why."""


class LateNotConfirmed(RemoteError):
    """An upload now would be late and the student did not confirm it (--late-ok, or the prompt)."""


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


def client(server: str, token: str | None = None) -> httpx.Client:
    """An HTTP client of the server with the student's token, asking for answers in the active language."""
    return httpx.Client(base_url=server.rstrip("/"), timeout=60.0, headers={
        "Authorization": f"Bearer {token or read_token()}", "Accept-Language": current_language()})


def open_assignments(http: httpx.Client, server: str) -> list[dict]:
    """The open assignments as the server tells a student (views.AssignmentView.student_json)."""
    try:
        response = http.get("/api/assignments")
    except httpx.HTTPError as exc:
        raise RemoteError(_("cannot reach {server}: {error}").format(server=server, error=exc)) from exc
    if response.status_code != 200:
        raise RemoteError(_error(response))
    return response.json()


def print_assignments(assignments: list[dict], console: Console) -> None:
    """`grade submit --server URL --list`: one line per open assignment (deadline, late window, what counts)."""
    from grader.server.counting import POLICY_WORDS

    if not assignments:
        console.print(_("no assignment is open on this server"))
    for a in assignments:
        deadline = a["deadline_text"] or _("no deadline")
        state = _("late now (uploads until {when}, {share:.0%} off a final's score)").format(
            when=a["closes_text"], share=a["late_penalty"]) if a["late_now"] else \
            _("closed") if a["closed_now"] else _("open")
        console.print(f"[bold]{a['name']}[/]  " + _("deadline {deadline}; {state}; {counts}").format(
            deadline=deadline, state=state, counts=_(POLICY_WORDS.get(a["policy"], a["policy"]))), highlight=False)


def check_late(http: httpx.Client, server: str, name: str, mode: str, late_ok: bool,
               confirm: Callable[[str], bool] | None) -> None:
    """Before uploading: when a final upload of `name` now is late, the student is told so and its penalty, and it
    is taken only with `late_ok` or `confirm(question)` saying yes; else LateNotConfirmed. Nothing is asked of an
    assignment the server does not list (its refusal says why)."""
    found = next((a for a in open_assignments(http, server) if a["name"] == name), None)
    if found is None or not found["late_now"]:
        return
    warning = _("the deadline of {name} has passed ({deadline}): an upload now is late; {share:.0%} of a final "
                "submission's score is taken off; uploads close at {closes}").format(
                    name=name, deadline=found["deadline_text"], share=found["late_penalty"],
                    closes=found["closes_text"])
    if late_ok or mode != "final":  # a test or benchmark run counts nothing: no penalty to accept
        return
    if confirm is not None and confirm(warning + "\n" + _("upload it late?")):
        return
    raise LateNotConfirmed(warning + "; " + _("add --late-ok to upload it anyway"))


def submit_remote(server: str, folder: Path, *, assignment: str | None, mode: str, out_dir: Path, console: Console,
                  token: str | None = None, poll_seconds: float = 0.5, timeout_seconds: float = 3600.0,
                  device: str | None = None, late_ok: bool = False,
                  confirm: Callable[[str], bool] | None = None) -> tuple[GradeResult, dict]:
    """Uploads `folder` (to be graded on device type `device`, default the assignment's), follows it to its
    result, saves results.json and report.html (in the active language) in `out_dir`; returns the result and
    the server's view of the submission (views.SubmissionView: the score as it counts, pending points, whether
    it counts). A late upload is taken only when confirmed (check_late). Raises RemoteError when nothing was
    graded."""
    name = assignment_of(folder, assignment)
    try:
        data = pack_folder(folder)
    except UploadError as exc:
        raise RemoteError(str(exc)) from exc
    with client(server, token) as http:
        check_late(http, server, name, mode, late_ok, confirm)
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
        state = _follow(http, sub_id, console, poll_seconds, timeout_seconds)
        document = http.get(f"/api/submissions/{sub_id}/result")
        report = http.get(f"/api/submissions/{sub_id}/report", params={"lang": current_language()})
        if document.status_code != 200 or report.status_code != 200:
            raise RemoteError(_("the server has no result for #{id}: {error}").format(id=sub_id, error=_error(document)))
    result = GradeResult.from_json(document.text)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(document.text, encoding="utf-8")
    (out_dir / "report.html").write_text(report.text, encoding="utf-8")
    return result, state


def choose_remote(server: str, submission_id: int, token: str | None = None) -> int:
    """The student chooses their graded final submission `submission_id` to count; returns the one that counts."""
    with client(server, token) as http:
        response = http.post(f"/api/submissions/{submission_id}/choose")
    if response.status_code != 200:
        raise RemoteError(_error(response))
    return response.json()["counting"]


def _follow(http: httpx.Client, sub_id: int, console: Console, poll_seconds: float, timeout_seconds: float) -> dict:
    """Prints the queue position while queued and each phase once reached, until the result is committed; returns
    the submission's state then."""
    shown: set[str] = set()
    position, waiting = None, False
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        response = http.get(f"/api/submissions/{sub_id}")
        if response.status_code != 200:
            raise RemoteError(_error(response))
        state = response.json()
        for phase in PHASE_WORDS:  # in the order of the phases (db.PHASES)
            at = state["phases"].get(phase)
            if at is not None and phase not in shown:
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
            return state
        if state["status"] == "cancelled":
            raise RemoteError(_("submission #{id} was cancelled").format(id=sub_id))
        # the server says when to ask again (a quarter of the estimated wait, workers.POLL_SECONDS)
        time.sleep(max(0.0, min(max(poll_seconds, state.get("poll_seconds") or 0.0), deadline - time.monotonic())))
    raise RemoteError(_("no result after {s:.0f} s; see the server's page for #{id}").format(s=timeout_seconds, id=sub_id))


def counted_line(state: dict) -> str:
    """The score as the server counts it: a test run counts nothing; hidden points are pending, never full marks;
    a late final's penalty is shown beside its raw score."""
    if state["mode"] == "test":
        return _("score: not counted (a test run grades the first stage only)")
    score, most, pending = state["score"] or 0.0, state["max_score"] or 0.0, state.get("pending") or 0.0
    line = _("score: {score} / {max}").format(score=f"{score:g}", max=f"{most:g}")
    if pending:
        line = _("score: {score} of {total} visible, {pending} pending until the deadline").format(
            score=f"{score:g}", total=f"{most + pending:g}", pending=f"{pending:g}")
    if state.get("penalty"):
        line += "  " + _("late: {raw} - {share:.0%} = {counted} counts").format(
            raw=f"{score:g}", share=state["penalty"], counted=f"{state['counted_score']:g}")
    return line


def counting_line(state: dict) -> str | None:
    """Which submission counts, after this one (a final one)."""
    if state["mode"] != "final":
        return None
    if state.get("counts"):
        return _("this submission counts for {name}").format(name=state["assignment"])
    if state.get("counting") is not None:
        return _("submission #{id} counts for {name}, not this one").format(id=state["counting"],
                                                                          name=state["assignment"])
    return None


def print_remote(result: GradeResult, state: dict, console: Console, out_dir: Path) -> None:
    """The summary in the active language (the student's: --lang or the locale), with the score as it counts."""
    print_summary(result, console, score=counted_line(state), pending=bool(state.get("pending")))
    if line := counting_line(state):
        console.print("[bold]" + line + "[/]", highlight=False)
    console.print(_("results:     {path}").format(path=out_dir / "results.json"))
    console.print(_("report:      {path}").format(path=out_dir / "report.html"))
