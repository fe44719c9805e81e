"""Containers a test makes, counted from the Docker daemon's live event stream (tests/sandbox/test_slot_grading.py,
tests/realcode/test_slots_realcode.py): the test's containers carry its own tag (BANG_GRADER_CONTAINER_TAG), its
batch workers' too."""

from __future__ import annotations

import os
import threading
import time

import docker

from grader.sandbox.docker_settings import COMMAND_LABEL, PHASE_LABEL, TAG_ENV, TAG_LABEL


class Created:
    """This test's containers created while the block runs, by the phase label ("run", "build", "slot", ...) and
    by phase and command ("run:replay", "run:make-engine", ...),
    counted from the daemon's event stream as they come: asked for afterwards, the daemon keeps only its last
    256 events, and the suite's other worker makes containers at the same time."""

    def __enter__(self) -> dict[str, int]:
        self.counts: dict[str, int] = {}
        self.stream = docker.from_env(timeout=None).events(
            decode=True, filters={"type": "container", "event": "create",
                                  "label": f"{TAG_LABEL}={os.environ[TAG_ENV]}"})
        self.thread = threading.Thread(target=self._count, daemon=True)
        self.thread.start()
        return self.counts

    def _count(self) -> None:
        try:
            for event in self.stream:
                labels = event.get("Actor", {}).get("Attributes") or {}
                phase = labels.get(PHASE_LABEL, "")
                self.counts[phase] = self.counts.get(phase, 0) + 1
                if COMMAND_LABEL in labels:
                    both = f"{phase}:{labels[COMMAND_LABEL]}"
                    self.counts[both] = self.counts.get(both, 0) + 1
        except Exception:  # noqa: BLE001 - the stream closed under us
            pass

    def __exit__(self, *exc: object) -> None:
        time.sleep(1.0)  # the last events of the block reach the stream
        self.stream.close()
        self.thread.join(timeout=10)
