"""No English reaches Chinese output: every surface a student or instructor reads -- the CLI summary, the report,
the class dashboard, `grade doctor`, the gradebook -- rendered in zh for a varied set of results, and searched for
runs of English words. Code, identifiers, units and the tools' own raw output (compiler and emulator lines, which
the surfaces label as such) are not English prose and are allowed; a run of three plain English words is a leak.
"""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from grader.batch.dashboard import class_stats, render_dashboard
from grader.batch.exports import ClassRow, gradebook_csv
from grader.batch.intake import StudentSubmission
from grader.cli.summary import print_summary
from grader.i18n import use_language
from grader.reporting.render import render_report_html
from grader.results import GradeResult, Verdict
from tests.reporting import samples

# English that is a name, not a sentence: terms the course uses untranslated, and words of the tools' own output.
ALLOWED = {
    "kernel", "kernels", "builtin", "builtins", "float", "half", "tensor", "tensors", "dtype", "task", "tasks", "core",
    "cores", "cluster", "clusters", "tile", "tiles", "emu", "docker", "bwrap", "process", "none", "mlu", "cncc",
    "sigmoid", "matmul", "scalar", "gdram", "nram", "sram", "wram", "vector", "multicore", "pipeline", "union",
    "block", "secret", "public", "modelled", "handout", "auto", "ops", "py", "cpp", "toml", "grade", "batch",
    "submit", "doctor", "setup", "spec", "images", "build", "check", "calibrate", "sudo", "apt", "get", "install",
    "pip", "and", "the", "of",  # only inside a run that also has a flagged word
}
# A word of prose: letters only, at least two, not an acronym (NRAM), not part of an identifier (task_range).
WORD = re.compile(r"(?<![\w./\-`'])([A-Za-z][a-z]+)(?![\w./\-`(])")
RUN = re.compile(r"[A-Za-z][a-z]+(?:[ ,;:]+[A-Za-z][a-z]+){2,}")


def english_runs(text: str) -> list[str]:
    """Runs of three or more English words with at least two not in ALLOWED."""
    leaks = []
    text = re.sub(r"<<<[^>]*>>>|`[^`]*`|\b\w+\([^)]*\)", " ", text)  # code: launches, quoted, calls
    for line in text.splitlines():
        for m in RUN.finditer(line):
            words = [w.lower() for w in re.findall(r"[A-Za-z]+", m.group(0))]
            if sum(w not in ALLOWED for w in words) >= 2 and WORD.search(m.group(0)):
                leaks.append(m.group(0))
    return leaks


class _Visible(HTMLParser):
    """The text a reader sees, without code, scripts, and the tools' raw output."""

    SKIP = {"script", "style", "pre", "code", "svg", "textarea"}

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.parts, self.stack = 0, [], []

    def handle_starttag(self, tag, attrs):  # noqa: ANN001, ANN201
        if tag in ("br", "img", "meta", "link", "input", "hr", "wbr"):
            return
        raw = any(k == "class" and v and ("original" in v or "raw" in v) for k, v in attrs)
        skip = tag in self.SKIP or raw
        self.stack.append(skip)
        self.depth += skip
        if not skip:
            for k, v in attrs:
                if k in ("title", "aria-label", "alt") and v:
                    self.parts.append(v)

    def handle_endtag(self, tag):  # noqa: ANN001, ANN201
        if tag in ("br", "img", "meta", "link", "input", "hr", "wbr") or not self.stack:
            return
        self.depth -= self.stack.pop()

    def handle_data(self, data):  # noqa: ANN001, ANN201
        if not self.depth:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Visible()
    parser.feed(html)
    return "\n".join(parser.parts)


def _results() -> list[GradeResult]:
    results = [samples.passing_matmul(), samples.failing_matmul(), samples.compile_error(), samples.runtime_error(),
               samples.timeout(), samples.slow_sigmoid()]
    layout = samples.passing_matmul().model_copy(update={
        "verdict": Verdict.UNGRADABLE_LAYOUT, "cases": [], "stages": [], "groups": [], "score": 0.0,
        "message": "no ops.py found:\n  looked in my_ops/ and my_ops/src/\n  put ops.py at the top"})
    return [graded_in_chinese(r) for r in results + [layout]]


