"""The emulator's memory spaces, defined once: the codes rewrite.py writes into `onchip_alloc` calls, the
spaces driver.py checks capacities of, and the runtime's `Space` enum with its names and trace keys.

Standard library only. toolchain.py writes cpp_header() as spaces_gen.h when it builds libbang_emu.so (as it
does devices.py's table), so the C++ side cannot drift from this one.
"""

from __future__ import annotations

from typing import NamedTuple


class Space(NamedTuple):
    code: int
    enumerator: str  # the runtime's enum constant
    name: str  # in diagnostics ("NRAM arrays need ...")
    key: str  # in the trace ("scalar_load_nram") and devices.json


SPACES = (
    Space(0, "kOther", "host/stack", "stack"),  # anything else: the worker's stack, host memory
    Space(1, "kGdram", "GDRAM", "gdram"),
    Space(2, "kNram", "NRAM", "nram"),
    Space(3, "kWram", "WRAM", "wram"),
    Space(4, "kSram", "SRAM", "sram"),
    Space(5, "kLdram", "LDRAM", "ldram"),
)
OTHER, GDRAM, NRAM, WRAM, SRAM, LDRAM = (s.code for s in SPACES)
# declaration keyword -> the on-chip space its arrays live in
ONCHIP_KEYWORDS = {"__nram__": NRAM, "__wram__": WRAM, "__mlu_shared__": SRAM}


def name(code: int) -> str:
    return SPACES[code].name


def cpp_header() -> str:
    """The C++ enum and tables the runtime is built with (toolchain.py writes them next to the runtime build)."""
    enumerators = ", ".join(f"{s.enumerator} = {s.code}" for s in SPACES)
    names = ", ".join(f'"{s.name}"' for s in SPACES)
    keys = ", ".join(f'"{s.key}"' for s in SPACES)
    return "\n".join([
        "// Generated from spaces.py by bang_emu.spaces.cpp_header() at runtime-build time. Do not edit.",
        "#pragma once",
        "namespace bang_emu {",
        f"enum Space : int {{ {enumerators}, kSpaces = {len(SPACES)} }};",
        f"static const char *const kSpaceNames[kSpaces] = {{{names}}};  // diagnostics",
        f"static const char *const kSpaceKeys[kSpaces] = {{{keys}}};  // trace and devices.json keys",
        "}  // namespace bang_emu",
    ]) + "\n"
