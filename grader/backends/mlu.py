"""The real-MLU backend: Cambricon's cncc, CNRT and torch_mlu on a card passed into the sandbox."""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import re
from pathlib import Path
from types import MappingProxyType

from grader.backends.base import Backend, Log, first_output_line
from grader.i18n import _
from grader.sandbox import images

DEVICE_NODE_GLOB = "/dev/cambricon_dev*"
MLU_RESOURCE = "cambricon.com/mlu"  # Cambricon's Kubernetes device plugin
# The Cambricon PyTorch image the MLU image is built on: `docker load`ed by the instructor, never pulled
# (sandbox/images/mlu/README.md); another release is named by this variable.
CAMBRICON_IMAGE_ENV = "BANG_GRADER_CAMBRICON_IMAGE"
DEFAULT_CAMBRICON_IMAGE = "yellow.hub.cambricon.com/pytorch/pytorch:v1.17.0-torch1.13.1-ubuntu20.04-py310"


def mlu_device_nodes(card: int, dev: Path = Path("/dev")) -> list[str]:
    """Exactly one card's nodes, those that exist: dev + ctl + ipcm (MLU370), as Cambricon's device plugin."""
    names = [f"cambricon_dev{card}", "cambricon_ctl", f"cambricon_ipcm{card}"]
    return [str(dev / n) for n in names if (dev / n).exists()]


def cambricon_image() -> str:
    return os.environ.get(CAMBRICON_IMAGE_ENV) or DEFAULT_CAMBRICON_IMAGE


class MluBackend(Backend):
    name = "mlu"
    # device_us comes from the harness's own CNRT notifier driver (bang_harness/mlu_driver.py), bound before
    # student code loads; torch.mlu.Event, which the student's Python can replace, is never read.
    timing_source = "hardware"
    default_device = "0"
    kernel_trace = False
    kernel_windows = True
    warmup = 3
    timed_repeats = 10  # per round; rounds continue until the spread settles
    retimes = True
    passes_device = True  # gVisor cannot pass a device: pods use the cluster's default runtime
    pod_resources = MappingProxyType({MLU_RESOURCE: "1"})  # quantities are strings

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("torch_mlu") is None:
            return False, _("torch_mlu is not importable here (Cambricon's PyTorch extension is needed for --backend mlu)")
        if not self.devices():
            return False, f"no MLU card: nothing matches {DEVICE_NODE_GLOB}"
        return True, f"{len(self.devices())} MLU card(s) found"

    def unavailable_fix(self) -> str:
        return _("needs a Cambricon MLU host with the driver, Neuware and torch_mlu")

    def image_tag(self) -> str:
        return images.mlu_image_tag(cambricon_image())

    def ensure_image(self, rebuild: bool = False, log: Log | None = None) -> str:
        return images.ensure_mlu_image(cambricon_image(), rebuild=rebuild, log=log)

    def devices(self) -> list[str]:
        indices = []
        for node in glob.glob(DEVICE_NODE_GLOB):
            match = re.fullmatch(r"cambricon_dev(\d+)", Path(node).name)
            if match:
                indices.append(int(match.group(1)))
        return [str(i) for i in sorted(indices)]

    def device_nodes(self, device: str | None) -> list[str]:
        card = device or self.default_device
        return mlu_device_nodes(int(card)) if card.isdigit() else []

    def batch_devices(self, workers: int | None, device: str | None) -> list[str | None]:
        """One slot per card: all of them, or those `device` lists ("0,2"), at most `workers`."""
        cards = [c for c in self.devices() if device is None or c in device.split(",")]
        if not cards:
            raise ValueError("backend mlu: no usable MLU card (/dev/cambricon_dev*) on this machine")
        return list(cards[: workers or len(cards)])

    def result_key_device(self, device: str | None) -> str:
        return ""  # the cards of one machine are alike: a result graded on card 1 stands for card 0

    def run_env(self, device: str | None) -> dict[str, str]:
        card = device or self.default_device
        if not card.isdigit():
            raise ValueError(f"an MLU device is a card index, got {card!r}")
        # Only this card is visible to torch_mlu, so the harness's `mlu` device is that card.
        return {"MLU_VISIBLE_DEVICES": card}

    def toolchain_version(self) -> str:
        neuware = Path(os.environ.get("NEUWARE_HOME", "/usr/local/neuware"))
        cncc = first_output_line([str(neuware / "bin" / "cncc"), "--version"]) or "cncc (not found)"
        try:
            torch_mlu = importlib.metadata.version("torch_mlu")
        except importlib.metadata.PackageNotFoundError:
            torch_mlu = "not installed"
        return f"{cncc}; torch_mlu {torch_mlu}"
