"""The memory spaces are defined once (bang_emu.spaces): the codes the rewriter writes, the driver's capacity
table, the runtime's enum, its diagnostics and the trace's keys must all agree with it."""

from __future__ import annotations

import subprocess

import pytest
from bang_emu import devices, driver, spaces, toolchain
from emu_helpers import cncc, read_trace, run

PROBE = """
#include <cstdio>
#include "runtime.h"
int main() {
  using namespace bang_emu;
%s
  printf("kSpaces %%d\\n", (int)kSpaces);
  for (int s = 0; s < kSpaces; ++s) printf("%%d %%s %%s\\n", s, kSpaceNames[s], kSpaceKeys[s]);
}
"""


def test_the_runtime_header_is_the_python_table(tmp_path):
    """runtime.h compiled as the runtime is (generated headers on the include path) has exactly these spaces."""
    for header, module in toolchain.GENERATED_HEADERS.items():
        (tmp_path / header).write_text(toolchain.generated_header(module))
    lines = "\n".join(f'  printf("{s.enumerator} %d\\n", (int){s.enumerator});' for s in spaces.SPACES)
    (tmp_path / "probe.cpp").write_text(PROBE % lines)
    exe = tmp_path / "probe"
    subprocess.run(["g++", "-std=c++17", f"-I{tmp_path}", f"-I{toolchain.RUNTIME_SRC_DIR}", str(tmp_path / "probe.cpp"),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    expected = [f"{s.enumerator} {s.code}" for s in spaces.SPACES] + [f"kSpaces {len(spaces.SPACES)}"]
    expected += [f"{s.code} {s.name} {s.key}" for s in spaces.SPACES]
    assert out == expected


def test_codes_are_dense_and_every_space_has_scalar_costs():
    assert [s.code for s in spaces.SPACES] == list(range(len(spaces.SPACES)))
    for entry in devices.load().values():
        for s in spaces.SPACES:
            assert f"scalar_load_{s.key}" in entry and f"scalar_store_{s.key}" in entry
    for capacity in driver.ARCH_CAPACITY_KB.values():
        assert set(capacity) == set(spaces.ONCHIP_KEYWORDS.values())


KERNEL = """
#include <bang.h>
__mlu_global__ void overrun() {
  __nram__ float src[256];
  __nram__ float n[64];
  __wram__ float w[64];
  __mlu_shared__ float s[64];
  %s
}
int main() {
  cnrtQueue_t q;
  cnrtQueueCreate(&q);
  cnrtDim3_t dim = {4, 1, 1};
  overrun<<<dim, CNRT_FUNC_TYPE_UNION1, q>>>();
  cnrtQueueSync(q);
  return 0;
}
"""


@pytest.mark.parametrize(("keyword", "copy"), [
    ("__nram__", "__memcpy(n, src, sizeof(src), NRAM2NRAM);"),
    ("__wram__", "__memcpy(w, src, sizeof(src), NRAM2WRAM);"),
    ("__mlu_shared__", "__memcpy(s, src, sizeof(src), NRAM2SRAM);"),
])
def test_each_declaration_lands_in_its_space(tmp_path, keyword, copy):
    """The rewriter's code for a declaration keyword picks the arena the runtime names in its diagnostic."""
    src = tmp_path / "k.mlu"
    src.write_text(KERNEL % copy)
    exe = tmp_path / "k"
    proc = cncc("--bang-arch=compute_30", src, "-o", exe)
    assert proc.returncode == 0, proc.stderr
    trace = tmp_path / "t.jsonl"
    proc = run(exe, env={"BANG_EMU_TRACE": str(trace)}, timeout=60)
    name = spaces.name(spaces.ONCHIP_KEYWORDS[keyword])
    assert f"past the end of {name} array" in proc.stderr, proc.stderr
    work = read_trace(trace)[0]["work"]
    assert set(work["scalar_loads"]) == {s.key for s in spaces.SPACES}
