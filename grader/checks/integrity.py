"""Host-side integrity checks of what the sandbox claims about a call (DESIGN.md, "Threat model").

The trace and the output record come from the emulator runtime inside the student's process. The reader
(grader.orchestration.trace_summary) has already verified each line's HMAC, its call id and its sequence
number; what is checked here is whether the verified claims add up against facts the host holds itself: its
device table, the symbols of the extension it built, the output array it received, and the work the
operator needs for the case's shapes. Every failure is one line saying what did not add up.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader.i18n import _
from grader.spec.references import ACTIVATION_BUILTINS, MULTIPLY_BUILTINS, RequiredWork

MAX_FINDINGS = 8
TIME_FLOOR_FACTOR = 0.5  # DESIGN.md "Record fields and host rules": keeps every honest kernel above the floor
FLOOR_ELEMENT_BYTES = 2  # the smallest element a vector builtin works on here (half)
NM_TIMEOUT_SECONDS = 30.0
SYMBOL_TYPES = frozenset("TtWwi")  # defined code symbols (text, weak, indirect)


# -- the host's device table --------------------------------------------------------------------------------
def _normalise_table(data: Any) -> dict[str, dict[str, Any]]:
    if isinstance(data, dict) and "devices" in data:
        data = data["devices"]
    if isinstance(data, list):
        return {str(d["name"]): d for d in data if isinstance(d, dict) and "name" in d}
    if isinstance(data, dict):
        return {str(k): v for k, v in data.items() if isinstance(v, dict)}
    return {}


@functools.cache
def device_table() -> dict[str, dict[str, Any]]:
    """sandbox/bang_emu/devices.json, the one device table (the runtime compiles in the same figures)."""
    from bang_emu import devices

    return _normalise_table(devices.load())


def device_profile(device: str) -> dict[str, Any] | None:
    return device_table().get(device)


# -- the built extension's symbols --------------------------------------------------------------------------
def base_name(name: str) -> str:
    """`void ns::k<float>(float const*, int)` or `k<half>` -> `k`: the plain function name."""
    name = name.replace("(anonymous namespace)::", "")  # nm -C's spelling of an anonymous namespace
    depth = 0
    cut = len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = name[:cut].strip()
    while head.endswith(">"):  # drop trailing template arguments, nested ones included
        depth = 0
        for j in range(len(head) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(head[j], 0)
            if depth == 0:
                head = head[:j].rstrip()
                break
        else:
            break
    head = head.split("::")[-1]
    parts = head.split()
    return parts[-1] if parts else head


def _source_name(symbol: str, at: int) -> tuple[str, int]:
    """An Itanium <source-name> (`6kernel`) at `at`: the identifier and the index after it."""
    end = at
    while end < len(symbol) and symbol[end].isdigit():
        end += 1
    length = int(symbol[at:end])
    if length <= 0 or end + length > len(symbol):
        raise ValueError("truncated source name")
    return symbol[end:end + length], end + length


def _skip_template_args(symbol: str, at: int) -> int:
    """The index after the template arguments `I ... E` opening at `at` (types, nested names, literals)."""
    depth, i = 0, at
    while i < len(symbol):
        ch = symbol[i]
        if ch.isdigit():
            i = _source_name(symbol, i)[1]
            continue
        if ch == "L" and i + 1 < len(symbol) and symbol[i + 1] != "_":  # literal: L <type> [n] <digits> E
            i += 2
            while i < len(symbol) and (symbol[i].isdigit() or symbol[i] == "n"):
                i += 1
            if i >= len(symbol) or symbol[i] != "E":
                raise ValueError("malformed literal")
        elif ch == "D" and symbol[i + 1:i + 2] in ("F", "v"):  # DF16_ (_Float16), DF16b, Dv4_ (vectors)
            i += 2
            while i < len(symbol) and symbol[i].isdigit():
                i += 1
        elif ch in "INX":
            depth += 1
        elif ch == "E":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unterminated template arguments")


def mangled_base_name(symbol: str) -> str | None:
    """The plain function name of an Itanium-mangled symbol (`_ZN2ns6kernelIfEEvPT_` -> `kernel`), as
    `base_name` gives it for the demangled form; None when `symbol` is not one this reads (CNPAPI reports
    kernels by their mangled name, nm -C demangles: both must meet)."""
    if not symbol.startswith("_Z"):
        return None
    s, i = symbol, 2
    try:
        if s.startswith("L", i):  # internal linkage (a static kernel)
            i += 1
        if s.startswith("St", i):
            i += 2
        if i < len(s) and s[i].isdigit():
            return _source_name(s, i)[0]
        if not s.startswith("N", i):
            return None
        i += 1
        while i < len(s) and s[i] in "rVKRO":  # cv- and ref-qualifiers of a member function
            i += 1
        last = None
        while i < len(s):
            ch = s[i]
            if ch.isdigit():
                last, i = _source_name(s, i)
            elif ch == "I":
                i = _skip_template_args(s, i)
            elif ch == "B":  # ABI tag: B <source-name>
                i = _source_name(s, i + 1)[1]
            elif ch == "L":
                i += 1
            elif ch == "S":  # substitution: St, Sa, ... or S[seq-id]_
                i = i + 2 if s[i + 1:i + 2].isalpha() and s[i + 1] != "_" and not s[i + 1].isupper() \
                    else s.index("_", i) + 1
            elif ch == "E":
                return last
            else:
                return None  # constructors, operators: not a kernel's name
    except (ValueError, IndexError):
        return None
    return None


_LAUNCH_NAME = re.compile(r"[A-Za-z_][\w:]*(<[\w:<>, *]*>)?")
RODATA_MAX_BYTES = 64 << 20


def _rodata_strings(library: Path) -> frozenset[str]:
    """NUL-terminated strings of the ELF's .rodata: the emulator's rewriter compiles each launch site's kernel
    name (`k` or `k<float>`) in as a literal, and -O2 inlines most kernels, so a name may have no symbol."""
    try:
        with library.open("rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:  # 64-bit little-endian only
                return frozenset()
            shoff, = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
            _, _, _, _, str_off, str_size = sections[shstrndx]
            fh.seek(str_off)
            names = fh.read(min(str_size, 1 << 20))
            strings: set[str] = set()
            for name_off, _, _, _, offset, size in sections:
                name = names[name_off:names.find(b"\0", name_off)]
                if name == b".rodata" or name.startswith(b".rodata."):
                    fh.seek(offset)
                    data = fh.read(min(size, RODATA_MAX_BYTES))
                    strings.update(part.decode("ascii", "replace") for part in data.split(b"\0")
                                   if 0 < len(part) <= 512)
            return frozenset(strings)
    except (OSError, struct.error, IndexError, ValueError):
        return frozenset()


@dataclass(frozen=True)
class KernelSymbols:
    """What the built extension holds, read on the host: identifiers named by its symbols (functions, and
    the statics of inlined kernels) and the kernel names compiled in at its launch sites."""

    names: frozenset[str]
    launch_names: frozenset[str] = frozenset()

    @classmethod
    def from_library(cls, library: Path) -> KernelSymbols | None:
        """None when the symbols cannot be read (no nm on the host): the kernel-name check is then skipped."""
        nm = shutil.which("nm")
        if nm is None or not library.is_file():
            return None
        names: set[str] = set()
        # The static table has static and anonymous-namespace kernels too; the dynamic one survives stripping.
        for extra in ([], ["-D"]):
            try:
                proc = subprocess.run([nm, "-C", "--defined-only", *extra, str(library)], capture_output=True,
                                      text=True, timeout=NM_TIMEOUT_SECONDS, check=False)
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in proc.stdout.splitlines():
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[1] in SYMBOL_TYPES:
                    names.add(base_name(parts[2]))
        if not names:
            return None
        # Launch-site literals look like `k` or `ns::k<float>`; their base names count like symbols.
        launches = frozenset(base_name(text) for text in _rodata_strings(library) if _LAUNCH_NAME.fullmatch(text))
        return cls(frozenset(names), launches)

    def has(self, kernel: str) -> bool:
        """`kernel` as a launch site, `nm -C` or CNPAPI names it: plain, demangled, or mangled (`_Z...`)."""
        name = mangled_base_name(kernel) or base_name(kernel)
        return name in self.launch_names or name in self.names


# -- record fields ------------------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _count_map(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    out: dict[str, int] = {}
    for key, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None
        out[str(key)] = v
    return out


def _same(host: Any, claimed: Any) -> bool:
    if isinstance(host, bool) or isinstance(claimed, bool):
        return host is claimed
    if isinstance(host, int | float):
        number = _number(claimed)
        return number is not None and math.isclose(float(host), number, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(host, dict):
        return isinstance(claimed, dict) and host.keys() <= claimed.keys() and all(
            _same(v, claimed[k]) for k, v in host.items())
    if isinstance(host, list):
        return isinstance(claimed, list) and len(host) == len(claimed) and all(
            _same(a, b) for a, b in zip(host, claimed, strict=True))
    return host == claimed


def _tasks(dim: Any) -> int | None:
    if not isinstance(dim, list) or len(dim) != 3 or not all(isinstance(d, int) and d >= 1 for d in dim):
        return None
    return dim[0] * dim[1] * dim[2]


def launch_floor_us(record: dict[str, Any], profile: dict[str, Any]) -> float:
    """The least modelled time the record's counted work allows with the host's profile (DESIGN.md)."""
    def figure(name: str) -> float | None:
        value = _number(profile.get(name))
        return value if value is not None and value > 0 else None

    overhead = _number(profile.get("launch_overhead_us")) or 0.0
    clock = figure("clock_mhz")
    card_cores = int((figure("clusters") or 1) * (figure("cores_per_cluster") or 1))
    claimed = record.get("cores_used")
    cores = claimed if isinstance(claimed, int) and not isinstance(claimed, bool) else card_cores
    cores = max(1, min(cores, _tasks(record.get("dim")) or card_cores, card_cores))
    moved = _count_map(record.get("bytes_moved")) or {}
    work = record.get("work") if isinstance(record.get("work"), dict) else {}
    vector = _count_map(work.get("vector_elements")) or {}
    macs = work.get("tensor_macs") if isinstance(work.get("tensor_macs"), int) else 0
    parts = [0.0]
    gbps, efficiency = figure("gdram_gbps"), figure("dma_efficiency")
    if gbps and efficiency:
        dma = sum(v for k, v in moved.items() if "GDRAM" in k and k != "GDRAMSET")
        parts.append(dma / (gbps * efficiency * 1e3))
    vector_rate = figure("vector_bytes_per_cycle")
    if vector_rate and clock:
        parts.append(sum(vector.values()) * FLOOR_ELEMENT_BYTES / (vector_rate * cores * clock))
    tensor_rate = max(figure("tensor_ops_per_cycle_fp32") or 0.0, figure("tensor_ops_per_cycle_fp16") or 0.0)
    if tensor_rate and clock:
        parts.append(2.0 * macs / (tensor_rate * cores * clock))
    return overhead + TIME_FLOOR_FACTOR * max(parts)


# -- counted work -------------------------------------------------------------------------------------------
@dataclass
class WorkTotals:
    """Work counted by the launches of the checked invocation, in elements of the case's dtype."""

    read_elements: float = 0.0
    write_elements: float = 0.0
    activation_elements: int = 0
    multiply_adds: int = 0
    scalar_loads: int = 0
    scalar_stores: int = 0

    def add(self, record: dict[str, Any], itemsize: int) -> None:
        moved = _count_map(record.get("bytes_moved")) or {}
        counts = {k.lower(): v for k, v in (_count_map(record.get("builtin_counts")) or {}).items()}
        work = record.get("work") if isinstance(record.get("work"), dict) else {}
        vector = _count_map(work.get("vector_elements")) or {}
        macs = work.get("tensor_macs")
        self.read_elements += sum(v for k, v in moved.items() if k.startswith("GDRAM2")) / itemsize
        self.read_elements += counts.get("scalar_load_gdram", 0)
        self.write_elements += sum(v for k, v in moved.items() if k.endswith("2GDRAM")) / itemsize
        self.write_elements += counts.get("scalar_store_gdram", 0)
        self.activation_elements += sum(v for k, v in vector.items() if any(a in k for a in ACTIVATION_BUILTINS))
        self.multiply_adds += sum(v for k, v in vector.items() if any(m in k for m in MULTIPLY_BUILTINS))
        if isinstance(macs, int) and not isinstance(macs, bool) and macs > 0:
            self.multiply_adds += macs
        self.scalar_loads += sum(v for k, v in counts.items() if k.startswith("scalar_load_"))
        self.scalar_stores += sum(v for k, v in counts.items() if k.startswith("scalar_store_"))

    def shortfalls(self, required: RequiredWork) -> list[str]:
        out = []
        if self.read_elements < required.gdram_read_elements:
            out.append(_("kernels read {n} elements from GDRAM, the inputs hold {needed}").format(
                n=int(self.read_elements), needed=required.gdram_read_elements))
        if self.write_elements < required.gdram_write_elements:
            out.append(_("kernels wrote {n} elements to GDRAM, the output holds {needed}").format(
                n=int(self.write_elements), needed=required.gdram_write_elements))
        activated = self.activation_elements + min(self.scalar_loads, self.scalar_stores)
        if activated < required.activation_elements:
            out.append(_("{n} elements went through an activation (builtin or scalar code), the output needs "
                         "{needed}").format(n=activated, needed=required.activation_elements))
        done = self.multiply_adds + self.scalar_loads
        if done < required.multiply_adds:
            out.append(_("kernels did {n} multiply-adds (tensor, vector and scalar), the product needs "
                         "{needed}").format(n=done, needed=required.multiply_adds))
        return out


