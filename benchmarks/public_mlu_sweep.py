"""Compile every public `.mlu` of the fetched mirrors with cncc-emu (-c) and group the failures by first error.

    .venv/bin/python benchmarks/public_mlu_sweep.py [--mirrors /work/.mirror] [--jobs 2] [--json out.json]
        [--device-module | --wasm]

Each mirror is a bare git repository at `<mirrors>/<owner>+<name>/repo`. For every `.mlu` at its HEAD the
file's folder is exported with `git archive` (the headers beside it come along; a folder at the repository
root is exported without its subfolders), and the file is compiled with `cncc-emu -c --bang-mlu-arch=mtp_372`:
a syntax and semantic check, nothing runs. Nothing is copied into this repository; the exports live in a
temporary directory.

Failures are grouped by their first error, classified as
  * missing builtin X      -- a BANG builtin (`__bang_*`, `__memcpy*`, `__sync*`, ...) the emulator lacks
  * missing header Y (cncc) -- a header real cncc/Neuware ships that the emulation headers lack
  * missing header Y (project) -- a header of the project itself that is not in the exported folder (the code's
    own packaging: mlu-ops internals, torch_mlu sources); classified, not fixed
  * unsupported: ...       -- what the emulator does not model (inline assembly other than `sync`)
Headers of foreign libraries (CNNL's cnnl.h) are stubbed in the sweep's own temporary include directory
(`FOREIGN_STUBS`), never in the emulator's.
  * code: ...              -- anything else, with the compiler's message (names and types normalised)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "sandbox"))

from bang_emu import safe_tar  # noqa: E402

# The public repositories of issue 12 (owner+name as fetched); others found under --mirrors are swept too.
MIRRORS = [
    "Cambricon+mlu-ops", "Cambricon+torch_mlu", "CambriconECO+BANGC_Gemm_Tutorial",
    "liaohsiaopin+Cambricon_BangC_Practice", "Yuichi1001+2024-AICS-EXP", "kolp323+Cambricon-MLU-Kernel-Labs",
    "geotle77+UCAS_AICS", "henryli2002+Intelligent-Computing-Systems-labs",
    "yelloworange10+Intelligent-Computing-System-Experiment", "LuoXukun+AI-homework",
    "SeanLi-OI+AI-Computing-System-Lab", "AnthonyHaozeZhu+Intelligent-computing-system",
]
# Headers that real cncc / the Neuware SDK put on the include path (a program may include them by name).
CNCC_HEADERS = re.compile(
    r"^(bang|mlu|cnrt|cnrt_data|cndrv_api|cndev|cnnl|cnnl_extra|cnpapi|cn_api|cnrtc|cnpx|bang_fp16|bang_pipeline|"
    r"bang_runtime|bang_fusor|bang_device_functions\w*|bang_device_types|bang_math\w*|bang_host_functions\w*|__clang_bang_\w+)\.h$")
BUILTIN = re.compile(r"^(__bang_\w+|__memcpy\w*|__sync\w*|__nramset\w*|__gdramset\w*|__memset\w*|__cn_\w+|"
                     r"__float2\w+|__half2\w+|__bfloat\w+|__is_\w+|__mluop_\w+|__bang\w*)$")
# cnnl.h belongs to CNNL, Cambricon's separate neural-network library (not cncc, not the emulator's business): the
# declarations mlu-ops' core/cnnl_helper.h needs, written to the sweep's own include directory (never to sandbox/),
# so the kernels behind that helper are compiled. Types and calls only; nothing here runs.
FOREIGN_STUBS = {"cnnl.h": """#pragma once
typedef enum { CNNL_STATUS_SUCCESS = 0, CNNL_STATUS_NOT_INITIALIZED = 1, CNNL_STATUS_ALLOC_FAILED = 2,
               CNNL_STATUS_BAD_PARAM = 3, CNNL_STATUS_INTERNAL_ERROR = 4, CNNL_STATUS_ARCH_MISMATCH = 5,
               CNNL_STATUS_EXECUTION_FAILED = 6, CNNL_STATUS_NOT_SUPPORTED = 7 } cnnlStatus_t;