GRADED = "评测时写下的文字"


def graded_in_chinese(result: GradeResult) -> GradeResult:
    """The sample as a grading in zh would have written it: the texts the grading writes into the document (its
    messages, the spec's titles) are in the grading's language, and test_i18n's real gradings check those; what
    is left English after this came from rendering."""
    r = result.model_copy(deep=True, update={"lang": "zh", "assignment_title": GRADED, "message": GRADED})
    for s in r.stages:
        s.title, s.message, s.next_step = GRADED, GRADED, GRADED if s.next_step else None
        for q in s.requirements:
            q.description, q.detail = GRADED, GRADED
    for g in r.groups:
        g.description = GRADED
    for c in r.cases:
        c.message = GRADED if c.message and not any(d.message for d in c.diagnostics) else c.message
    return r


def _cli(result: GradeResult) -> str:
    out = io.StringIO()
    with use_language("zh"):
        print_summary(result, Console(file=out, width=200, color_system=None))
    # the compiler's and the emulator's own lines are shown as theirs (labelled), not as ours
    return "\n".join(line for line in out.getvalue().splitlines()
                     if "原始输出" not in line and not re.match(r"\s*\S+:\d+: ", line) and "|" not in line)


@pytest.fixture(scope="module")
def rows() -> list[ClassRow]:
    return [ClassRow(StudentSubmission(f"s{i}", f"Student {i}", f"s{i}.zip", Path(f"/subs/s{i}"), content_hash=f"{i}" * 64),
                     r) for i, r in enumerate(_results())]


def _similarity(root: Path):  # noqa: ANN202 - a SimilarityReport
    """Two students with the same kernel and one with another, compared as the batch does (notes included)."""
    import shutil

    from grader.batch.similarity import Member, compare_submissions

    reference = Path(__file__).resolve().parents[1] / "reference_kernels"
    for sid, stage in (("s0", "sigmoid/vector"), ("s1", "sigmoid/vector"), ("s2", "matmul/vector")):
        shutil.copytree(reference / stage, root / sid)
    (root / "s1" / "mlu" / "extra.h").write_text("// s1's own note\n")
    with use_language("zh"):
        return compare_submissions([Member(p.name, p.name, p.name, p, p.name) for p in sorted(root.iterdir())])


def _surfaces(rows: list[ClassRow], similarity=None) -> dict[str, str]:  # noqa: ANN001
    surfaces = {}
    for row in rows:
        surfaces[f"cli {row.result.verdict}"] = _cli(row.result)
        surfaces[f"report {row.result.verdict}"] = visible_text(render_report_html(row.result))
    with use_language("zh"):
        stats = class_stats(rows, assignment_title="矩阵乘法", backend="emu", seed_mode="secret",
                            similarity=similarity)
        surfaces["dashboard"] = visible_text(render_dashboard(stats))
        surfaces["gradebook messages"] = "\n".join(line.split(",")[-3] for line in gradebook_csv(rows).splitlines()[2:])
    return surfaces


def _without_compiler_lines(text: str, rows: list[ClassRow]) -> str:
    """The compiler's own messages, quoted in the report and on the terminal as the compiler's."""
    for row in rows:
        for line in (row.result.build.compiler_output if row.result.build else "").splitlines():
            message = line.split(" error: ", 1)[-1].replace("'", "’")
            text = text.replace(message, "").replace(message.replace("’", "'"), "")
    return text


def test_no_english_reaches_chinese_output(rows, tmp_path):
    similarity = _similarity(tmp_path)
    assert similarity.pairs  # the dashboard's similarity section
    surfaces = _surfaces(rows, similarity)
    assert "代码相似" in surfaces["dashboard"] or "相似" in surfaces["dashboard"], surfaces["dashboard"][-2000:]
    leaks = {name: english_runs(_without_compiler_lines(text, rows)) for name, text in surfaces.items()}
    leaks = {name: found for name, found in leaks.items() if found}
    assert not leaks, "\n".join(f"{name}: {found[:6]}" for name, found in leaks.items())


