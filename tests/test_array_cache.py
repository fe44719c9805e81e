"""The public cases' arrays kept on disk (grader/spec/array_cache.py): what a later process loads is what it
would have computed, bit for bit; a twin or a secret seed never reaches the disk; a damaged entry is never
trusted; the folder stays under its cap and out of the build cache a sandbox mounts."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from grader.orchestration.build_cache import default_build_cache
from grader.orchestration.replay import TWIN_SALT
from grader.spec import SeedPlan, array_cache, cases, correctness_cases, load_assignment, perf_case
from grader.spec.seeds import PUBLIC_SEED


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A cache folder of the test's own, and a fresh process's memory (no arrays kept from earlier tests)."""
    monkeypatch.setenv("BANG_GRADER_ARRAY_CACHE", str(tmp_path / "arrays"))
    monkeypatch.setattr(cases, "_DRAWN", cases._Drawn(cases._DRAWN.budget))
    return tmp_path / "arrays"


def fresh_process(monkeypatch) -> None:
    monkeypatch.setattr(cases, "_DRAWN", cases._Drawn(cases._DRAWN.budget))


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.arrays")) if folder.exists() else []


def sigmoid_cases(mode: str = "public", master: str | None = None) -> list[cases.ConcreteCase]:
    spec = load_assignment("sigmoid")
    seeds = SeedPlan.create(mode, master)  # type: ignore[arg-type]
    return [c for c in correctness_cases(spec, seeds) if c.name in ("n7", "n63")] + [perf_case(spec, "vector", seeds)]


def test_a_later_process_loads_the_same_bits_read_only(folder, monkeypatch):
    chosen = sigmoid_cases()
    assert all(c.on_disk for c in chosen) and len(chosen) == 3
    computed = {c.name: (c.make_inputs()["x"].copy(), c.expected("sigmoid").copy()) for c in chosen}
    assert len(entries(folder)) == 2 * len(chosen)  # inputs and reference of each
    fresh_process(monkeypatch)
    before = {p: p.stat().st_mtime_ns for p in entries(folder)}
    for case in chosen:
        x, expected = case.make_inputs()["x"], case.expected("sigmoid")
        assert x.tobytes() == computed[case.name][0].tobytes() and x.dtype == computed[case.name][0].dtype
        assert expected.tobytes() == computed[case.name][1].tobytes() and expected.shape == case.output_shape
        assert not x.flags.writeable and not expected.flags.writeable
        with pytest.raises(ValueError):
            expected[0] = 1.0
    assert {p: p.stat().st_mtime_ns for p in entries(folder)}.keys() == before.keys()  # nothing written again


def test_a_replay_twin_a_secret_seed_and_another_public_master_never_touch_the_disk(folder):
    for case in sigmoid_cases():
        twin = case.replay_twin(TWIN_SALT)
        assert not twin.on_disk
        twin.make_inputs()
        twin.expected("sigmoid")
    others = sigmoid_cases("secret") + sigmoid_cases("secret", PUBLIC_SEED) + sigmoid_cases("public", "sweep-7")
    for case in others:  # a secret plan, even on the public master's text; a seed sweep's master
        assert not case.on_disk
        case.expected("sigmoid")
    assert entries(folder) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "header", "foreign"])
def test_a_damaged_entry_is_removed_and_recomputed(folder, monkeypatch, damage):
    case = sigmoid_cases()[1]
    right = case.expected("sigmoid").copy()
    key = ("expected", "sigmoid", *case._inputs_key)
    path = folder / array_cache.entry_name(key)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[array_cache.ALIGN + 100] ^= 0x10  # a bit of one value
    elif damage == "truncate":
        data = data[:len(data) - 1]
    elif damage == "empty":
        data = bytearray()
    elif damage == "header":
        data[len(array_cache.MAGIC) + 12] ^= 0x01
    else:  # another key's entry under this name
        other = sigmoid_cases()[0]
        other.expected("sigmoid")
        data = bytearray((folder / array_cache.entry_name(("expected", "sigmoid", *other._inputs_key)))
                         .read_bytes())
    path.write_bytes(bytes(data))
    assert array_cache.load(folder, key) is None
    assert not path.exists()  # removed, so the next store writes it whole
    fresh_process(monkeypatch)
    again = case.expected("sigmoid")
    assert again.tobytes() == right.tobytes()
    assert array_cache.load(folder, key) is not None  # stored again, intact


def test_every_part_of_the_key_names_another_entry(folder):
    base = ("expected", "sigmoid", 1, "float32", (("x", (7,)),), (("x", "d"),))
    names = {array_cache.entry_name(base)}
    for index, other in [(1, "matmul"), (2, 2), (3, "float16"), (4, (("x", (8,)),)), (5, (("x", "e"),))]:
        names.add(array_cache.entry_name(base[:index] + (other,) + base[index + 1:]))
    assert len(names) == 6
    array_cache.store(folder, base, {"out": np.arange(3.0)})
    assert array_cache.load(folder, base[:2] + (2,) + base[3:]) is None


def test_the_version_covers_the_drawing_and_reference_code():
    assert set(array_cache._SOURCES) >= {"cases.py", "references.py"}
    assert all((Path(array_cache.__file__).parent / name).is_file() for name in array_cache._SOURCES)


def test_the_folder_is_trimmed_to_its_cap_least_recently_used_first(folder):
    arrays = {"out": np.zeros(4096 // 8 * 10)}  # 40 KB each (and a page of header)
    for i in range(5):
        array_cache.store(folder, ("k", i), arrays)
        os.utime(folder / array_cache.entry_name(("k", i)), (time.time() - 100 + i, time.time() - 100 + i))
    assert array_cache.load(folder, ("k", 0)) is not None  # used just now: the most recent
    size = (folder / array_cache.entry_name(("k", 0))).stat().st_size
    (folder / ".tmp-old").write_bytes(b"x")
    os.utime(folder / ".tmp-old", (time.time() - 7200, time.time() - 7200))
    array_cache.trim(folder, 3 * size)
    assert [p.name for p in entries(folder)] == sorted(array_cache.entry_name(("k", i)) for i in (0, 3, 4))
    assert not (folder / ".tmp-old").exists()


def test_the_folder_is_its_own_beside_the_build_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("BANG_GRADER_ARRAY_CACHE", raising=False)
    monkeypatch.delenv("BANG_GRADER_BUILD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert array_cache.default_array_cache() == tmp_path / "xdg" / "bang-grader" / "arrays"
    assert not array_cache.default_array_cache().is_relative_to(default_build_cache())  # a sandbox's /build
    monkeypatch.setenv("BANG_GRADER_ARRAY_CACHE", "off")
    assert array_cache.default_array_cache() is None
    monkeypatch.setenv("BANG_GRADER_ARRAY_CACHE", str(tmp_path / "mine"))
    assert array_cache.default_array_cache() == tmp_path / "mine"


def test_without_a_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("BANG_GRADER_ARRAY_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    fresh_process(monkeypatch)
    sigmoid_cases()[0].expected("sigmoid")
    assert not (tmp_path / "xdg").exists()


def test_an_unwritable_folder_only_costs_the_computing(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("BANG_GRADER_ARRAY_CACHE", str(blocker / "arrays"))
    fresh_process(monkeypatch)
    case = sigmoid_cases()[0]
    assert case.expected("sigmoid").shape == case.output_shape
