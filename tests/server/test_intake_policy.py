"""The intake's decisions on an upload (grader/server/policy.py), asked directly with plain values: no server,
no database, no clock, no Docker -- each decision taken and refused, with the HTTP status the refusal maps to.
The upload's own check is real (uploads.inspect_upload on real archives); the rest are pure functions. The
same decisions through the real server: test_server_inputs.py and test_server_deadlines.py."""

from __future__ import annotations

import calendar
import io
import tarfile

import pytest

from grader.i18n import use_language
from grader.server.course_time import course_time, set_zone
from grader.server.db import MODES
from grader.server.policy import (
    RATE_WINDOW_SECONDS,
    REFUSED_PER_HOUR,
    Refused,
    check_mode,
    check_open,
    check_rate,
    check_refused,
    check_served,
    device_for,
    lateness,
    refused_upload,
)
from grader.server.uploads import MAX_UPLOAD_BYTES, UPLOAD_LIMITS, UploadError, inspect_upload

NOON = float(calendar.timegm((2026, 3, 2, 12, 0, 0)))  # a deadline: 2026-03-02 12:00 UTC
HOUR = 3600.0


@pytest.fixture(autouse=True)
def english():
    set_zone("UTC")  # the course's time zone: times are asserted in UTC here (Shanghai's below)
    with use_language("en"):  # the refusals' wording is asserted in English
        yield
    set_zone(None)


def refusal(call, *args, **kwargs) -> Refused:  # noqa: ANN001
    with pytest.raises(Refused) as caught:
        call(*args, **kwargs)
    return caught.value


