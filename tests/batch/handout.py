"""The lab handout made from the reference kernels: every `__mlu_global__` kernel body replaced by a TODO.

Shared by tests/batch/test_similarity.py and benchmarks/similarity_cost.py, whose classes of students start from
the reference kernels and subtract this handout as the template.
"""

from __future__ import annotations

import re

_KERNEL_HEAD = re.compile(r"__mlu_global__[^{;]*\{")


def hollow_kernels(text: str) -> str:
    """The handout's version of a .mlu: each kernel's signature kept, its body a TODO."""
    out, i = [], 0
    for m in _KERNEL_HEAD.finditer(text):
        if m.start() < i:
            continue
        out.append(text[i : m.end()])
        depth, j = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append("\n  // TODO: write the kernel\n}")
        i = j
    out.append(text[i:])
    return "".join(out)
