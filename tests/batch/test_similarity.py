"""Code similarity across a class (grader/batch/similarity.py), on a class built at test time from the
reference kernels: known copies (renamed identifiers, reordered functions, rewritten comments and
indentation, whole-file and byte-identical copies) and known independent solutions (stages whose kernels
use different techniques), with the lab's handout as the template.

The handout is what the AICS lab gives out: the bindings, ops.py, the headers, and each stage's .mlu with
the host entry written and the kernel body left as a TODO. Students write the kernel bodies, so that is
what is compared.

Not every pair of reference stages is independent: multicore is the vector kernel plus a range split
(`task_range`, two lines), and sram_union is pipeline with the rhs staged through SRAM. Those pairs share
most of their kernel text and are listed, as they should be (`test_derived_stages_are_listed`); the
independent set leaves them out.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from pathlib import Path

import pytest
from conftest import HERE, make_result  # tests/batch/conftest.py, imported while it is the one loaded

from grader.batch.similarity import (
    Member,
    SimilarityOptions,
    SimilaritySettings,
    compare_submissions,
    csv_cell,
    read_sources,
    similarity_csv,
)
from tests.batch.copiers import code_files, rename_identifiers, reorder_functions, rewrite_comments
from tests.batch.handout import hollow_kernels

REPO = Path(__file__).resolve().parents[2]
REF = REPO / "reference_kernels"
CODE = (".mlu", ".cpp", ".h", ".py")
THRESHOLD = 0.6  # the committed assignments' [similarity] threshold

INDEPENDENT = {  # student -> reference stage; kernels with different techniques
    "ind_sig_vector": "sigmoid/vector",
    "ind_sig_pipeline": "sigmoid/pipeline",
    "ind_mm_scalar_gdram": "matmul/scalar_gdram",
    "ind_mm_scalar_nram": "matmul/scalar_nram",
    "ind_mm_vector": "matmul/vector",
    "ind_mm_pipeline": "matmul/pipeline",
}

SIGMOID_PIPELINE_RENAMES = {
    "x": "src", "y": "dst", "count": "total", "tile_elems": "chunk", "buffer": "bufs", "begin": "lo", "end": "hi",
    "mine": "my_len", "tiles": "n_chunks", "step": "it", "t": "idx", "n": "cnt", "device": "dev",
    "clusters": "n_clusters", "cores_per_cluster": "cpc", "cores": "all_cores", "tasks": "n_tasks",
    "dim": "launch_dim", "queue": "q", "is_half": "fp16", "nram_buffer": "scratch",
    "sigmoid_pipeline_kernel": "my_sigmoid_kernel", "sigmoid_pipeline_entry": "launch_my_sigmoid",
    "input": "inp", "output": "res", "MIN_ELEMS_PER_TASK": "MIN_PER_CORE",
}


# ------------------------------------------------------------------------------------------ the class


def make_handout(dest: Path) -> Path:
    """The lab template: the shared headers, and per stage everything but the kernel bodies."""
    shutil.copytree(REF / "_shared", dest / "common")
    for assignment in ("sigmoid", "matmul"):
        for stage in sorted(p for p in (REF / assignment).iterdir() if p.is_dir()):
            for f in stage.rglob("*"):
                if f.suffix in CODE:
                    target = dest / assignment / stage.name / f.relative_to(stage)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(hollow_kernels(f.read_text()) if f.suffix == ".mlu" else f.read_text())
    return dest


def student(root: Path, sid: str, stage: str) -> Path:
    folder = root / sid
    shutil.copytree(REF / stage, folder)
    (folder / "grade.toml").write_text(f'[student]\nid = "{sid}"\nname = "Student {sid}"\n')
    return folder


def whole_file_copy(folder: Path, source: Path) -> None:
    """Every code file copied verbatim, under other file names; only grade.toml differs."""
    for f in code_files(source):
        rel = f.relative_to(source)
        name = rel.name.replace("matmul_scalar_gdram", "mm_kernel").replace("matmul_binding", "bindings")
        target = folder / rel.parent / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.read_text())


def members(root: Path) -> list[Member]:
    from grader.batch.intake import content_hash

    return [Member(p.name, f"Student {p.name}", p.name, p, content_hash(p)) for p in sorted(root.iterdir())]


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    subs = root / "subs"
    handout = make_handout(root / "handout")
    for sid, stage in INDEPENDENT.items():
        student(subs, sid, stage)
    rename_identifiers(student(subs, "copy_renamed", "sigmoid/pipeline"), SIGMOID_PIPELINE_RENAMES)
    reorder_functions(student(subs, "copy_reordered", "matmul/scalar_nram"))
    rewrite_comments(student(subs, "copy_comments", "matmul/pipeline"))
    shutil.copytree(subs / "ind_sig_pipeline", subs / "copy_identical")  # same bytes, same content hash
    whole = subs / "copy_whole_files"
    whole.mkdir()
    (whole / "grade.toml").write_text('[student]\nname = "Someone Else"\n')
    whole_file_copy(whole, REF / "matmul/scalar_gdram")
    # two students who handed in the untouched handout (different grade.toml, so not identical)
    for sid in ("starter_only_1", "starter_only_2"):
        folder = subs / sid
        shutil.copytree(handout / "matmul/vector", folder)
        (folder / "grade.toml").write_text(f'[student]\nname = "{sid}"\n')
    return subs, handout


COPIES = {
    ("copy_renamed", "ind_sig_pipeline"): "renamed identifiers",
    ("copy_reordered", "ind_mm_scalar_nram"): "reordered functions",
    ("copy_comments", "ind_mm_pipeline"): "comments and indentation changed",
    ("copy_identical", "ind_sig_pipeline"): "byte-identical submission",
    ("copy_whole_files", "ind_mm_scalar_gdram"): "whole files copied under other names",
    ("copy_identical", "copy_renamed"): "both copies of ind_sig_pipeline",
}


def pair_map(report):
    return {(p.a, p.b): p for p in report.pairs}


@pytest.fixture(scope="module")
def report(klass):
    subs, handout = klass
    return compare_submissions(members(subs), [handout], SimilaritySettings(threshold=THRESHOLD))


# ------------------------------------------------------------------------------------------ the claims


def test_every_copy_pair_is_found(report):
    found = pair_map(report)
    for (a, b), how in COPIES.items():
        key = tuple(sorted((a, b)))
        assert key in found, f"copy not found ({how}): {key}"
        assert found[key].score >= 0.9, f"{how}: {found[key].score:.2f}"
    assert found[("copy_identical", "ind_sig_pipeline")].identical
    assert not found[("copy_renamed", "ind_sig_pipeline")].identical
    print("\n".join(f"{p.a} ~ {p.b}: {p.share_a:.2f} / {p.share_b:.2f}, {p.shared} tokens"
                    + (" identical" if p.identical else "") for p in report.pairs))


def test_no_independent_pair_is_listed(report):
    listed = {(p.a, p.b) for p in report.pairs}
    independent = sorted(INDEPENDENT)
    bad = [(a, b) for i, a in enumerate(independent) for b in independent[i + 1 :] if (a, b) in listed]
    assert bad == []
    # and only the copies are listed: nothing else in the class comes near
    expected = {tuple(sorted(k)) for k in COPIES}
    assert listed == expected


def test_the_three_copies_of_one_submission_form_a_cluster(report):
    assert [c.members for c in report.clusters] == [["copy_identical", "copy_renamed", "ind_sig_pipeline"]]
    found = pair_map(report)
    assert found[("copy_identical", "ind_sig_pipeline")].cluster == 1
    assert found[("copy_comments", "ind_mm_pipeline")].cluster is None


def test_template_lines_are_not_counted(klass, report):
    subs, handout = klass
    # Submitting the untouched handout leaves no code of one's own: never listed, although two students
    # did it and everyone shares those lines.
    assert not any("starter_only" in p.a or "starter_only" in p.b for p in report.pairs)
    # Two byte-identical copies of the untouched handout are not listed as identical either.
    twin = subs.parent / "twins"
    for sid in ("twin_1", "twin_2"):
        shutil.copytree(handout / "matmul/vector", twin / sid)
    assert compare_submissions(members(twin), [handout], SimilaritySettings(threshold=THRESHOLD)).pairs == []
    # The matched regions are kernel code: never a binding, ops.py or header, which the handout holds.
    for p in report.pairs:
        for r in p.regions:
            assert r.file_a.endswith(".mlu") and r.file_b.endswith(".mlu"), (p.a, p.b, r.file_a, r.file_b)
    # Without the template the same class lists independent solutions: the handout is what they share.
    bare = compare_submissions(members(subs), [], SimilaritySettings(threshold=THRESHOLD))
    listed = {(p.a, p.b) for p in bare.pairs}
    independent = sorted(INDEPENDENT)
    assert any((a, b) in listed for i, a in enumerate(independent) for b in independent[i + 1 :])
    assert ("starter_only_1", "starter_only_2") in listed


def test_side_by_side_regions_point_at_the_copied_code(report):
    pair = pair_map(report)[("copy_renamed", "ind_sig_pipeline")]
    assert pair.regions
    kernel = next(r for r in pair.regions if "__bang_active_sigmoid" in r.code_b)
    assert "__bang_active_sigmoid" in kernel.code_a and "bufs[idx % 3]" in kernel.code_a  # the renamed copy
    assert kernel.file_a == "mlu/sigmoid_pipeline.mlu" and kernel.file_b == "mlu/sigmoid_pipeline.mlu"
    assert kernel.lines_a[0] <= kernel.lines_a[1]
    reordered = pair_map(report)[("copy_reordered", "ind_mm_scalar_nram")]
    # the kernel moved below the entry function: the region says where it is on each side
    kernel = next(r for r in reordered.regions if "matmul_scalar_nram_kernel" in r.code_a)
    assert kernel.lines_a[0] > kernel.lines_b[0] + 10
    assert kernel.code_a.splitlines()[0] == kernel.code_b.splitlines()[0]


def test_derived_stages_are_listed(klass):
    """multicore = vector + a range split; sram_union = pipeline with SRAM staging: the kernels are mostly
    the same text, so these 'stages' are listed like copies. Recorded so the independent set above is
    honest about what it leaves out."""
    subs, handout = klass
    derived = subs.parent / "derived"
    for sid, stage in {"d_sig_vector": "sigmoid/vector", "d_sig_multicore": "sigmoid/multicore",
                       "d_mm_pipeline": "matmul/pipeline", "d_mm_sram_union": "matmul/sram_union"}.items():
        student(derived, sid, stage)
    found = pair_map(compare_submissions(members(derived), [handout], SimilaritySettings(threshold=THRESHOLD)))
    assert ("d_sig_multicore", "d_sig_vector") in found
    assert ("d_mm_pipeline", "d_mm_sram_union") in found


def test_csv_lists_every_pair_and_neutralises_formulas(tmp_path, klass):
    subs, handout = klass
    evil = tmp_path / "evil"
    shutil.copytree(subs / "ind_mm_pipeline", evil / "=HYPERLINK(1)")
    shutil.copytree(subs / "copy_comments", evil / "@cmd")
    people = [Member(p.name, "+SUM(A1)" if p.name.startswith("=") else "-2+3", p.name, p, p.name)
              for p in sorted(evil.iterdir())]
    rep = compare_submissions(people, [handout], SimilaritySettings(threshold=THRESHOLD))
    text = similarity_csv(rep)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(rep.pairs) == 1
    for cell in rows[0].values():
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    assert {rows[0]["student_a"], rows[0]["student_b"]} == {"'=HYPERLINK(1)", "'@cmd"}
    assert csv_cell("\tx") == "'\tx" and csv_cell("\rx") == "'\rx" and csv_cell("0.95") == "0.95"


def test_links_and_large_files_are_not_read(tmp_path):
    folder = tmp_path / "s"
    (folder / "mlu").mkdir(parents=True)
    secret = tmp_path / "secret.h"
    secret.write_text("int secret = 42;\n")
    (folder / "mlu" / "leak.h").symlink_to(secret)
    (folder / "mlu" / "big.mlu").write_text("int a;\n" * 100000)
    (folder / "mlu" / "ok.mlu").write_text("int b;\n")
    sources, notes = read_sources(folder)
    assert [s.rel for s in sources] == ["mlu/ok.mlu"]
    assert any("big.mlu" in n for n in notes)


def test_options_and_settings_from_the_assignment():
    from grader.batch.similarity import settings_for

    settings, templates = settings_for("matmul", SimilarityOptions(template=(Path("/nonexistent"),), threshold=0.8))
    assert settings.threshold == 0.8 and templates[0] == Path("/nonexistent")
    settings, _ = settings_for("sigmoid")
    assert settings.threshold == THRESHOLD


# ------------------------------------------------------------------------------------------ dashboard


def class_rows_for(subs: Path):

    from grader.batch.exports import ClassRow
    from grader.batch.intake import StudentSubmission, content_hash

    return [ClassRow(StudentSubmission(p.name, f"Student <{p.name}>", p.name, p, content_hash(p)), make_result(p.name))
            for p in sorted(subs.iterdir())]


@pytest.fixture(scope="module")
def dashboard(klass, report, tmp_path_factory):
    from grader.batch.dashboard import write_dashboard

    subs, _ = klass
    path = tmp_path_factory.mktemp("dashboard") / "dashboard.html"
    write_dashboard(class_rows_for(subs), path, assignment_title="MatMul", backend="emu", seed_mode="secret",
                    similarity=report)
    return path


def test_dashboard_section_is_worded_as_evidence_and_self_contained(dashboard, report):
    html = dashboard.read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "<script" not in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    section = html[html.index('id="similarity"') :]
    assert "evidence for review" in section and "not a\n    finding of misconduct" in section
    assert "Nothing here changes any score" in section
    for word in ("plagiar", "cheat", "guilty", "penalty"):
        assert word not in section.lower()
    assert section.count('<details class="pair"') == len(report.pairs)
    assert 'id="pair-1" open' in section and "identical submission" in section
    assert "group 1:" in section and "bufs[idx % 3]" in section  # the cluster, and the renamed copy's code


@pytest.mark.browser
def test_dashboard_section_in_chromium(dashboard):
    from reporting.browser import DESKTOP, PHONE, Chromium, missing  # tests/ is on sys.path (its conftest)

    if missing() is not None:
        pytest.skip(missing())
    shots = REPO / "out" / "screenshots"
    with Chromium() as browser:
        for view, (width, height), mobile in (("desktop", DESKTOP, False), ("phone", PHONE, True)):
            for scheme in ("light", "dark"):
                page = browser.open(dashboard, width, height, scheme, mobile)
                try:
                    assert page.evaluate("document.querySelectorAll('#similarity details.pair').length") == 6
                    sides = page.evaluate("[...document.querySelectorAll('#pair-1 .region')[0].children]"
                                          ".map(e => [e.getBoundingClientRect().left, e.getBoundingClientRect().top])")
                    if view == "desktop":  # A and B next to each other
                        assert sides[0][1] == sides[1][1] and sides[1][0] > sides[0][0] + 300
                    else:  # stacked on a phone
                        assert sides[1][1] > sides[0][1]
                    # the section, and the whole page: wide class tables scroll inside their card, not the page
                    overflow = page.evaluate("(s => Math.max(s.scrollWidth - s.clientWidth, s.getBoundingClientRect()"
                                             ".right - document.documentElement.clientWidth))"
                                             "(document.querySelector('#similarity'))")
                    assert overflow <= 0, f"the section sticks out sideways by {overflow}px at {width}px"
                    page_overflow = page.evaluate("document.documentElement.scrollWidth"
                                                  " - document.documentElement.clientWidth")
                    assert page_overflow <= 0, f"the dashboard scrolls sideways by {page_overflow}px at {width}px"
                    top = int(page.evaluate("document.querySelector('#similarity').getBoundingClientRect().top"
                                            " + window.scrollY"))
                    shot = page.screenshot(shots / f"dashboard-similarity-{view}-{scheme}.png", region=(top, 2400))
                    assert shot.stat().st_size > 20_000
                    assert page.report.problems == []
                finally:
                    page.close()
    print(f"screenshots: {shots}/dashboard-similarity-*.png")


# ------------------------------------------------------------------------------------------ grade batch


def test_batch_writes_similarity_csv_and_the_dashboard_section(tmp_path, monkeypatch, klass):
    import os

    from entries import QUICK

    from grader.drivers.batch import BatchError, run_batch

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("BATCH_TEST_LOG", str(tmp_path / "graded.jsonl"))
    subs_all, handout = klass
    subs = tmp_path / "subs"
    for sid in ("ind_sig_pipeline", "copy_renamed", "ind_mm_vector", "copy_identical"):
        shutil.copytree(subs_all / sid, subs / sid)
        (subs / sid / "score.txt").write_text("5 0")
    out = tmp_path / "out"
    with pytest.raises(BatchError, match="no such folder"):
        run_batch(subs, "sigmoid", out, workers=1, progress=False, grading=QUICK,
                  similarity=SimilarityOptions(template=(tmp_path / "missing",)))
    summary = run_batch(subs, "sigmoid", out, workers=1, progress=False, grading=QUICK,
                        similarity=SimilarityOptions(template=(handout,)))
    rows = list(csv.DictReader(open(out / "similarity.csv")))
    assert {(r["student_a"], r["student_b"]) for r in rows} == {
        ("copy_identical", "copy_renamed"), ("copy_identical", "ind_sig_pipeline"), ("copy_renamed", "ind_sig_pipeline")}
    assert summary.outputs["similarity"] == str(out / "similarity.csv")
    html = (out / "dashboard.html").read_text()
    assert 'id="similarity"' in html and 'href="#pair-3"' in html
    # the scores are untouched: similarity is for review only
    assert {r["total"] for r in csv.DictReader(open(out / "gradebook.csv")) if r["student_id"] != "(points possible)"} == {"5"}
    # --no-similarity: no section
    run_batch(subs, "sigmoid", out, workers=1, progress=False, grading=QUICK,
              similarity=SimilarityOptions(enabled=False))
    assert 'id="similarity"' not in (out / "dashboard.html").read_text()


def test_shares_are_the_same_in_every_process(klass, report):
    """copydetect's own k-gram hash is Python's salted hash(); ours is not, so a rerun lists the same pairs
    with the same shares."""
    import json
    import subprocess
    import sys

    subs, handout = klass
    script = (
        "import json, sys; from pathlib import Path; sys.path[:0] = [sys.argv[1], str(Path(sys.argv[1]).parent)];"
        "import test_similarity as t;"
        "from grader.batch.similarity import compare_submissions, SimilaritySettings;"
        "r = compare_submissions(t.members(Path(sys.argv[2])), [Path(sys.argv[3])], SimilaritySettings(threshold=0.6));"
        "print(json.dumps([[p.a, p.b, round(p.share_a, 6), round(p.share_b, 6)] for p in r.pairs]))")
    outputs = set()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent), str(subs), str(handout)],
                              capture_output=True, text=True, check=True, env={**__import__("os").environ,
                                                                                "PYTHONHASHSEED": seed})
        outputs.add(done.stdout.strip())
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == [[p.a, p.b, round(p.share_a, 6), round(p.share_b, 6)] for p in report.pairs]


# ------------------------------------------------------------------------------------------ a fill-in-the-blank lab


@pytest.fixture(scope="module")
def public_class(tmp_path_factory):
    from tests.realcode import similarity_class

    if missing := similarity_class.missing():
        pytest.skip(f"no mirror of {', '.join(missing)} (fetch github:<repo>, or set $REALCODE_MIRRORS)")
    return similarity_class, similarity_class.build(tmp_path_factory.mktemp("public") / "class")


def test_a_fill_in_the_blank_lab_without_its_template(public_class):
    """Public exp_5_1 answers are mostly the lab's template, so every honest pair shares 94-100 % of its code.
    Passages in more than half the class count as template (MOSS -m): the honest pairs fall below the flag
    line, the planted copies (renamed identifiers, reordered functions) and the copy found in the wild stay
    above it; with that rule off, the honest pairs are listed."""
    sc, klass = public_class
    people = members(klass)
    found = pair_map(compare_submissions(people, [], SimilaritySettings(threshold=THRESHOLD)))
    print("\n".join(f"{a} ~ {b}: {p.score:.2f} ({p.shared})" for (a, b), p in found.items()))
    assert set(found) == sc.COPIES
    assert all(found[pair].score >= THRESHOLD for pair in sc.COPIES)
    kept = pair_map(compare_submissions(people, [], SimilaritySettings(threshold=THRESHOLD, common_share=1.0)))
    honest = [(a, b) for i, a in enumerate(sorted(sc.HONEST)) for b in sorted(sc.HONEST)[i + 1 :]]
    assert all(pair in kept and kept[pair].score > 0.9 for pair in honest), sorted(kept)


def test_code_most_of_the_class_holds_counts_as_template(klass, tmp_path):
    """The fill-in-the-blank case without the mirrors: every student also hands in the whole lab handout (as a
    student of a fill-in lab does), and no --template is given. What most of the class holds is not evidence:
    only the copies are listed; counting it, the independent students are listed too."""
    subs, handout = klass
    lab = tmp_path / "lab"
    for sid in [*INDEPENDENT, "copy_renamed", "copy_reordered"]:
        shutil.copytree(subs / sid, lab / sid)
        shutil.copytree(handout, lab / sid / "handout")
    people = members(lab)
    found = pair_map(compare_submissions(people, [], SimilaritySettings(threshold=THRESHOLD)))
    copies = {("copy_renamed", "ind_sig_pipeline"), ("copy_reordered", "ind_mm_scalar_nram")}
    assert copies <= set(found) and all(found[pair].score > 0.9 for pair in copies), found
    # matmul's pipeline kernel keeps the vector kernel's tile loop: 0.59 of it shared with the handout as the
    # template, 0.63 here; every other independent pair stays unlisted
    assert set(found) - copies <= {("ind_mm_pipeline", "ind_mm_vector")}, found
    assert all(found[pair].score < 0.7 for pair in set(found) - copies), found
    kept = pair_map(compare_submissions(people, [], SimilaritySettings(threshold=THRESHOLD, common_share=1.0)))
    independent = sorted(INDEPENDENT)
    assert all((a, b) in kept for i, a in enumerate(independent) for b in independent[i + 1 :]), sorted(kept)
