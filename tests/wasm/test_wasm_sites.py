"""Launch sites of the WebAssembly substrate (sandbox/bang_emu/wasm/sites.py, layout.GdramMap, the invoker in
wasm/include/bang.h): a reference kernel's host entry is run natively with the device journal open, the journal's
launch record finds the wasm module's invoker by its site name, the invoker unpacks the record's x86-64 argument
bytes and maps its device pointers, and under wasm2c the kernel computes what the native replay computes for the
same fresh inputs. A pointer outside every journaled buffer traps with a named message. Skipped visibly when the
toolchain is absent (`grade setup --tests` installs it)."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from bang_emu.wasm import build, layout, sites

from tests.emu.emu_helpers import REPLAY
from tests.wasm.wasm_helpers import host_flags

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DRIVER = HERE / "journal_driver.mlu"
WASM2C_RUNTIME = Path("/usr/share/wabt/wasm2c/wasm-rt-impl.c")
KERNELS = {
    "sigmoid": (ROOT / "reference_kernels/sigmoid/vector/mlu/sigmoid_vector.mlu", [], (200_000,)),
    "matmul": (ROOT / "reference_kernels/matmul/scalar_gdram/mlu/matmul_scalar_gdram.mlu", ["-DMATMUL"],
               (24, 40, 16)),
}


def _need_toolchains() -> None:
    absent = build.missing()
    absent += [t for t in ("wasm2c", "gcc", "g++") if not _which(t)]
    absent += [] if WASM2C_RUNTIME.exists() else [str(WASM2C_RUNTIME)]
    if absent:
        pytest.skip("wasm toolchain or wabt/gcc absent: " + ", ".join(absent))


def _which(tool: str) -> bool:
    return any(os.access(Path(d) / tool, os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep))


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}


def _cncc(*args: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "bang_emu.driver", *map(str, args)], capture_output=True,
                          text=True, env=_env())
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------------------ the journal
@dataclass
class Journal:
    """The records of a native journal (runtime/journal.h) this test replays; any other kind fails the test."""

    allocs: list[tuple[int, int]] = field(default_factory=list)  # (lo, bytes)
    ops: list[tuple] = field(default_factory=list)  # ("write", dst, bytes) ("input", index, p, n) ("launch", key,
    #                                                 args) ("output", p, n)


def _string(p: bytes, at: int) -> tuple[str, int]:
    n = struct.unpack_from("<I", p, at)[0]
    return p[at + 4:at + 4 + n].decode(), at + 4 + n


def read_journal(data: bytes) -> Journal:
    assert data[:4] == b"BEJ1"
    out, pos = Journal(), 4
    while pos < len(data):
        kind, size = data[pos], struct.unpack_from("<I", data, pos + 1)[0]
        p, pos = data[pos + 5:pos + 5 + size], pos + 5 + size

        if kind == 1:  # alloc: map_base, map_len, lo, bytes, storage, label
            out.allocs.append(struct.unpack_from("<QQ", p, 16))
        elif kind == 3:  # write: dst, n, bytes
            dst, n = struct.unpack_from("<QQ", p)
            out.ops.append(("write", dst, p[16:16 + n]))
        elif kind == 5:  # memset: dst, value, n
            dst, value, n = struct.unpack_from("<QIQ", p)
            out.ops.append(("write", dst, bytes([value & 0xFF]) * n))
        elif kind == 8:  # launch: key, kernel, file, line, dim x y z, type, n, bytes
            key, at = _string(p, 0)
            _, at = _string(p, at)
            _, at = _string(p, at)
            n = struct.unpack_from("<Q", p, at + 20)[0]
            out.ops.append(("launch", key, p[at + 28:at + 28 + n]))
        elif kind == 9:  # mark: what, index, p, n, text
            what, index, ptr, n = struct.unpack_from("<BIQQ", p)
            if what == 2:
                out.ops.append(("input", index, ptr, n))
            elif what == 3:
                out.ops.append(("output", ptr, n))
        else:
            raise AssertionError(f"a journal record of kind {kind} this test does not replay")
    return out


def plan(journal: Journal, inputs: list[np.ndarray], site_names: dict[str, int],
         args: bytes | None = None) -> tuple[bytes, layout.GdramMap]:
    """The host's plan (tests/wasm/host.c) for the journal: its buffers placed by GdramMap, its writes, the fresh
    inputs where the inputs were marked, each launch's argument bytes (or `args` instead), the output."""
    gdram = layout.GdramMap()
    for lo, nbytes in journal.allocs:
        gdram.place(lo, nbytes)
    body = b""
    for op in journal.ops:
        if op[0] == "write":
            body += b"W" + struct.pack("<II", gdram.offset(op[1], len(op[2])), len(op[2])) + op[2]
        elif op[0] == "input":
            data = inputs[op[1]].tobytes()
            assert len(data) == op[3]
            body += b"W" + struct.pack("<II", gdram.offset(op[2], op[3]), op[3]) + data
        elif op[0] == "launch":
            assert sites.site_name(op[1]) in site_names, (sites.site_name(op[1]), site_names)
            raw = op[2] if args is None else args
            body += b"L" + struct.pack("<I", len(raw)) + raw
        else:
            body += b"O" + struct.pack("<II", gdram.offset(op[1], op[2]), op[2])
    head = struct.pack("<II", gdram.memory_bytes() // layout.PAGE, len(gdram.buffers))
    head += b"".join(struct.pack("<QQI", b.lo, b.bytes, b.offset) for b in gdram.buffers)
    return head + body, gdram


# ------------------------------------------------------------------------------------------------ native side
@dataclass
class Built:
    name: str
    journal: Path
    module: Path  # the native device module
    wasm: build.BuildResult
    host_dir: Path
    hosts: dict[str, Path] = field(default_factory=dict)  # site name -> host executable


def fresh_inputs(name: str) -> list[np.ndarray]:
    shape = KERNELS[name][2]
    if name == "sigmoid":
        return [np.linspace(-6.0, 6.0, shape[0], dtype=np.float32)]
    m, k, n = shape
    return [np.linspace(-2.0, 2.0, m * k, dtype=np.float32), np.linspace(1.5, -1.0, k * n, dtype=np.float32)]


@pytest.fixture(scope="module", params=list(KERNELS))
def built(request, tmp_path_factory) -> Built:
    _need_toolchains()
    name = request.param
    source, flags, shape = KERNELS[name]
    out = tmp_path_factory.mktemp(f"sites-{name}")
    macro = f'-DKERNEL_MLU="{source}"'  # the site's file is the kernel's own path, as in the wasm build
    _cncc("--bang-arch=compute_30", "-O2", *flags, macro, DRIVER, "-o", out / "driver")
    _cncc("--emu-device-module", "-c", "-O2", *flags, macro, DRIVER, "-o", out / "device.o")
    from bang_emu import device_module

    linked = device_module.link([out / "device.o"], out / "module.so")
    assert linked.ok, linked.message
    journal = out / "run.journal"
    ran = subprocess.run([str(out / "driver"), journal, out / "run.trace.jsonl", *map(str, shape)],
                         capture_output=True, text=True, env=_env(), timeout=300)
    assert ran.returncode == 0, ran.stderr
    return Built(name, journal, out / "module.so", build.build([source]), out)


def native_replay(b: Built, tmp_path: Path) -> np.ndarray:
    inputs, outputs = tmp_path / "inputs", tmp_path / "outputs"
    inputs.mkdir()
    outputs.mkdir()
    for k, data in enumerate(fresh_inputs(b.name)):
        data.tofile(inputs / f"c0.{k}.bin")
    proc = subprocess.run([sys.executable, "-c", REPLAY, b.journal, b.module, inputs, outputs],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0 and proc.stdout.startswith("0 "), proc.stdout + proc.stderr
    return np.fromfile(outputs / "c0.out.bin", dtype=np.float32)


def compile_host(wasm: bytes, site: str, work: Path) -> Path:
    """wasm2c + gcc: the counted module and tests/wasm/host.c, replaying through the site's exported invoker."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "device.wasm").write_bytes(wasm)
    subprocess.run(["wasm2c", str(work / "device.wasm"), "-n", "device", "-o", str(work / "device.c")], check=True)
    header = (work / "device.h").read_text()
    fn = re.search(rf"/\* export: '{re.escape(site)}' \*/\n\w+ (\w+)\(", header).group(1)
    exe = work / f"host-{fn}"
    subprocess.run(["gcc", "-O2", f"-I{work}", f"-I{WASM2C_RUNTIME.parent}", "-DREPLAY", f"-DINVOKER={fn}",
                    f"-DGDRAM_BASE={layout.GDRAM_BASE}u", f"-DNRAM_BASE={layout.NRAM_BASE}u", f"-DWRAM_BASE={layout.WRAM_BASE}u",
                    f"-DSRAM_BASE={layout.SRAM_BASE}u",
                    f"-DARGS_BASE={layout.ARGS_BASE}u", f"-DARGS_BYTES={layout.ARGS_BYTES}u", "-DWITH_BANG",
                    *host_flags(),
                    str(work / "device.c"), str(HERE / "host.c"), str(WASM2C_RUNTIME), "-lm", "-o", str(exe)],
                   check=True)
    return exe


def wasm_host(b: Built, site: str) -> Path:
    if site not in b.hosts:
        b.hosts[site] = compile_host(b.wasm.wasm, site, b.host_dir / "w2c")
    return b.hosts[site]


def wasm_replay(b: Built, tmp_path: Path, args: bytes | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    journal = read_journal(b.journal.read_bytes())
    launches = [op for op in journal.ops if op[0] == "launch"]
    assert len(launches) == 1
    site = sites.site_name(launches[0][1])
    data, _ = plan(journal, fresh_inputs(b.name), b.wasm.sites, args)
    (tmp_path / "plan.bin").write_bytes(data)
    proc = subprocess.run([str(wasm_host(b, site)), tmp_path / "plan.bin", tmp_path / "out.bin"],
                          capture_output=True, text=True, timeout=300)
    return proc, tmp_path / "out.bin"


def _counters(stdout: str) -> dict[str, int]:
    words = stdout.split("\n")[1].split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}


# ------------------------------------------------------------------------------------------------ tests
def test_the_journals_launch_finds_the_wasm_invoker_of_its_site(built):
    journal = read_journal(built.journal.read_bytes())
    (launch,) = [op for op in journal.ops if op[0] == "launch"]
    # both instantiations of the entry's two sites (half, float) are exported, under the native key's name
    assert len(built.wasm.sites) == 2
    float_site = sites.site_name(launch[1])
    assert float_site in built.wasm.sites and float_site.endswith(
        {"sigmoid": "(const f32*,f32*,i64)", "matmul": "(const f32*,const f32*,f32*,i32,i32,i32)"}[built.name])
    # the argument pack as the native journal wrote it: x86-64 sizes, packed one after the other
    assert len(launch[2]) == {"sigmoid": 8 + 8 + 8, "matmul": 3 * 8 + 3 * 4}[built.name]


def test_the_wasm_invoker_computes_what_the_native_replay_computes(built, tmp_path):
    native = native_replay(built, tmp_path)
    proc, out = wasm_replay(built, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("launch 0 begun 1\n"), proc.stdout
    got = np.fromfile(out, dtype=np.float32)
    assert got.shape == native.shape and np.isfinite(got).all()
    if built.name == "matmul":  # scalar float code, the same operations in the same order: bit for bit
        assert np.array_equal(got, native)
        m, k, n = KERNELS["matmul"][2]
        # the counters restart when the kernel starts: the invoker's unpacking is not charged
        assert _counters(proc.stdout) == {"load_gdram": 2 * m * k * n, "load_nram": 0, "load_wram": 0,
                                          "load_sram": 0, "load_other": 0, "store_gdram": m * n, "store_nram": 0,
                                          "store_wram": 0, "store_sram": 0, "store_other": 0}
    else:  # the test host's sigmoid is expf, not the emulator's builtin: within its rounding
        assert np.abs(got - native).max() < 1e-6


def _pointer_args(built: Built) -> tuple[bytes, list[int]]:
    journal = read_journal(built.journal.read_bytes())
    (launch,) = [op for op in journal.ops if op[0] == "launch"]
    return launch[2], [struct.unpack_from("<Q", launch[2], at)[0] for at in (0, 8)]


@pytest.mark.parametrize("where", ["below every buffer", "past the last buffer", "a host address", "between buffers"])
def test_a_forged_pointer_argument_traps_with_a_named_message(built, tmp_path, where):
    args, (first, second) = _pointer_args(built)
    journal = read_journal(built.journal.read_bytes())
    ends = sorted(lo + n for lo, n in journal.allocs)
    forged = {"below every buffer": layout.JOURNAL_REGION_BASE - 64, "past the last buffer": ends[-1] + 4096,
              "a host address": 0x7FFD_1234_5678, "between buffers": ends[0] + 64}[where]
    assert all(not (lo <= forged <= lo + n) for lo, n in journal.allocs)
    proc, _ = wasm_replay(built, tmp_path, struct.pack("<Q", forged) + args[8:])
    assert proc.returncode == 3 and "trap" in proc.stdout, proc.stdout + proc.stderr
    assert f"launch argument 0: pointer {forged:#x} is not inside any journaled device buffer" in proc.stderr
    assert "launch " not in proc.stdout.replace("trap", "")  # the kernel never started


def test_argument_bytes_of_another_size_are_refused_before_the_kernel_starts(built, tmp_path):
    args, _ = _pointer_args(built)
    proc, _ = wasm_replay(built, tmp_path, args[:-4])
    assert proc.returncode == 0 and proc.stdout.startswith("launch 1 begun 0\n"), proc.stdout + proc.stderr


def test_a_sites_argument_layout_covers_the_journals_packed_arguments(built):
    """What the wasm replay notes of a launch for capture (runtime/capture.cpp note_packed_launch_args): each
    argument's kind, size and pointee from the site key, the sizes adding up to the journal's packed bytes."""
    journal = read_journal(built.journal.read_bytes())
    (launch,) = [op for op in journal.ops if op[0] == "launch"]
    layout = sites.arg_layout(launch[1])
    assert layout == {"sigmoid": "p,8,4,f;p,8,4,f;i,8,0,i",
                      "matmul": "p,8,4,f;p,8,4,f;p,8,4,f;i,4,0,i;i,4,0,i;i,4,0,i"}[built.name]
    assert sum(int(entry.split(",")[1]) for entry in layout.split(";")) == len(launch[2])


# describe_launch_arg (bang_emu/device.h): a pointer's pointee size and f/i/u (raw bytes for void, a pointer or a
# class), an integer's size and signedness, anything else "other" (its size, 0 when its name does not say)
@pytest.mark.parametrize(("spelling", "entry"), [
    ("void*", "p,8,1,-"), ("const _Float16*", "p,8,2,f"), ("float**", "p,8,8,-"), ("unsigned char*", "p,8,1,u"),
    ("Pair*", "p,8,1,-"), ("bool", "i,1,0,u"), ("char", "i,1,0,i"), ("long unsigned int", "i,8,0,u"),
    ("short int", "i,2,0,i"), ("float", "o,4,0,-"), ("double", "o,8,0,-"), ("mluMemcpyDirection_t", "o,0,0,-"),
])
def test_each_argument_is_described_as_the_native_launch_describes_it(spelling, entry):
    key = ("static const char* bang_emu::ReplaySite<Tag, F, D>::key() [with Tag = bang_emu::SiteTag<7ULL, 3, 0>; "
           f"F = main()::<lambda(float*, int)>; D = {{{spelling}, int}}]")
    assert sites.arg_layout(key) == f"{entry};i,4,0,i"


# ------------------------------------------------------------------------------------------------ names, layout
@pytest.mark.parametrize(("native", "wasm", "canonical"), [
    ("const float*", "float const*", "const f32*"), ("long int", "long long", "i64"),
    ("long unsigned int", "unsigned long long", "u64"), ("int", "int", "i32"), ("_Float16*", "half*", "f16*"),
    ("short unsigned int", "unsigned short", "u16"), ("bool", "bool", "bool"), ("double", "double", "f64"),
])
def test_g_plus_plus_and_clang_spellings_of_a_type_have_one_canonical_name(native, wasm, canonical):
    assert sites.canonical_type(native) == sites.canonical_type(wasm) == canonical


def test_a_key_that_is_not_a_site_is_refused():
    with pytest.raises(sites.SiteError, match="not a launch-site key"):
        sites.site_name("static const char* something_else()")
    assert sites.invoker_site("sigmoid_vector_kernel<float>(float const*, float*, long long)") is None


def test_the_layout_matches_the_native_runtime():
    gdram = (ROOT / "sandbox/bang_emu/runtime/gdram.cpp").read_text()
    journal = (ROOT / "sandbox/bang_emu/runtime/journal.h").read_text()
    assert f"kRegionBase = {layout.JOURNAL_REGION_BASE:#x}ull" in gdram
    assert "kJournalMaxBytes = 1ull << 30" in journal and layout.JOURNAL_CAP_BYTES == 1 << 30
    assert layout.STACK_BYTES < layout.ARGS_BASE < layout.ONCHIP_BASE < layout.NRAM_BASE < layout.WRAM_BASE
    assert layout.WRAM_BASE < layout.SRAM_BASE < layout.SRAM_END <= layout.GDRAM_BASE
    assert layout.GDRAM_BASE + layout.JOURNAL_CAP_BYTES <= layout.MAX_MEMORY_BYTES == (1 << 32) - 65536


def test_the_gdram_map_places_buffers_apart_with_their_alignment_and_refuses_the_rest():
    gdram = layout.GdramMap()
    base = layout.JOURNAL_REGION_BASE
    a = gdram.place(base + 0x1_0000_0040, 4000)
    b = gdram.place(base + 0x9_0000_0000, 64)  # far apart in the journal, side by side here
    assert a == layout.GDRAM_BASE + 0x40 and b % 4096 == 0 and a + 4000 + layout.GDRAM_GAP <= b
    assert gdram.offset(base + 0x1_0000_0040 + 100, 4) == a + 100
    assert gdram.offset(base + 0x1_0000_0040 + 4000) == a + 4000  # one past the end, as a pointer may be
    for address in (base + 0x1_0000_0000, base + 0x1_0000_0040 + 3999, 0x7FFD_0000_0000, 0):
        with pytest.raises(layout.LayoutError, match="not inside any journaled device buffer"):
            gdram.offset(address, 2)
    with pytest.raises(layout.LayoutError, match="not in the journal's device region"):
        gdram.place(0x7FFD_0000_0000, 64)
    with pytest.raises(layout.LayoutError, match="overlaps"):
        gdram.place(base + 0x9_0000_0020, 64)
    gdram.place(base + 0xA_0000_0000, layout.JOURNAL_CAP_BYTES)  # a buffer as large as a whole journal fits
    with pytest.raises(layout.LayoutError, match="does not fit"):
        gdram.place(base + 0xB_0000_0000, 3 * layout.GiB)
    assert gdram.memory_bytes() <= layout.MAX_MEMORY_BYTES and gdram.memory_bytes() % layout.PAGE == 0


@pytest.mark.parametrize("calls_it", [False, True])
def test_a_kernel_cannot_restart_its_own_counters(tmp_path, calls_it):
    # launch_begin (the counters restart) is the invoker's; a kernel that calls it too is stopped by name
    _need_toolchains()
    src = tmp_path / "restart.mlu"
    src.write_text(textwrap.dedent(f"""
        #include <bang.h>
        __mlu_global__ void kernel(float *y, int n) {{
          y[0] = 1.0f;
          {"__bang_wasm_launch_begin();" if calls_it else ""}
          for (int i = 0; i < n; ++i) y[i] = (float)i * 0.5f;
        }}
        void entry(float *y, int n) {{
          cnrtDim3_t dim = {{1, 1, 1}};
          kernel<<<dim, cnrtFuncTypeBlock, nullptr>>>(y, n);
        }}
    """))
    result = build.build([src])
    (site,) = result.sites
    lo = layout.JOURNAL_REGION_BASE + 0x40
    gdram = layout.GdramMap()
    gdram.place(lo, 256)
    args = struct.pack("<Qi", lo, 8)
    data = struct.pack("<IIQQI", gdram.memory_bytes() // layout.PAGE, 1, lo, 256, gdram.offset(lo))
    data += b"L" + struct.pack("<I", len(args)) + args
    (tmp_path / "plan.bin").write_bytes(data)
    exe = compile_host(result.wasm, site, tmp_path / "w2c")
    proc = subprocess.run([str(exe), tmp_path / "plan.bin", tmp_path / "out.bin"], capture_output=True, text=True,
                          timeout=60)
    if calls_it:
        assert proc.returncode == 3 and "launch_begin called twice in one launch" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0 and proc.stdout.startswith("launch 0 begun 1\n"), proc.stdout + proc.stderr
        assert _counters(proc.stdout)["store_gdram"] == 1 + 8


def test_two_instantiations_of_a_site_that_x86_64_cannot_tell_apart_are_refused(tmp_path):
    # long and long long are both i64 in the journal's ABI: the replay could not pick one, so the build says so
    _need_toolchains()
    src = tmp_path / "twins.mlu"
    src.write_text(textwrap.dedent("""
        #include <bang.h>
        __mlu_global__ void kernel(float *y, long long n) { y[0] = (float)n; }
        template <class I>
        void entry(float *y, I n) {
          cnrtDim3_t dim = {1, 1, 1};
          kernel<<<dim, cnrtFuncTypeBlock, nullptr>>>(y, n);
        }
        template void entry<long>(float *, long);
        template void entry<long long>(float *, long long);
    """))
    with pytest.raises(sites.SiteError, match=r"two launch sites are both 'bang_site:\d+:7:0\(f32\*,i64\)'"):
        build.build([src])
