"""What the tests' wasm2c host (tests/wasm/host.c) is compiled with: the C names of the builtins it implements,
whose imports are named by their native signatures (bang_emu/wasm/api.py)."""

from __future__ import annotations

from bang_emu.wasm import api

HOST_IMPORTS = {
    "B_MEMCPY": "__memcpy(void*,const void*,int,mluMemcpyDirection_t)",
    "B_MEMCPY_ASYNC": "__memcpy_async(void*,const void*,int,mluMemcpyDirection_t)",
    "B_MEMCPY_STRIDED": "__memcpy(void*,const void*,int,mluMemcpyDirection_t,int,int,int)",
    "B_MEMCPY_ASYNC_STRIDED": "__memcpy_async(void*,const void*,int,mluMemcpyDirection_t,int,int,int)",
    "B_SYNC": "__sync()",
    "B_SIGMOID_F32": "__bang_active_sigmoid(float*,const float*,int)",
    "B_SIGMOID_F16": "__bang_active_sigmoid(half*,const half*,int)",
    "B_F2H": "__bang_float2half_rn(half*,const float*,int)",
}


def host_flags() -> list[str]:
    names = {b.import_name for b in api.declarations()[0]}
    assert set(HOST_IMPORTS.values()) <= names, set(HOST_IMPORTS.values()) - names
    return [f"-D{macro}={api.mangle(name)}" for macro, name in HOST_IMPORTS.items()]
