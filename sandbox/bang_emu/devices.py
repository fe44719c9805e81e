"""The one device table (devices.json): the cost-model figures of every emulated device.

Standard library only, so the host can use it as well as the emulator. The runtime reads the same file
(toolchain.py generates a C++ header from it when it builds libbang_emu.so), and every launch record of the
trace carries its device's entry as `profile`, key for key.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

DEVICES_JSON = Path(__file__).resolve().parent / "devices.json"


@cache
def _document() -> dict:
    doc = json.loads(DEVICES_JSON.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    devices = doc.get("devices")
    if not isinstance(devices, dict) or not devices:
        raise ValueError(f"{DEVICES_JSON}: no 'devices' object")
    keys = None
    for name, entry in devices.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{DEVICES_JSON}: device {name!r} is not an object")
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{DEVICES_JSON}: {name}.{key} is not a finite number")
        if keys is None:
            keys = list(entry)
        elif list(entry) != keys:
            raise ValueError(f"{DEVICES_JSON}: device {name!r} does not have the same keys as the others")
        if entry["cores"] != entry["clusters"] * entry["cores_per_cluster"]:
            raise ValueError(f"{DEVICES_JSON}: {name}.cores != clusters * cores_per_cluster")
    if doc.get("default") not in devices:
        raise ValueError(f"{DEVICES_JSON}: 'default' names no device")
    _check_published(doc.get("published", {}), devices)
    _check_architectures(doc.get("architectures"), devices)
    return doc


ON_CHIP = ("nram_bytes", "wram_bytes", "sram_bytes")


def _check_architectures(architectures: object, devices: dict) -> None:
    """Every architecture has its number and on-chip sizes; every device has exactly its architecture's."""
    if not isinstance(architectures, dict):
        raise ValueError(f"{DEVICES_JSON}: no 'architectures' object")
    by_number = {}
    for name, entry in architectures.items():
        if name.startswith("_"):
            continue
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), int) or isinstance(entry.get(k), bool)
                                              or entry[k] <= 0 for k in ("arch", *ON_CHIP)):
            raise ValueError(f"{DEVICES_JSON}: architectures.{name} needs positive integers arch, {', '.join(ON_CHIP)}")
        by_number[entry["arch"]] = name
    for name, entry in devices.items():
        arch = by_number.get(entry["arch"])
        if arch is None:
            raise ValueError(f"{DEVICES_JSON}: {name}.arch {entry['arch']} is no architecture of the table")
        for key in ON_CHIP:
            if entry[key] != architectures[arch][key]:
                raise ValueError(f"{DEVICES_JSON}: {name}.{key} differs from its architecture {arch}'s")


def _check_published(published: object, devices: dict) -> None:
    if not isinstance(published, dict):
        raise ValueError(f"{DEVICES_JSON}: 'published' is not an object")
    for name, entry in published.items():
        if name.startswith("_"):
            continue
        if name not in devices or not isinstance(entry, dict):
            raise ValueError(f"{DEVICES_JSON}: published.{name} is not an object for a known device")
        if not isinstance(entry.get("source"), str) or not entry["source"]:
            raise ValueError(f"{DEVICES_JSON}: published.{name} names no source")
        for key, value in entry.items():
            if key == "source":
                continue
            if key not in devices[name]:
                raise ValueError(f"{DEVICES_JSON}: published.{name}.{key} is not a figure of the model")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{DEVICES_JSON}: published.{name}.{key} is not a finite number")


def _reject_constant(token: str):
    raise ValueError(f"{DEVICES_JSON}: {token} is not allowed")


def load() -> dict[str, dict[str, float]]:
    """{device name: {figure: value}} -- a fresh copy; the keys are exactly those of a trace's `profile`."""
    return {name: dict(entry) for name, entry in _document()["devices"].items()}


def default_device() -> str:
    """The device used when BANG_EMU_DEVICE is unset (and no `cncc-emu --emu-device=` default is baked in)."""
    return _document()["default"]


def names() -> list[str]:
    return list(_document()["devices"])


def architectures() -> dict[str, dict[str, int]]:
    """{--bang-mlu-arch name: {"arch": number, "nram_bytes": ..., "wram_bytes": ..., "sram_bytes": ...}}."""
    return {name: dict(entry) for name, entry in _document()["architectures"].items() if not name.startswith("_")}


def published(device: str) -> dict[str, float | str]:
    """The real card's published figures for a device (a subset of the model's keys) and their `source`."""
    return dict(_document().get("published", {}).get(device, {}))


def peaks(device: str) -> dict[str, float] | None:
    """Figures no kernel can beat on this device, on the real card or in the model: per figure the higher of
    the published peak and the model's own. The roofline floor is computed from these. None: unknown device."""
    model = _document()["devices"].get(device)
    if model is None:
        return None
    card = published(device)
    return {key: max(value, card.get(key, value)) for key, value in model.items()}


def cpp_header() -> str:
    """The C++ table the runtime is built with (toolchain.py writes it next to the runtime build)."""
    doc = _document()
    lines = [
        "// Generated from devices.json by bang_emu.devices.cpp_header() at runtime-build time. Do not edit.",
        "#pragma once",
        f'#define BANG_EMU_DEFAULT_DEVICE "{doc["default"]}"',
        "namespace bang_emu {",
        "struct DeviceFigure { const char *key; double value; };",
        "struct DeviceEntry { const char *name; const DeviceFigure *figures; int count; };",
    ]
    entries = []
    for i, (name, entry) in enumerate(doc["devices"].items()):
        figures = ", ".join(f'{{"{k}", {float(v)!r}}}' for k, v in entry.items())
        lines.append(f"static const DeviceFigure kDeviceFigures{i}[] = {{{figures}}};")
        entries.append(f'{{"{name}", kDeviceFigures{i}, {len(entry)}}}')
    lines.append(f"static const DeviceEntry kDevices[] = {{{', '.join(entries)}}};")
    lines.append(f"static const int kDeviceCount = {len(entries)};")
    lines.append("}  // namespace bang_emu")
    return "\n".join(lines) + "\n"
