"""Torch operators in the trusted replay (DESIGN.md "Threat model", issue 36).

A torch operator on mlu tensors is device work: torch_mlu runs a cast, a cat or a clamp as a CNNL kernel. The
emulated device's shim journals each one by name with its operands (torch_mlu_emu/csrc/mlu_device.cpp,
`bang_emu_journal_op_begin/end`) instead of the bytes its CPU fallback writes back, and the replay runtime hands
each journaled operator to `OpRunner` (runtime/replay.cpp, `bang_emu_replay_set_op_handler`). It runs the
operator itself, with this process's torch, on the replay's own device bytes (the twin's data), so an honest
`kernel(x.float()).half()` computes the twin's answer as the kernel does.

What runs is what the assignment allows (`OpPolicy`, assignment.toml `[device_ops]`): operators that move, cast,
fill, pad, concatenate, slice, clamp or scale data. Any other operator is never run here: the runtime marks
whatever it wrote as not the kernels' work, and carries that mark through later operators and kernels that read
it; an output that holds such bytes is the call's `not_kernel` (the host's `not_using_kernel`, naming the operator
and the student's line). Every operand is checked to lie inside one device buffer before a byte is read or written:
the journal is the run's claim, never trusted.
"""

from __future__ import annotations

import ctypes
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                           ctypes.c_size_t)
MAX_OPERAND_ELEMENTS = 1 << 28  # a forged operand (stride 0, huge sizes) must not exhaust the replay's memory
MAX_PAYLOAD_BYTES = 64 << 20

# c10::ScalarType, c10::MemoryFormat and c10::Layout by their enum values (how the boxed stack holds them)
_SCALAR_TYPE_NAMES = ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
                      "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16"]
_DTYPE_BY_C10_NAME = {"Byte": "uint8", "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64",
                      "Half": "float16", "Float": "float32", "Double": "float64", "Bool": "bool",
                      "BFloat16": "bfloat16"}
_MEMORY_FORMATS = ["contiguous_format", "preserve_format", "channels_last", "channels_last_3d"]


@dataclass(frozen=True)
class OpPolicy:
    """Which torch operators a submission may run on the device around its kernels (assignment.toml
    `[device_ops]`; grader/spec keeps the default). Names are `aten::<op>` (every overload) or
    `aten::<op>.<overload>`; the `scalar_only` ones are allowed with at most one operand of more than one element
    (`x * 0.5`, never `x * y`)."""

    allowed: frozenset[str] = frozenset()
    scalar_only: frozenset[str] = frozenset()

    @classmethod
    def from_json(cls, raw: Any) -> OpPolicy:
        raw = raw if isinstance(raw, dict) else {}
        return cls(frozenset(str(n) for n in raw.get("allowed") or ()),
                   frozenset(str(n) for n in raw.get("scalar_only") or ()))

    def allows(self, name: str, operand_sizes: Iterable[int]) -> bool:
        base = name.split(".", 1)[0]
        if base in self.scalar_only or name in self.scalar_only:
            return sum(1 for numel in operand_sizes if numel > 1) <= 1
        return name in self.allowed or base in self.allowed


@dataclass
class _Pending:
    name: str
    ran: bool = False  # a forbidden operator is never run: only the ranges it wrote are named
    args: list[Any] = field(default_factory=list)
    result: Any = None


