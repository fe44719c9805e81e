"""Python API of the emulator toolchain: compile .mlu files, locate headers, build/locate the runtime.

The runtime library (libbang_emu.so) is built once per version of its sources: `cncc-emu
--prebuild-runtime [DIR]` at image build time, otherwise on first use into $BANG_EMU_CACHE or
~/.cache/bang_emu, keyed by a hash of the sources (so a read-only root works with a prebuilt copy).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
RUNTIME_SRC_DIR = PACKAGE_DIR / "runtime"
PREBUILT_DIR = PACKAGE_DIR / "_runtime"
LIB_NAME = "libbang_emu.so"
DEVICES_JSON = PACKAGE_DIR / "devices.json"
# Hidden by default: only the documented C/CNRT/BANG API and the bang_emu_* entry points are exported (their
# headers are included under `#pragma GCC visibility push(default)` in runtime/runtime.h), so student code
# cannot reach the runtime's tables, key or counters by symbol name.
RUNTIME_CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden",
                    "-fvisibility-inlines-hidden"]


def include_dirs() -> list[Path]:
    """Header directories for .mlu and binding files: BANG + CNRT, then the torch_mlu emulation if present."""
    dirs = [INCLUDE_DIR]
    torch_inc = PACKAGE_DIR / "torch_mlu_emu" / "include"
    if torch_inc.is_dir():
        dirs.append(torch_inc)
    return dirs


def _runtime_sources() -> list[Path]:
    files = sorted(RUNTIME_SRC_DIR.glob("*.cpp")) + sorted(RUNTIME_SRC_DIR.glob("*.h"))
    files += sorted(INCLUDE_DIR.rglob("*.h"))
    files += [DEVICES_JSON, PACKAGE_DIR / "devices.py"]  # the device table is compiled in (devices_gen.h)
    return files


def runtime_hash() -> str:
    h = hashlib.sha256()
    for f in _runtime_sources():
        h.update(f.relative_to(PACKAGE_DIR).as_posix().encode())
        h.update(f.read_bytes())
    h.update(" ".join(RUNTIME_CXXFLAGS).encode())
    return h.hexdigest()[:16]


def _build_roots() -> list[Path]:
    roots = []
    if os.environ.get("BANG_EMU_CACHE"):
        roots.append(Path(os.environ["BANG_EMU_CACHE"]))
    roots.append(Path.home() / ".cache" / "bang_emu")
    return roots


def _lookup_roots() -> list[Path]:
    # a copy prebuilt into the package (image build time) serves read-only roots
    return [*_build_roots()[:-1], PREBUILT_DIR, _build_roots()[-1]]


def build_runtime(root: Path) -> Path:
    """Build libbang_emu.so into root/<hash>/ (idempotent, safe against concurrent builders)."""
    target_dir = root / runtime_hash()
    lib = target_dir / LIB_NAME
    if lib.exists():
        return target_dir
    target_dir.mkdir(parents=True, exist_ok=True)
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():
            return target_dir
        fd, tmp = tempfile.mkstemp(dir=target_dir, suffix=".so")
        os.close(fd)
        gen_dir = Path(tempfile.mkdtemp(dir=target_dir, prefix="gen-"))
        (gen_dir / "devices_gen.h").write_text(_devices_header())
        cmd = ["g++", *RUNTIME_CXXFLAGS, f"-I{gen_dir}", *[str(p) for p in sorted(RUNTIME_SRC_DIR.glob("*.cpp"))],
               "-o", tmp, "-ldl"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        (gen_dir / "devices_gen.h").unlink()
        gen_dir.rmdir()
        if proc.returncode != 0:
            os.unlink(tmp)
            raise RuntimeError("building the bang_emu runtime failed:\n" + proc.stderr[-4000:])
        os.replace(tmp, lib)
    return target_dir


def _devices_header() -> str:
    # the one device table (also read by the host); loaded by path so this works however toolchain was imported
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bang_emu_devices", PACKAGE_DIR / "devices.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cpp_header()


def runtime_dir() -> Path:
    """Directory holding the runtime library for the current sources, building it if needed."""
    h = runtime_hash()
    for root in _lookup_roots():
        if (root / h / LIB_NAME).exists():
            return root / h
    errors = []
    for root in _build_roots():
        try:
            return build_runtime(root)
        except OSError as e:  # read-only location: try the next one
            errors.append(f"{root}: {e}")
    raise RuntimeError("no writable cache for the bang_emu runtime: " + "; ".join(errors))


def runtime_link_args() -> list[str]:
    """Linker arguments that link a host object/extension against the emulator runtime."""
    d = runtime_dir()
    return [f"-L{d}", "-lbang_emu", f"-Wl,-rpath,{d}", "-pthread", "-ldl"]


def compile_mlu(src: str | os.PathLike, out: str | os.PathLike, flags: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run `cncc-emu [flags] src -o out` (add "-c" / "-fPIC" to flags for an object of an extension)."""
    cmd = [sys.executable, "-m", "bang_emu.driver", *(flags or []), str(src), "-o", str(out)]
    env = dict(os.environ)
    sandbox_root = str(PACKAGE_DIR.parent)
    env["PYTHONPATH"] = sandbox_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run(cmd, capture_output=True, text=True, env=env)
