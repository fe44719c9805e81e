"""Seeds: one master seed per run, per-case seeds derived from it by HMAC.

Public mode: the master is printed so a student can reproduce a failure. Secret mode (instructor grading):
the master is drawn fresh and withheld; only its digest is recorded. Per-case seeds are HMAC-SHA256(master,
case label), so a student who learns any number of case seeds (or inputs) learns nothing about the master
or about the other cases' seeds.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal

from grader.results import Seeds

PUBLIC_SEED = "bang-grader-public"


@dataclass(frozen=True)
class SeedPlan:
    mode: Literal["public", "secret"]
    master: str

    @classmethod
    def create(cls, mode: Literal["public", "secret"], seed: str | None = None) -> SeedPlan:
        if seed is None:
            seed = PUBLIC_SEED if mode == "public" else secrets.token_hex(16)
        return cls(mode=mode, master=seed)

    @property
    def fixed(self) -> bool:
        """The public plan of every default grading (PUBLIC_SEED): the same arrays in every process, so its
        cases' inputs and references are worth keeping on disk (spec/array_cache.py). Not a seed sweep's other
        masters (each would write its own and evict the fixed plan's), nor any secret plan."""
        return self.mode == "public" and self.master == PUBLIC_SEED

    def derive(self, *label: str) -> int:
        """A 64-bit seed for one case (label parts, e.g. assignment, case, dtype, purpose)."""
        digest = hmac.new(self.master.encode(), "\x1f".join(label).encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "little")

    def record(self) -> Seeds:
        digest = hashlib.sha256(self.master.encode()).hexdigest()[:16]
        return Seeds(mode=self.mode, master=self.master if self.mode == "public" else None, master_digest=digest)
