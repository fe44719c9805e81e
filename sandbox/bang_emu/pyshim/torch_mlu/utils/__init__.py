"""torch_mlu.utils (emulated): only cpp_extension is provided, imported on first use -- as torch_mlu's own
utils/__init__.py does not import it, `import torch_mlu` does not import setuptools and torch's cpp_extension (a
tenth of a CPU second in every run sandbox, issue 41); `torch_mlu.utils.cpp_extension` still works after a bare
`import torch_mlu`."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["cpp_extension"]


def __getattr__(name: str) -> Any:
    if name == "cpp_extension":
        return importlib.import_module("torch_mlu.utils.cpp_extension")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
