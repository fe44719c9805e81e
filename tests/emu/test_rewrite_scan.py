"""The rewriter's scans that jump instead of stepping (issue 41: a cold build of the example rewrites 21 preprocessed
units of 0.8-0.9 MB, and the character-by-character loops were most of each rewrite): the literal mask
(rewrite._Source._literal_mask), a head's declarator (rewrite._find_declarator_paren) and a position's line
(_Source.location) are what the loops they replaced computed, on random text made of the characters that matter and
on real preprocessed units."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bang_emu import rewrite, toolchain
from emu_helpers import PROGRAMS

REPO = Path(__file__).resolve().parents[2]


def defined_mask(text: str) -> bytearray:
    """The definition, one character at a time (the rewriter's scan until issue 41)."""
    mask = bytearray(len(text))
    i, n = 0, len(text)
    line_start = True
    while i < n:
        ch = text[i]
        if line_start and ch == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                mask[k] = 1
            i = j
            continue
        if ch in "\"'":
            if ch == "'" and i > 0 and (text[i - 1].isalnum()):
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i, min(j + 1, n)):
                mask[k] = 1
            i = j + 1
            line_start = False
            continue
        line_start = ch == "\n" or (line_start and ch in " \t")
        i += 1
    return mask


CASES = [
    "", "#", "'", '"', "\\", '"\\', "'\\", "a'b", "1'000'000", "x = 'a';", 's = "a\\"b";', '"abc\n#x\n',
    '# 1 "f.c"\n  # pragma x "y\n  a # b\n', "\t #x\n", 'f("unterminated\n#line 3\n', "c = '\\n'; d = '\\\\';",
    '"a\\\nb" # x\n#y', "é'x'", "_'a'", ' "x"#y\n"', "#a\n\n# b\n \t#c", '"\\', "'\\\n'",
]


@pytest.mark.parametrize("text", CASES)
def test_the_scan_is_the_definition_on_the_corners(text):
    assert rewrite._Source._literal_mask(text) == defined_mask(text)


def test_the_scan_is_the_definition_on_random_text():
    rng = random.Random(41)
    alphabet = "\"'#\n \t\\a1_.;(é"
    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        assert rewrite._Source._literal_mask(text) == defined_mask(text), repr(text)
    for _ in range(200):  # longer stretches between the characters that matter
        text = "".join(rng.choice(["\"", "'", "#", "\n", " ", "\\", "int x = 1;", "\t", "a"]) for _ in range(300))
        assert rewrite._Source._literal_mask(text) == defined_mask(text), repr(text)


def defined_declarator_paren(rest: str) -> tuple[int, str | None] | None:
    """The definition, one character at a time (the rewriter's scan until issue 41)."""
    i, n = 0, len(rest)
    while i < n:
        ch = rest[i]
        if rest.startswith("[[", i):
            i = rest.find("]]", i) + 2 if rest.find("]]", i) >= 0 else n
            continue
        if ch == "(":
            m = rewrite._IDENT_BEFORE.search(rest, 0, i)
            word = m.group(1) if m else None
            close = i
            depth = 0
            for j in range(i, n):
                if rest[j] == "(":
                    depth += 1
                elif rest[j] == ")":
                    depth -= 1
                    if depth == 0:
                        close = j
                        break
            else:
                return None
            if word in rewrite._NOT_DECLARATOR:
                i = close + 1
                continue
            if word is None or word in rewrite._TYPE_WORDS:
                return i, None
            return i, word
        if ch == "=" and rest[i - 1 : i] not in ("<", ">", "!", "=") and rest[i + 1 : i + 2] != "=":
            return None
        i += 1
    return None


HEADS = ["", "int f(int a)", "static int x = g(1)", "void (*f(int))(int)", "[[nodiscard]] int f()", "[[x", "f(",
         "template <class T> T g(T a = T())", "int a == b(c)", "auto f() -> decltype(x(1))", "bool operator==(A)",
         "__attribute__((x)) int f(int)", "if (a) b(", "int x[[", "a<=b(c)", "x != f(y)", "sizeof(int) f(int)"]


@pytest.mark.parametrize("head", HEADS)
def test_a_declarator_is_found_as_defined_on_the_corners(head):
    assert rewrite._find_declarator_paren(head) == defined_declarator_paren(head)


def test_a_declarator_is_found_as_defined_on_random_heads():
    rng = random.Random(37)
    pieces = ["int", " ", "f", "(", ")", "[[", "]]", "=", "==", "<", ">", "!", "sizeof", "if", "operator", "x", "\n",
              "void", "__attribute__", ",", "*"]
    for _ in range(5000):
        head = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        assert rewrite._find_declarator_paren(head) == defined_declarator_paren(head), repr(head)


def test_a_line_is_counted_as_defined():
    text = '# 1 "a.c"\nint a;\n\n# 7 "b.h" 1 3\nx\ny\n# 2 "a.c" 2\nz\n'
    src = rewrite._Source(text)
    for pos in range(len(text) + 1):
        i = src._marker_index(pos)
        want = ("<input>", text.count("\n", 0, pos) + 1) if i < 0 else \
            (src.markers[i][2], src.markers[i][1] + text.count("\n", src.markers[i][0], pos))
        assert src.location(pos) == want, pos
    assert rewrite._Source("ab\ncd").location(4) == ("<input>", 2)


def _preprocessed(source: Path, tmp_path: Path) -> str:
    out = tmp_path / f"{source.stem}.ii"
    includes = [f"-I{d}" for d in toolchain.include_dirs()]
    proc = subprocess.run(["g++", "-E", "-std=gnu++17", "-x", "c++", "-DBANG_EMU_REWRITE", *includes, "-include",
                           str(toolchain.INCLUDE_DIR / "bang.h"), str(source), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out.read_text(errors="replace")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("source", [PROGRAMS / "features.mlu", PROGRAMS / "sigmoid_lab.mlu",
                                    REPO / "reference_kernels" / "example" / "mlu" / "matmul_pipeline.mlu"],
                         ids=lambda p: p.stem)
def test_the_scan_is_the_definition_on_preprocessed_units(source, tmp_path):
    text = _preprocessed(source, tmp_path)
    mask = rewrite._Source._literal_mask(text)
    assert mask == defined_mask(text)
    assert 0 < sum(mask) < len(text)  # the unit has literals and line markers, and code
    heads = [text[max(0, m.start() - 400):m.start()] for m in re.finditer(r"\{", text)]
    assert len(heads) > 100
    for head in heads:
        assert rewrite._find_declarator_paren(head) == defined_declarator_paren(head)
