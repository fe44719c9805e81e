"""The linear memory's layout, defined once: the link flags (build.py), the module check that its data fits below
the launch-argument area, the counter pass's address classes (counting.py), and the map from the journal's device
addresses to offsets (GdramMap) all read it; the host that places the arenas and the buffers does too (DESIGN.md,
"Layout: how journal addresses map").

    [0, STACK_BYTES)              instance 0's stack (--stack-first: an overflow wraps below 0 and traps)
    [STACK_BYTES, ARGS_BASE)      the module's data (constants, statics)
    [ARGS_BASE, ONCHIP_BASE)      a launch's argument bytes as the journal recorded them (x86-64), for its invoker
    [ONCHIP_BASE, NRAM_BASE)      the stacks of instances 1 .. MAX_INSTANCES-1 (one instance per emulated core)
    [NRAM_BASE, WRAM_BASE)        per-core NRAM arenas, ARENA_BYTES each
    [WRAM_BASE, SRAM_BASE)        per-core WRAM arenas
    [SRAM_BASE, SRAM_END)         per-cluster SRAM arenas
    [GDRAM_BASE, memory size)     GDRAM: the journal's device buffers

The counting pass classifies an access by these bounds (one counter per space, as the native cost model charges
each space its own cycles), and the replay's host (runtime/wasm_host.cpp, given these numbers by engine.py) places
the arenas in them. The host maps the linear memory so that GDRAM_BASE lies at the native runtime's device region
(JOURNAL_REGION_BASE): a journal's buffer keeps its address, and its offset is the address minus the memory's base.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
STACK_BYTES = 256 * KiB
ARGS_BYTES = 4 * KiB
ONCHIP_BASE = 1 * MiB
ARGS_BASE = ONCHIP_BASE - ARGS_BYTES
MAX_INSTANCES = 64  # cores the replay runs at once: the block pool's threads, or 5 per cluster of a UNION job
ARENA_BYTES = 4 * MiB  # one core's NRAM or WRAM arena, one cluster's SRAM (arrays and their 4 KiB gaps)
NRAM_BASE = ONCHIP_BASE + (MAX_INSTANCES - 1) * STACK_BYTES
WRAM_BASE = NRAM_BASE + MAX_INSTANCES * ARENA_BYTES
SRAM_BASE = WRAM_BASE + MAX_INSTANCES * ARENA_BYTES
SRAM_END = SRAM_BASE + MAX_INSTANCES * ARENA_BYTES
GDRAM_BASE = 1 * GiB
MAX_MEMORY_BYTES = 4 * GiB - 64 * KiB  # the largest memory wasm2c's 32-bit size field holds (65535 pages)
PAGE = 64 * KiB  # a wasm page: the memory grows by these

# The native runtime's side (read, not changed): device buffers live from this address up (runtime/gdram.cpp,
# kRegionBase), and a journal stops at this size (runtime/journal.h, kJournalMaxBytes); tests/wasm ties both to
# the C++ source.
JOURNAL_REGION_BASE = 0x3000_0000_0000
JOURNAL_CAP_BYTES = 1 * GiB
# Between two placed buffers: a scalar overrun past a buffer's end lands here, not in the next buffer's bytes.
GDRAM_GAP = 4 * KiB
GDRAM_CAPACITY = MAX_MEMORY_BYTES - GDRAM_BASE
assert GDRAM_BASE + JOURNAL_CAP_BYTES <= MAX_MEMORY_BYTES  # every buffer a journal can fill fits below 4 GiB
assert SRAM_END <= GDRAM_BASE


def space_bounds() -> tuple[tuple[str, int], ...]:
    """(space, first offset) from the top down: an address belongs to the first space whose bound it reaches."""
    return (("gdram", GDRAM_BASE), ("other", SRAM_END), ("sram", SRAM_BASE), ("wram", WRAM_BASE),
            ("nram", NRAM_BASE))


class LayoutError(Exception):
    """A journal's device address or buffer that has no place in the linear memory; the message says which."""


@dataclass(frozen=True)
class Placed:
    lo: int  # the journal's address (0x3000_0000_0000 + o)
    bytes: int
    offset: int  # where it lives in linear memory (GDRAM_BASE + o')


@dataclass
class GdramMap:
    """Journal GDRAM address <-> linear-memory offset. Buffers are placed in the order the journal allocates them,
    each at the next GDRAM_GAP boundary plus the address's offset within its 4 KiB page (the native alignment is
    kept), never reused; anything that would end past 4 GiB, or an address outside the journal's region, is a
    LayoutError -- a journal address is never used as an offset."""

    buffers: list[Placed] = field(default_factory=list)
    end: int = GDRAM_BASE  # first free offset

    def place(self, lo: int, nbytes: int) -> int:
        if not (JOURNAL_REGION_BASE <= lo and lo + nbytes <= JOURNAL_REGION_BASE + (1 << 44)) or nbytes < 0:
            raise LayoutError(f"device buffer at {lo:#x} ({nbytes} bytes) is not in the journal's device region "
                              f"(from {JOURNAL_REGION_BASE:#x})")
        if any(b.lo < lo + max(nbytes, 1) and lo < b.lo + max(b.bytes, 1) for b in self.buffers):
            raise LayoutError(f"device buffer at {lo:#x} ({nbytes} bytes) overlaps one already placed")
        start = -(-self.end // GDRAM_GAP) * GDRAM_GAP + lo % GDRAM_GAP
        if start + nbytes > MAX_MEMORY_BYTES:
            raise LayoutError(f"device buffer at {lo:#x} ({nbytes} bytes) does not fit: the journal's buffers need "
                              f"more than the {GDRAM_CAPACITY} bytes of GDRAM a wasm32 memory holds")
        self.buffers.append(Placed(lo, nbytes, start))
        self.end = start + nbytes + GDRAM_GAP
        return start

    def offset(self, address: int, nbytes: int = 0) -> int:
        """The linear-memory offset of [address, address + nbytes), inside one placed buffer (its end included,
        as a one-past-the-end pointer); LayoutError otherwise."""
        for b in self.buffers:
            if b.lo <= address and address + nbytes <= b.lo + b.bytes:
                return b.offset + (address - b.lo)
        raise LayoutError(f"{address:#x} (+{nbytes} bytes) is not inside any journaled device buffer")

    def memory_bytes(self) -> int:
        """The memory's size for this map, whole wasm pages (at least up to GDRAM_BASE)."""
        return min(-(-max(self.end, GDRAM_BASE) // PAGE) * PAGE, MAX_MEMORY_BYTES)