class OpRunner:
    """The runtime's handler of journaled operators (phase 1: read the operands and compute; phase 2: write the
    result where the run's operator wrote it)."""

    def __init__(self, library: ctypes.CDLL, policy: OpPolicy) -> None:
        self.library = library
        self.policy = policy
        self.pending: _Pending | None = None
        self._torch: Any = None
        library.bang_emu_is_device_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        library.bang_emu_is_device_range.restype = ctypes.c_int
        for name in ("bang_emu_host_access_begin", "bang_emu_host_access_end"):
            getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            getattr(library, name).restype = None
        self.callback = HANDLER(self._handle)  # kept alive as long as the runner

    def install(self) -> None:
        self.library.bang_emu_replay_set_op_handler.argtypes = [HANDLER]
        self.library.bang_emu_replay_set_op_handler.restype = None
        self.library.bang_emu_replay_set_op_handler(self.callback)

    # -- the handler ------------------------------------------------------------------------------------------
    def _handle(self, phase: int, payload: int, size: int, result: int, result_len: int) -> int:
        try:
            if size > MAX_PAYLOAD_BYTES:
                raise ValueError("the operator's record is too large")
            data = json.loads(ctypes.string_at(payload, size).decode("utf-8"))
            status, ranges = self.begin(data) if phase == 1 else self.end(data)
        except Exception as exc:  # anything wrong with a record is this operator's failure, never the process's
            self.pending = None
            status, ranges = f"error {type(exc).__name__}: {str(exc)[:300]}".replace("\n", " "), []
        text = "\n".join([status, *(f"{lo} {n}" for lo, n in ranges)]).encode()
        if len(text) >= result_len:  # never a cut list: a range the runtime did not see would escape its taint
            self.pending = None
            text = b"error ValueError: the operator has more operands than the replay takes"[: max(0, result_len - 1)]
        ctypes.memmove(result, text, len(text))
        ctypes.memset(result + len(text), 0, 1)
        return 0

    @property
    def torch(self) -> Any:
        if self._torch is None:  # only a journal with operators pays for torch's import
            import torch

            self._torch = torch
        return self._torch

    def begin(self, record: dict[str, Any]) -> tuple[str, list[tuple[int, int]]]:
        name = str(record.get("op") or "")
        raw_args = record.get("args")
        if not isinstance(raw_args, list):
            raise ValueError("no argument list")
        op = self._overload(name)  # a name lookup only: nothing runs before the policy allows it
        ranges: list[tuple[int, int]] = []
        sizes: list[int] = []
        for value, argument in zip(raw_args, op._schema.arguments, strict=False):
            written = argument.alias_info is not None and argument.alias_info.is_write
            for descriptor in _tensor_descriptors([value]):
                lo, n, numel = self._span(descriptor)
                if written and argument.kwarg_only:  # an out= tensor is where it writes, not what it reads
                    continue
                sizes.append(numel)
                if n:
                    ranges.append((lo, n))
        if not self.policy.allows(name, sizes):
            self.pending = _Pending(name)  # never run: what it wrote is not the kernels' work (the runtime says so)
            return "forbidden", ranges
        args, kwargs = [], {}
        for value, argument in zip(raw_args, op._schema.arguments, strict=False):
            converted = self._value(value, str(argument.type))
            if argument.kwarg_only:
                kwargs[argument.name] = converted
            else:
                args.append(converted)
        result = op(*args, **kwargs)
        self.pending = _Pending(name, True, args + list(kwargs.values()), result)
        return "ok", ranges

    def end(self, record: Any) -> tuple[str, list[tuple[int, int]]]:
        pending, self.pending = self.pending, None
        if pending is None:
            raise ValueError("an operator ended that did not begin")
        if not isinstance(record, dict) or record.get("failed"):
            return "ok", []  # it raised in the run too: nothing was written
        outs = record.get("outs")
        if not isinstance(outs, list):
            raise ValueError("no list of written tensors")
        ranges = []
        for out in outs:
            descriptor = out.get("t") if isinstance(out, dict) else None
            if not isinstance(descriptor, dict) or "t" not in descriptor:
                raise ValueError("a written tensor is not an mlu tensor")
            if not pending.ran:
                lo, n, _numel = self._span(descriptor["t"])
            else:
                lo, n = self._write(descriptor["t"], self._produced(pending, out))
            if n:
                ranges.append((lo, n))
        return "ok", ranges

    # -- operands ---------------------------------------------------------------------------------------------
    def _overload(self, name: str) -> Any:
        namespace, _, rest = name.partition("::")
        base, _, overload = rest.partition(".")
        if namespace != "aten" or not base.isidentifier() or (overload and not overload.isidentifier()):
            raise ValueError(f"not an ATen operator name: {name[:80]!r}")
        return getattr(getattr(self.torch.ops.aten, base), overload or "default")

    def _produced(self, pending: _Pending, out: dict[str, Any]) -> Any:
        if "arg" in out:
            return pending.args[int(out["arg"])]
        results = pending.result if isinstance(pending.result, (tuple, list)) else (pending.result,)
        return results[int(out["ret"])]

    def _dtype(self, name: Any) -> Any:
        return getattr(self.torch, _DTYPE_BY_C10_NAME[str(name)])

    def _span(self, descriptor: Any) -> tuple[int, int, int]:
        """(first byte, bytes, elements) of an mlu tensor operand, checked to lie in one device buffer."""
        address, dtype, sizes, strides = descriptor
        itemsize = self._dtype(dtype).itemsize
        if not (isinstance(sizes, list) and isinstance(strides, list) and len(sizes) == len(strides) <= 16):
            raise ValueError("malformed tensor operand")
        numel = math.prod(int(s) for s in sizes)
        if numel == 0:
            return 0, 0, 0
        if numel > MAX_OPERAND_ELEMENTS or any(int(s) < 0 for s in sizes):
            raise ValueError("a tensor operand is larger than the replay takes")
        lo = sum((int(s) - 1) * int(st) for s, st in zip(sizes, strides, strict=True) if int(st) < 0)
        hi = sum((int(s) - 1) * int(st) for s, st in zip(sizes, strides, strict=True) if int(st) > 0)
        first, count = int(address) + lo * itemsize, (hi - lo + 1) * itemsize
        if not self.library.bang_emu_is_device_range(first, count):
            raise ValueError("a tensor operand lies outside device memory")
        return first, count, numel

    def _view(self, descriptor: Any, first: int, count: int) -> Any:
        """The operand as a tensor over the device's bytes [first, first + count) (`_span`'s, already checked)."""
        address, dtype, sizes, strides = descriptor
        if count == 0:
            return self.torch.empty([int(s) for s in sizes], dtype=self._dtype(dtype))
        flat = self.torch.frombuffer((ctypes.c_char * count).from_address(first), dtype=self._dtype(dtype))
        offset = (int(address) - first) // flat.element_size()
        return flat.as_strided([int(s) for s in sizes], [int(s) for s in strides], offset)

    def _read(self, descriptor: Any) -> Any:
        first, count, _numel = self._span(descriptor)
        if count == 0:
            return self._view(descriptor, first, count)
        self.library.bang_emu_host_access_begin(first, count, 0)
        try:
            return self._view(descriptor, first, count).clone()
        finally:
            self.library.bang_emu_host_access_end(first, count, 0)

    def _write(self, descriptor: Any, value: Any) -> tuple[int, int]:
        first, count, _numel = self._span(descriptor)
        if not isinstance(value, self.torch.Tensor) or list(value.shape) != [int(s) for s in descriptor[2]]:
            raise ValueError("the operator's result does not have the shape the run wrote")
        if count == 0:
            return first, 0
        self.library.bang_emu_host_access_begin(first, count, 1)
        try:
            self._view(descriptor, first, count).copy_(value)
        finally:
            self.library.bang_emu_host_access_end(first, count, 1)
        return first, count

    def _value(self, raw: Any, schema_type: str) -> Any:
        torch = self.torch
        if raw is None or isinstance(raw, bool):
            return raw
        if not isinstance(raw, dict):
            raise ValueError("malformed argument")
        if "t" in raw:
            return self._read(raw["t"])
        if "c" in raw:
            return torch.tensor(_number(raw["c"]), dtype=self._dtype(raw.get("dtype")))
        if "i" in raw:
            value = int(raw["i"])
            if "ScalarType" in schema_type:
                return getattr(torch, _SCALAR_TYPE_NAMES[value])
            if "MemoryFormat" in schema_type:
                return getattr(torch, _MEMORY_FORMATS[value])
            if "Layout" in schema_type:
                return torch.strided
            return value
        if "d" in raw:
            return _number(raw["d"])
        if "s" in raw:
            return str(raw["s"])
        if "dev" in raw:
            return torch.device("cpu")  # the replay's operators run on its CPU, over the device's bytes
        if "l" in raw:
            inner = schema_type[:-2] if schema_type.endswith("[]") else schema_type
            return [self._value(v, inner) for v in raw["l"]]
        raise ValueError("malformed argument")


def _number(raw: Any) -> float | int:
    if raw in ("inf", "-inf", "nan"):
        return float(raw)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ValueError("malformed number")
    return raw


def _tensor_descriptors(values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        if isinstance(value, dict) and "t" in value:
            yield value["t"]
        elif isinstance(value, dict) and isinstance(value.get("l"), list):
            yield from _tensor_descriptors(value["l"])
