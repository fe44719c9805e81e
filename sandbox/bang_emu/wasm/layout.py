"""The linear memory's layout, defined once: the link flags (build.py), the module check that its data fits below
the on-chip arenas, and the counter pass's address classes (counting.py) all read it; the host that places the
arenas and the journal's GDRAM buffers will too (DESIGN.md, "Layout: how journal addresses map").

    [0, STACK_BYTES)              core 0's stack (--stack-first: an overflow wraps below 0 and traps)
    [STACK_BYTES, ONCHIP_BASE)    the module's data (constants, statics), then the other cores' stacks
    [ONCHIP_BASE, GDRAM_BASE)     per-core NRAM and WRAM arenas, per-cluster SRAM
    [GDRAM_BASE, memory size)     GDRAM: the launch's buffers
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
STACK_BYTES = 256 * KiB
ONCHIP_BASE = 1 * MiB
GDRAM_BASE = 64 * MiB
MAX_MEMORY_BYTES = 4 * 1024 * MiB  # wasm32's whole range: every 32-bit address is inside the engine's reservation