typedef struct cnnlContext *cnnlHandle_t;
typedef struct cnnlTensorStruct *cnnlTensorDescriptor_t;
typedef struct cnnlOpTensorStruct *cnnlOpTensorDescriptor_t;
typedef struct cnnlOpTensorStruct *cnnlOpTensorDesc_t;
cnnlStatus_t cnnlCreate(cnnlHandle_t *handle);
cnnlStatus_t cnnlDestroy(cnnlHandle_t handle);
cnnlStatus_t cnnlSetQueue(cnnlHandle_t handle, void *queue);
cnnlStatus_t cnnlCreateTensorDescriptor(cnnlTensorDescriptor_t *desc);
cnnlStatus_t cnnlDestroyTensorDescriptor(cnnlTensorDescriptor_t desc);
"""}
FIRST_ERROR = re.compile(r"^(?P<loc>[^\s:][^:]*:\d+(?::\d+)?): (?:fatal )?error: (?P<msg>.*)$")
MAX_HEADER_LOOKUPS = 24  # mlu-ops abs_block.mlu needs 13 of its own header folders
ANY_MISSING = re.compile(r"'(\w+)' (?:was not declared in this scope|has not been declared)|there are no arguments to "
                         r"'(\w+)' that depend|no matching function for call to '(\w+)\(")
DRIVER_ERROR = re.compile(r"(?:cncc-emu|bang-emu): error: (?P<msg>.*)$")


@dataclass
class Result:
    repo: str
    path: str
    ok: bool
    group: str = ""
    location: str = ""
    message: str = ""
    seconds: float = 0.0
    repo_includes: int = 0  # -I directories of the repository's own headers it needed (as its build adds)
    missing: list[str] = field(default_factory=list)  # every builtin the compiler could not find, not only the first


def git(mirror: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "core.quotepath=off", "--git-dir", str(mirror), *args], capture_output=True,
                          timeout=300, **kw)


def mlu_files(mirror: Path) -> list[str]:
    proc = git(mirror, "ls-tree", "-r", "-z", "--name-only", "HEAD")
    return sorted(p for p in proc.stdout.decode(errors="replace").split("\0") if p.endswith(".mlu"))


def export_folder(mirror: Path, folder: str, into: Path) -> None:
    """`git archive` the folder (recursively; the root only by its own files); if a blob is missing from the
    mirror, export what is there file by file."""
    if folder:
        paths = [folder]
    else:
        listing = git(mirror, "ls-tree", "-z", "--name-only", "HEAD").stdout.decode(errors="replace")
        paths = [p for p in listing.split("\0") if p and "/" not in p]
        listing_types = git(mirror, "ls-tree", "-z", "HEAD").stdout.decode(errors="replace").split("\0")
        blobs = {e.split("\t", 1)[1] for e in listing_types if e and e.split()[1] == "blob"}
        paths = [p for p in paths if p in blobs]
    into.mkdir(parents=True, exist_ok=True)
    tar_path = into / ".export.tar"
    proc = git(mirror, "archive", "-o", str(tar_path), "HEAD", "--", *paths)
    if proc.returncode == 0:
        safe_tar.extract_tar(tar_path, into, unsupported="skip")  # a repository's root may hold a symlink
        tar_path.unlink()
        return
    tar_path.unlink(missing_ok=True)
    listing = git(mirror, "ls-tree", "-r", "-z", "--name-only", "HEAD", "--", *paths).stdout.decode(errors="replace")
    for p in (p for p in listing.split("\0") if p):
        if not folder and "/" in p:
            continue
        blob = git(mirror, "show", f"HEAD:{p}")
        if blob.returncode == 0:
            target = into / p
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blob.stdout)


def _normalise(msg: str) -> str:
    msg = re.sub(r"‘|’", "'", msg)
    msg = re.sub(r"\(first use in this function\)|; did you mean '[^']*'\?", "", msg)
    return msg.strip()


def classify(stderr: str) -> tuple[str, str, str]:
    """(group, location, message) of the first error in cncc-emu's output."""
    for line in stderr.splitlines():
        m = FIRST_ERROR.match(line.strip())
        if m:
            loc, msg = m.group("loc"), _normalise(m.group("msg"))
            break
        d = DRIVER_ERROR.search(line)
        if d:
            loc, msg = "", _normalise(d.group("msg"))
            break
    else:
        tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
        return "code: " + tail[0][:120], "", tail[0]
    if "inline assembly is not supported" in msg:
        return "unsupported: inline assembly", loc, msg
    header = re.match(r"(\S+): No such file or directory", msg)
    if header:
        name = header.group(1)
        kind = "cncc ships it" if CNCC_HEADERS.match(Path(name).name) and "/" not in name else "not in folder"
        return f"missing header {name} ({kind})", loc, msg
    undeclared = re.match(r"'([\w:]+)' (?:was not declared in this scope|has not been declared|is not a member of)",
                          msg)
    if undeclared:
        name = undeclared.group(1)
        return (f"missing builtin {name}" if BUILTIN.match(name) else f"code: undeclared '{name}'"), loc, msg
    dependent = re.match(r"there are no arguments to '(\w+)' that depend on a template parameter", msg)
    if dependent:  # an undeclared name inside a template
        name = dependent.group(1)
        return (f"missing builtin {name}" if BUILTIN.match(name) else f"code: undeclared '{name}'"), loc, msg
    call = re.match(r"no matching function for call to '(\w+)\(", msg)
    if call:
        name = call.group(1)
        return (f"missing builtin overload {name}" if BUILTIN.match(name) else f"code: no matching {name}(...)"), \
            loc, msg
    not_type = re.match(r"'([\w:]+)' does not name a type", msg)
    if not_type:
        return f"code: unknown type '{not_type.group(1)}'", loc, msg
    generic = re.sub(r"'[^']*'", "'…'", msg)
    return "code: " + generic[:120], loc, msg


