"""BANG-on-CPU emulator: cncc-emu, the BANG/CNRT headers and runtime, the cost model, the torch_mlu shim."""

__version__ = "0.1.0"
