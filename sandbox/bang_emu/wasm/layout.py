"""The linear memory's layout, defined once: the link flags (build.py), the module check that its data fits below
the launch-argument area, the counter pass's address classes (counting.py), and the map from the journal's device
addresses to offsets (GdramMap) all read it; the host that places the arenas and the buffers does too (DESIGN.md,
"Layout: how journal addresses map").

    [0, STACK_BYTES)              core 0's stack (--stack-first: an overflow wraps below 0 and traps)
    [STACK_BYTES, ARGS_BASE)      the module's data (constants, statics), then the other cores' stacks
    [ARGS_BASE, ONCHIP_BASE)      a launch's argument bytes as the journal recorded them (x86-64), for its invoker
    [ONCHIP_BASE, GDRAM_BASE)     per-core NRAM and WRAM arenas, per-cluster SRAM
    [GDRAM_BASE, memory size)     GDRAM: the journal's device buffers, placed by GdramMap
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
GDRAM_BASE = 64 * MiB
MAX_MEMORY_BYTES = 4 * GiB  # wasm32's whole range: every 32-bit address is inside the engine's reservation
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