class RepoHeaders:
    """Headers of one repository materialised on demand under `root`, as the project's own build would put them
    on the include path (-I): a quoted include the exported folder lacks is looked up by path suffix in HEAD."""

    def __init__(self, mirror: Path, root: Path) -> None:
        self.mirror, self.root = mirror, root
        listing = git(mirror, "ls-tree", "-r", "-z", "--name-only", "HEAD").stdout.decode(errors="replace")
        self.paths = [p for p in listing.split("\0") if p]
        self.lock = threading.Lock()

    def include_dir(self, name: str, near: str) -> Path | None:
        """The -I directory that makes `#include "name"` resolve to the repository's file (the one closest to the
        folder `near`), after writing that file there; None when the repository has no such file."""
        hits = [p for p in self.paths if p == name or p.endswith("/" + name)]
        if not hits:
            return None
        best = max(hits, key=lambda p: (len(os.path.commonprefix([p, near])), -len(p)))
        with self.lock:
            target = self.root / best
            if not target.exists():
                blob = git(self.mirror, "show", f"HEAD:{best}")
                if blob.returncode != 0:
                    return None
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blob.stdout)
        return self.root / best[: len(best) - len(name)]


# --wasm: the replay's WebAssembly build of the file (bang_emu/wasm/build.py: clang-19 for wasm32, the shared
# rewriter, the device libc, the import check and the counting pass); -I options as cncc-emu's
WASM_BUILD = r"""
import re
import sys
from pathlib import Path
from bang_emu.wasm import build
includes = [Path(a[2:]) for a in sys.argv[2:] if a.startswith("-I")]
try:
    build.build([Path(sys.argv[1])], includes=includes)
except Exception as e:
    text = str(e)
    # clang's "fatal error: 'x.h' file not found" in g++'s words, which the sweep's header lookup reads
    missing = re.search(r"^(\S+:\d+:\d+): fatal error: '([^']+)' file not found", text, re.M)
    if missing:
        print(f"{missing.group(1)}: fatal error: {missing.group(2)}: No such file or directory", file=sys.stderr)
    print(f"bang-emu: error: {type(e).__name__}: {text}".replace(chr(10), " | ")[:4000], file=sys.stderr)
    sys.exit(1)
"""


def compile_one(repo: str, src: Path, rel: str, work: Path, timeout: float, headers: RepoHeaders,
                stubs: Path | None = None, device_module: bool = False, wasm: bool = False) -> Result:
    obj = work / "out.o"
    start = time.monotonic()
    includes: list[str] = [f"-I{stubs}"] if stubs else []
    looked_up: set[str] = set()
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    for _ in range(MAX_HEADER_LOOKUPS):
        try:
            cmd = ([sys.executable, "-c", WASM_BUILD, str(src), *includes] if wasm else
                   [sys.executable, "-m", "bang_emu.driver", "-c", "--bang-mlu-arch=mtp_372",
                    *(["--emu-device-module"] if device_module else []), *includes, str(src), "-o", str(obj)])
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=src.parent, env=_env())
        except subprocess.TimeoutExpired:
            return Result(repo, rel, False, "timeout", "", f"cncc-emu took more than {timeout:.0f} s",
                          time.monotonic() - start)
        obj.unlink(missing_ok=True)
        if proc.returncode == 0:
            return Result(repo, rel, True, seconds=time.monotonic() - start,
                          repo_includes=len(includes) - bool(stubs))
        group, loc, msg = classify(proc.stderr)
        missing = re.match(r"missing header (\S+) \(not in folder\)", group)
        if not missing or missing.group(1) in looked_up:
            break
        looked_up.add(missing.group(1))
        found = headers.include_dir(missing.group(1), folder)
        if found is None:
            break
        if f"-I{found}" not in includes:
            includes.append(f"-I{found}")
    if group.endswith("(not in folder)"):
        group = group.replace("(not in folder)", "(not in the repository)")
    return Result(repo, rel, False, group, _shorten(loc, src.parent), msg, time.monotonic() - start,
                  len(includes) - bool(stubs),
                  missing_builtins(proc.stderr))


