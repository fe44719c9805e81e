"""The runtime's SHA-256 (runtime/sha256.cpp: output records' digests, the signed trace's HMAC) against Python's
hashlib, on both of its paths: the SHA extensions where the CPU has them, and the portable rounds
(BANG_EMU_SHA_PORTABLE=1), over lengths around every block boundary and a perf case's megabytes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bang_emu import toolchain
from emu_helpers import REPO

RUNTIME = REPO / "sandbox" / "bang_emu" / "runtime"
DRIVER = r"""
#include <cstdio>
#include <vector>
#include "runtime.h"
// argv: a length per digest; stdin: the bytes. Prints the hex digest of each prefix, updated in uneven pieces.
int main(int argc, char **argv) {
  std::vector<unsigned char> data;
  int c;
  while ((c = getchar()) != EOF) data.push_back((unsigned char)c);
  for (int i = 1; i < argc; ++i) {
    size_t n = strtoull(argv[i], nullptr, 10), at = 0, piece = 1;
    bang_emu::Sha256 h;
    while (at < n) {
      size_t take = std::min(piece, n - at);
      h.update(data.data() + at, take);
      at += take;
      piece = piece * 3 + 1;
    }
    unsigned char d[32];
    h.finish(d);
    printf("%s\n", bang_emu::to_hex(d, 32).c_str());
  }
}
"""
LENGTHS = [0, 1, 55, 56, 63, 64, 65, 119, 127, 128, 129, 1000, 4095, 4096, 65537, 4 << 20]


@pytest.fixture(scope="module")
def hasher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no g++ on this machine")
    work = tmp_path_factory.mktemp("sha")
    (work / "driver.cpp").write_text(DRIVER)
    for header, module in toolchain.GENERATED_HEADERS.items():  # runtime.h includes them, as the runtime's build
        (work / header).write_text(toolchain.generated_header(module))
    exe = work / "sha"
    subprocess.run(["g++", "-std=c++17", "-O2", f"-I{RUNTIME}", f"-I{work}", str(work / "driver.cpp"),
                    str(RUNTIME / "sha256.cpp"), "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


@pytest.mark.parametrize("portable", [False, True], ids=["extensions-if-any", "portable"])
def test_digests_match_hashlib(hasher: Path, portable: bool):
    data = os.urandom(max(LENGTHS))
    env = {k: v for k, v in os.environ.items() if k != "BANG_EMU_SHA_PORTABLE"}
    if portable:
        env["BANG_EMU_SHA_PORTABLE"] = "1"
    out = subprocess.run([str(hasher), *map(str, LENGTHS)], input=data, capture_output=True, env=env, check=True,
                         timeout=120)
    assert out.stdout.decode().split() == [hashlib.sha256(data[:n]).hexdigest() for n in LENGTHS]
