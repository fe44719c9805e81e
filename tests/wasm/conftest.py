"""The fixture `built` (test_wasm_sites.py: a reference kernel run natively with its journal, its native device
module and its wasm build) shared with test_wasm_replay.py; test_wasm_build.py has a `built` of its own."""

from tests.wasm.test_wasm_sites import built  # noqa: F401