def archive(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def upload_refusal(data: bytes) -> Refused:
    with pytest.raises(UploadError) as caught:
        inspect_upload(data)
    return refused_upload(caught.value)


def test_the_server_grades_in_its_modes_only():
    for mode in MODES:
        check_mode(mode)
    refused = refusal(check_mode, "exam")
    assert refused.status == 400
    assert "'exam'" in str(refused) and all(mode in str(refused) for mode in MODES)


def test_an_upload_within_the_caps_is_taken_one_past_them_refused():
    assert len(inspect_upload(archive({"ops.py": b"def f():\n    pass\n"}))) == 64  # its content hash
    oversize = upload_refusal(b"\0" * (MAX_UPLOAD_BYTES + 1))  # just past the cap: told apart in bytes
    assert oversize.status == 413 and str(MAX_UPLOAD_BYTES + 1) in str(oversize) and str(MAX_UPLOAD_BYTES) in str(oversize)
    far = upload_refusal(b"\0" * (3 * MAX_UPLOAD_BYTES))  # the true size, in MB
    assert str(far) == "the upload is 12.0 MB; the server accepts at most 4.0 MB", str(far)
    files = {f"f{i}.py": b"x" for i in range(UPLOAD_LIMITS.max_files + 1)}  # small, but one file too many
    assert upload_refusal(archive(files)).status == 400
    assert upload_refusal(b"not an archive").status == 400


def test_an_open_assignment_takes_uploads_a_closed_one_refuses_them():
    check_open("sigmoid", is_open=True, guard_failed=False)
    opening = refusal(check_open, "sigmoid", is_open=False, guard_failed=False, opening=True)
    assert opening.status == 403 and "is being opened" in str(opening) and opening.retry_after == 60
    closed = refusal(check_open, "sigmoid", is_open=False, guard_failed=False)
    assert closed.status == 403 and str(closed) == "assignment 'sigmoid' is closed"
    # a failed reference-seed guard says so, open or not (the guard closed it; the instructor was told)
    for is_open in (True, False):
        failed = refusal(check_open, "sigmoid", is_open=is_open, guard_failed=True)
        assert failed.status == 403 and "being fixed" in str(failed)


def test_on_time_late_and_past_the_late_window():
    assert lateness("sigmoid", NOON + 10 * HOUR, None, None) is False  # no deadline: never late
    assert lateness("sigmoid", NOON - 1, NOON, NOON + HOUR) is False
    assert lateness("sigmoid", NOON, NOON, NOON + HOUR) is False  # at the deadline itself: on time
    assert lateness("sigmoid", NOON + 1, NOON, NOON + HOUR) is True
    assert lateness("sigmoid", NOON + HOUR, NOON, NOON + HOUR) is True  # the window's last second
    past = refusal(lateness, "sigmoid", NOON + HOUR + 1, NOON, NOON + HOUR)
    assert past.status == 403 and "2026-03-02 13:00 (UTC+00:00)" in str(past)  # when the window closed


def test_without_a_late_window_the_deadline_closes_uploads():
    assert lateness("sigmoid", NOON, NOON, None) is False
    past = refusal(lateness, "sigmoid", NOON + 1, NOON, None)
    assert past.status == 403 and "2026-03-02 12:00 (UTC+00:00)" in str(past)


def test_the_hourly_rate():
    at = NOON
    recent = [at - 50 * 60, at - 20 * 60]  # two uploads in the last hour, oldest first
    check_rate("sigmoid", at, 3, recent)  # under the rate
    check_rate("sigmoid", at, None, recent * 10)  # no limit
    check_rate("sigmoid", at, 0, recent * 10)  # 0: no limit either
    over = refusal(check_rate, "sigmoid", at, 2, recent)
    assert over.status == 429
    # the next upload is accepted once the oldest of the last `per_hour` leaves the window
    assert course_time(recent[0] + RATE_WINDOW_SECONDS) == "2026-03-02 12:10 (UTC+00:00)"
    assert "at most 2 uploads an hour" in str(over) and "2026-03-02 12:10 (UTC+00:00)" in str(over)
    assert over.retry_after == 10 * 60  # the Retry-After header: until 12:10
    assert "2026-03-02 12:40 (UTC+00:00)" in str(refusal(check_rate, "sigmoid", at, 1, recent))


def test_times_are_worded_in_the_course_time_zone_with_its_offset():
    """A 23:59 deadline in Shanghai reads as 23:59 (UTC+08:00), not 15:59 UTC (issue 40 item 1)."""
    set_zone("Asia/Shanghai")
    deadline = NOON + 11 * HOUR + 59 * 60 - 8 * HOUR  # 2026-03-02 23:59 +08:00
    assert course_time(deadline) == "2026-03-02 23:59 (UTC+08:00)"
    assert "2026-03-02 23:59 (UTC+08:00)" in str(refusal(lateness, "sigmoid", deadline + 1, deadline, None))
    with pytest.raises(ValueError, match="unknown time zone"):
        set_zone("Mars/Olympus")


def test_the_device_type_asked_for_or_the_assignments():
    asked: list[str] = []

    def calibrated(kind: str) -> bool:
        asked.append(kind)
        return kind == "mlu370-x4"

    assert device_for("sigmoid", "final", None, "mlu370-x8", calibrated) == "mlu370-x8"  # the assignment's
    assert device_for("sigmoid", "final", None, None, calibrated) == "mlu370-x8"  # the table's default type
    assert device_for("sigmoid", "final", "MLU370-X8", "mlu370-x8", calibrated) == "mlu370-x8"  # as spelled
    assert asked == []  # the assignment's own type needs no thresholds of its own
    assert device_for("sigmoid", "final", "mlu370-x4", "mlu370-x8", calibrated) == "mlu370-x4"  # calibrated
    assert asked == ["mlu370-x4"]
    unknown = refusal(device_for, "sigmoid", "final", "mlu999", "mlu370-x8", calibrated)
    assert unknown.status == 400 and "'mlu999'" in str(unknown)


def test_a_type_without_speed_thresholds_is_refused_outside_test_mode():
    def never(_kind: str) -> bool:
        return False

    for mode in ("benchmark", "final"):
        refused = refusal(device_for, "sigmoid", mode, "mlu270", "mlu370-x8", never)
        assert refused.status == 400
        assert "mlu270" in str(refused) and "grade calibrate --device mlu270" in str(refused)
        assert "submit for mlu370-x8" in str(refused)
    assert device_for("sigmoid", "test", "mlu270", "mlu370-x8", never) == "mlu270"  # correctness only: taken


def test_refused_uploads_have_a_limit_of_their_own():
    at = NOON
    check_refused(at, [at - 60.0] * (REFUSED_PER_HOUR - 1))
    refused = [at - 3000.0 + i for i in range(REFUSED_PER_HOUR)]  # oldest first
    over = refusal(check_refused, at, refused)
    assert over.status == 429 and f"{REFUSED_PER_HOUR} of your uploads were refused" in str(over)
    assert over.retry_after == 600.0 and course_time(at + 600) in str(over)


def test_a_device_type_no_live_worker_serves_is_refused_saying_which_are():
    check_served("mlu370-x8", ["mlu370-x4", "mlu370-x8"])
    other = refusal(check_served, "mlu270", ["mlu370-x4", "mlu370-x8"])
    assert other.status == 409 and str(other) == "no worker grades device type mlu270 now; served now: mlu370-x4, mlu370-x8"
    none = refusal(check_served, "mlu370-x8", [])
    assert none.status == 409 and "no worker is running" in str(none)


def test_a_folder_too_large_for_the_server_names_its_largest_files(tmp_path):  # noqa: ANN001
    from grader.server.uploads import pack_folder

    (tmp_path / "mlu").mkdir()
    (tmp_path / "mlu" / "kernel.mlu").write_text("__mlu_global__ void k() {}\n")
    (tmp_path / "trace.bin").write_bytes(bytes(9 << 20))  # past the 8 MB the server unpacks
    (tmp_path / "notes.txt").write_bytes(bytes(300 << 10))
    with pytest.raises(UploadError) as caught:
        pack_folder(tmp_path)
    assert caught.value.too_large
    assert "its largest files: trace.bin (9.0 MB), notes.txt (300 KB), mlu/kernel.mlu (27 bytes)" in str(caught.value)
