"""Device types, what the server routes jobs by: the keys of the one device table (bang_emu/devices.json, e.g.
mlu370-x8, mlu370-x4). An assignment or a submission asks for a type; a worker slot states its type (an
emulator slot grades on that profile; a card slot is a card of that model) and consumes its type's queue, so
one server feeds every type a course has. What a card is comes from Cambricon's `cnmon`, or from the
worker's --device-type when it cannot be read (a worker pod has no card of its own)."""

from __future__ import annotations

import re
import shutil
import subprocess

from grader.i18n import _

CNMON_TIMEOUT_SECONDS = 20


class DeviceTypeError(ValueError):
    """A device type the table does not have, or a card whose type cannot be told."""


def device_types() -> list[str]:
    """Every device type the server routes: the device table's keys."""
    from bang_emu import devices

    return devices.names()


def device_type(name: str | None) -> str:
    """`name` as the table spells it (MLU370-X4 -> mlu370-x4); None: the table's default type."""
    from bang_emu import devices

    if name is None:
        return devices.default_device()
    spelled = name.strip().lower()
    if spelled not in device_types():
        raise DeviceTypeError(_("unknown device type {name!r}: one of {types}").format(
            name=name, types=", ".join(device_types())))
    return spelled


def queue_name(backend: str, device_type: str) -> str:
    """The queue of a backend's device type: every worker slot of that type consumes it (grader.server.queue)."""
    return f"grade.{backend}.{device_type}"


def grading_device(backend: str, kind: str | None) -> str | None:
    """The --device a grading of device type `kind` uses where no worker slot names one (the reference-seed
    guard on the server): an emulator profile is the type itself; a card is the backend's default one."""
    from grader.backends import get_backend

    return device_type(kind) if get_backend(backend).devices_are_profiles else None


def type_from_cnmon(text: str) -> str | None:
    """The device type in `cnmon info -c N`'s output ("Product Name : MLU370-X8"), if the table has it."""
    found = re.search(r"Product Name\s*:\s*(\S+)", text)
    if found is None:
        return None
    try:
        return device_type(found.group(1))
    except DeviceTypeError:
        return None


def card_type(card: str) -> str:
    """The device type of MLU card `card` (an index), read with cnmon; DeviceTypeError when it cannot be told
    (no cnmon, or a model the table lacks): the worker then needs --device-type."""
    cnmon = shutil.which("cnmon")
    if cnmon is not None and card.isdigit():
        try:
            done = subprocess.run([cnmon, "info", "-c", card], capture_output=True, text=True,
                                  timeout=CNMON_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and (found := type_from_cnmon(done.stdout)):
            return found
    raise DeviceTypeError(_("cannot tell which device type MLU card {card} is (cnmon missing or a model the "
                            "device table lacks): give it with --device-type (one of {types})").format(
                                card=card, types=", ".join(device_types())))
