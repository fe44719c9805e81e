"""torch_mlu.utils (emulated): only cpp_extension is provided."""

from torch_mlu.utils import cpp_extension

__all__ = ["cpp_extension"]