def missing_builtins(stderr: str) -> list[str]:
    """Every BANG builtin the compiler could not find anywhere in its output (undeclared or no matching overload)."""
    return sorted({n for m in ANY_MISSING.finditer(stderr.replace("‘", "'").replace("’", "'"))
                   for n in m.groups() if n and BUILTIN.match(n)})


def _shorten(loc: str, base: Path) -> str:
    return loc.replace(str(base) + "/", "")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT / "sandbox") + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def sweep(mirror_root: Path, jobs: int, timeout: float, only: list[str] | None,
          device_module: bool = False, wasm: bool = False) -> list[Result]:
    names = [n for n in MIRRORS if (mirror_root / n / "repo").is_dir()]
    names += sorted(p.parent.name for p in mirror_root.glob("*/repo") if p.parent.name not in names)
    if only:
        names = [n for n in names if any(o in n for o in only)]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="mlu-sweep-") as td, ThreadPoolExecutor(max_workers=jobs) as pool:
        stubs = Path(td) / "foreign-stubs"
        stubs.mkdir()
        for name, text in FOREIGN_STUBS.items():
            (stubs / name).write_text(text)
        futures = []
        for i, name in enumerate(names):
            mirror = mirror_root / name / "repo"
            repo = name.replace("+", "/", 1)
            exported: dict[str, Path] = {}
            headers = RepoHeaders(mirror, Path(td) / f"r{i}" / "repo-headers")
            for rel in mlu_files(mirror):
                folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
                if folder not in exported:
                    exported[folder] = Path(td) / f"r{i}" / f"f{len(exported)}"
                    export_folder(mirror, folder, exported[folder])
                src = exported[folder] / rel
                if not src.is_file():
                    results.append(Result(repo, rel, False, "not in mirror (blob missing)", "", ""))
                    continue
                work = Path(td) / "obj" / f"{i}-{len(futures)}"
                work.mkdir(parents=True)
                futures.append(pool.submit(compile_one, repo, src, rel, work, timeout, headers, stubs, device_module,
                                           wasm))
        results += [f.result() for f in futures]
    return results


def report(results: list[Result]) -> str:
    lines = []
    per_repo: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        per_repo[r.repo].append(r)
    width = max([len(r) for r in per_repo] + [10])
    lines.append(f"{'repository':<{width}}  files  compiled  failed")
    for repo, rs in per_repo.items():
        ok = sum(r.ok for r in rs)
        lines.append(f"{repo:<{width}}  {len(rs):>5}  {ok:>8}  {len(rs) - ok:>6}")
    ok = sum(r.ok for r in results)
    lines.append(f"{'total':<{width}}  {len(results):>5}  {ok:>8}  {len(results) - ok:>6}")
    groups = Counter(r.group for r in results if not r.ok)
    lines.append("")
    lines.append("failures by first error (files, group: examples)")
    for group, n in groups.most_common():
        examples = [r for r in results if not r.ok and r.group == group][:3]
        lines.append(f"{n:>4}  {group}")
        for r in examples:
            where = f" [{r.location}]" if r.location else ""
            lines.append(f"        {r.repo}: {r.path}{where}: {r.message[:160]}")
    every = Counter(name for r in results if not r.ok for name in r.missing)
    if every:
        lines.append("")
        lines.append("builtins missing anywhere in the failing files (files): " +
                     ", ".join(f"{name} ({n})" for name, n in every.most_common()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--jobs", type=int, default=2, help="parallel compiles (at most 2)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per file")
    ap.add_argument("--only", nargs="*", help="substrings of the mirror names to sweep")
    ap.add_argument("--json", type=Path, help="also write every file's result here")
    ap.add_argument("--device-module", action="store_true",
                    help="compile as the trusted replay's device module (--emu-device-module: its refusals too)")
    ap.add_argument("--wasm", action="store_true",
                    help="build as the replay's WebAssembly module (bang_emu/wasm/build.py: link, import check, count)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    results = sweep(args.mirrors, max(1, min(args.jobs, 2)), args.timeout, args.only, args.device_module, args.wasm)
    if not results:
        print(f"no .mlu files under {args.mirrors}/*/repo", file=sys.stderr)
        return 1
    print(report(results))
    print(f"\n{len(results)} files in {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
