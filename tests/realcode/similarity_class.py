"""A class for the similarity step made of public AICS exp_5_1 answers (fill-in-the-blank: most of every answer is
the lab's template) plus planted copies of some of them, built at run time from the mirrors (nothing of their code
is in this repository). Used by tests/batch/test_similarity.py and benchmarks/similarity_realcode.py.

yelloworange10 and luoxukun-2023 are one answer found twice in the wild (the same `nram_limit = 12` code, one copy
with its comments stripped): a real copy pair, listed as such. henryli2002's and geotle77's answers are the class's
common answer and nothing else (the template plus the one builtin call everyone writes): a copy of either cannot be
told from honest work by any measure, so no copy is planted from them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from tests.batch.copiers import rename_declared, reorder_functions
from tests.batch.handout import hollow_kernels
from tests.realcode import answers

HONEST = ("kolp323", "henryli2002", "geotle77", "yuichi1001", "yelloworange10", "luoxukun-2023")
COPY_IN_THE_WILD = ("luoxukun-2023", "yelloworange10")
PLANTED: dict[str, tuple[str, Callable[[Path], object]]] = {  # copier -> (whose answer, what they changed)
    "copy_renamed": ("yuichi1001", rename_declared),
    "copy_reordered": ("kolp323", reorder_functions),
}
COPIES = {tuple(sorted((copier, source))) for copier, (source, _) in PLANTED.items()} | {COPY_IN_THE_WILD}


def missing() -> list[str]:
    """The repositories whose mirror is not here (fetch github:<repo>)."""
    return sorted({answers.by_key(k).repo for k in HONEST if not answers.available(answers.by_key(k))})


def build(dest: Path) -> Path:
    """`dest/<student>/` for every honest answer (staged as tests/realcode stages it) and every planted copy."""
    for key in HONEST:
        answers.stage(answers.by_key(key), dest / key)
    for copier, (source, change) in PLANTED.items():
        shutil.copytree(dest / source, dest / copier)
        (dest / copier / "grade.toml").write_text(f'[student]\nid = "{copier}"\n')
        change(dest / copier)
    return dest


def approximate_template(klass: Path, dest: Path, source: str = "henryli2002") -> Path:
    """What an instructor without the handout might pass as `--template`: one answer with its kernel bodies
    emptied."""
    shutil.copytree(klass / source, dest)
    for f in dest.rglob("*.mlu"):
        f.write_text(hollow_kernels(f.read_text()))
    return dest