# -- one call -----------------------------------------------------------------------------------------------
@dataclass
class HostFacts:
    """What the host knows for a grading, independent of anything the sandbox wrote."""

    device: str
    profile: dict[str, Any] | None
    symbols: KernelSymbols | None
    notes: list[str] = field(default_factory=list)  # checks that could not run, and why


class CallIntegrity:
    """Checks one call's verified records as the reader streams them, then the output against the array."""

    def __init__(self, call_id: str, facts: HostFacts, required: RequiredWork | None, itemsize: int) -> None:
        self.call_id = call_id
        self.facts = facts
        self.required = required
        self.itemsize = max(1, itemsize)
        self.findings: list[str] = []
        # Shortfalls in what the kernels wrote or did: an honest kernel that drops a tail shows them too, so
        # they only weigh as forgery when the output is nevertheless right (judge.judge_call decides).
        self.coverage: list[str] = []
        self._dropped = 0
        self.launches = 0
        self.outputs: list[dict[str, Any]] = []
        self.checked = WorkTotals()  # launches before the output record: the checked invocation

    def find(self, message: str) -> None:
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(message)
        else:
            self._dropped += 1

    def all_findings(self) -> list[str]:
        more = [f"... and {self._dropped} more"] if self._dropped else []
        return self.findings + more

    def launch(self, record: dict[str, Any]) -> None:
        self.launches += 1
        seq = record.get("seq")
        kernel = record.get("kernel")
        where = f"launch seq {seq} ({kernel if isinstance(kernel, str) else '?'})"
        if record.get("device") != self.facts.device:
            self.find(f"{where}: ran on device {record.get('device')!r}, the host chose {self.facts.device!r}")
        profile = self.facts.profile
        if profile is not None:
            claimed = record.get("profile")
            if not isinstance(claimed, dict):
                self.find(f"{where}: no device profile figures in the record")
            else:
                wrong = [k for k, v in profile.items() if not _same(v, claimed.get(k))]
                if wrong:
                    shown = ", ".join(f"{k}={claimed.get(k)!r} (host: {profile[k]!r})" for k in wrong[:4])
                    self.find(f"{where}: the profile figures differ from the host's table for "
                              f"{self.facts.device}: {shown}")
        if not isinstance(kernel, str) or not kernel:
            self.find(f"{where}: no kernel name")
        elif self.facts.symbols is not None and not self.facts.symbols.has(kernel):
            self.find(f"{where}: kernel {kernel!r} is not a function of the built extension")
        time_us = _number(record.get("modelled_time_us"))
        errors = any(isinstance(d, dict) and d.get("severity", "error") == "error"
                     for d in record.get("diagnostics") or [])
        if time_us is None or time_us < 0:
            self.find(f"{where}: modelled_time_us is missing or not a finite number")
        elif profile is not None and not errors:
            floor = launch_floor_us(record, profile)
            if time_us < floor * (1 - 1e-9) - 1e-6:
                self.find(f"{where}: {time_us:.3f} µs modelled, but its counted work needs at least "
                          f"{floor:.3f} µs on {self.facts.device}")
        if not isinstance(record.get("work"), dict):
            self.find(f"{where}: no counted work in the record")
        if not self.outputs and not errors:
            self.checked.add(record, self.itemsize)

    def op(self, record: dict[str, Any]) -> None:
        """A torch operator the replay ran (replay_ops.py): a modelled time and a byte count, never a launch."""
        time_us, moved = _number(record.get("modelled_time_us")), record.get("bytes")
        if time_us is None or time_us < 0:
            self.find(f"torch operator record {str(record.get('op'))[:80]!r}: modelled_time_us is not a finite number")
        if not isinstance(moved, int) or isinstance(moved, bool) or moved < 0:
            self.find(f"torch operator record {str(record.get('op'))[:80]!r}: bytes is not a byte count")

    def output(self, record: dict[str, Any]) -> None:
        self.outputs.append(record)

    def finish(self, output: np.ndarray | None) -> list[str]:
        """Checks that need the whole call: the output record against the received array, and the work."""
        if self.launches == 0 or output is None:
            return self.all_findings()  # no kernel ran (not_using_kernel) or nothing to compare against
        if not self.outputs:
            self.find("no output record: the runtime never sealed the output")
        elif len(self.outputs) > 1:
            self.find(f"{len(self.outputs)} output records for one call; the harness seals exactly one")
        else:
            self._check_output(self.outputs[0], output)
        if self.required is not None:
            self.coverage += [_("counted work does not cover the output: {shortfall}").format(shortfall=shortfall)
                              for shortfall in self.checked.shortfalls(self.required)]
        return self.all_findings()

    def _check_output(self, record: dict[str, Any], output: np.ndarray) -> None:
        data = np.ascontiguousarray(output)  # hashed in place: no copy of a perf case's megabytes
        nbytes = data.nbytes
        size = record.get("bytes")
        written = record.get("kernel_written")
        if size != nbytes:
            self.find(f"the output record covers {size!r} bytes, the output has {nbytes}")
        if not isinstance(written, int) or isinstance(written, bool) or not 0 <= written <= nbytes:
            self.find(f"the output record's kernel_written {written!r} is not a byte count of the output")
        elif written != nbytes:
            self.coverage.append(_("kernels wrote {written} of the output's {size} bytes during the call; the rest "
                                   "came from host code, a copy or an earlier call").format(written=written,
                                                                                           size=nbytes))
        if record.get("sha256") != hashlib.sha256(data.reshape(-1).view(np.uint8)).hexdigest():
            self.find("the output record's sha256 differs from the array the host received")