def test_doctor_speaks_chinese():
    from typer.testing import CliRunner

    from grader.cli.app import app

    done = CliRunner().invoke(app, ["doctor", "--lang", "zh"], env={"COLUMNS": "240"})
    text = "\n".join(line for line in done.output.splitlines() if "grade doctor" not in line)
    assert "后端" in text or "沙箱" in text, text
    assert english_runs(text) == [], english_runs(text)


def test_the_search_finds_english():
    """The check itself: a sentence left in English is found, Chinese with code terms in it is not."""
    assert english_runs("结果：the kernel wrote past the end of y")
    assert english_runs("3/10 students graded so far")
    assert not english_runs("把数据行分给 taskDim 个任务，每个核启动一个任务 (dim [1, 1, 1])")
    assert not english_runs("用 __memcpy_async 双缓冲，float16 kernel 与 NRAM 之间")
    assert visible_text("<p>中文<code>int main() { return zero; }</code></p>") == "中文"


def test_the_gradebook_keeps_a_layout_message_whole(rows):
    layout = rows[-1].result.model_copy(update={"message": "no ops.py found:\n  looked in my_ops/\n  put ops.py at the top"})
    line = next(r for r in gradebook_csv([ClassRow(rows[-1].submission, layout)]).splitlines() if "no ops.py" in r)
    assert "put ops.py at the top" in line and "looked in" in line


def test_batch_progress_and_summary_speak_chinese():
    from rich.progress import TextColumn

    from grader.drivers.batch import OUTPUT_LABELS, BatchSummary, _progress_bar

    with use_language("zh"):
        bar, _task = _progress_bar(3)
    columns = " ".join(c.text_format for c in bar.columns if isinstance(c, TextColumn))
    assert "评测" in columns and english_runs(columns.replace("{task.description}", "")) == [], columns
    assert not re.search(r"\b(grading|elapsed|eta)\b", columns), columns
    summary = BatchSummary(
        out_dir=Path("/out"), assignment="sigmoid", total=3, graded=2, skipped=1, worker_failures=1,
        verdicts={"passed": 2, "wrong_answer": 1}, mean_score=61.5, max_score=100, wall_seconds=12.0, per_minute=10.0,
        outputs={name: f"/out/{name}" for name in OUTPUT_LABELS}, lang="zh")
    text = "\n".join(summary.lines())
    assert english_runs(text) == [], text
    labels = [line.split(":")[0] for line in text.splitlines() if line.endswith(tuple(OUTPUT_LABELS))]
    assert len(labels) == len(OUTPUT_LABELS) and not any(label in OUTPUT_LABELS for label in labels), labels


@pytest.mark.parametrize("toml", ["assignment = \n", 'module = "not a name"\n', "colour = 1\n",
                                  "[student]\nid = 1\n[entries]\nx = 3\n"])
def test_grade_toml_errors_speak_chinese(tmp_path, toml):
    import tomllib

    from grader.layout import LayoutError, inspect_submission

    (tmp_path / "grade.toml").write_text(toml)
    (tmp_path / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    (tmp_path / "mlu").mkdir()
    (tmp_path / "mlu" / "k.mlu").write_text("__mlu_global__ void k() {}\n")
    (tmp_path / "cpp").mkdir()
    (tmp_path / "cpp" / "b.cpp").write_text("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")
    with use_language("zh"), pytest.raises(LayoutError) as caught:
        inspect_submission(tmp_path)
    message = str(caught.value)
    try:  # the TOML parser's own words are quoted as its own
        tomllib.loads(toml)
    except tomllib.TOMLDecodeError as exc:
        message = message.replace(str(exc), "")
    assert re.search(r"[\u4e00-\u9fff]", message) and english_runs(message) == [], message
