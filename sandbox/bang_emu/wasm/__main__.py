"""`python -m bang_emu.wasm prebuild`: the WebAssembly build's caches made once, while the emulation image is built
(sandbox/images/emu/prebuild.py; $BANG_EMU_CACHE points into the image, read-only when grading): the device libc,
the device printf, the generated builtins header and the import allow-list's probe. Where the wasm toolchain is not
installed there is nothing to make: it says so and succeeds (the replay then runs natively); so does a failure, which
it prints: the engine is opt-in, and no default grading may depend on it."""

from __future__ import annotations

import sys

from bang_emu.wasm import build


def main(argv: list[str]) -> int:
    if argv != ["prebuild"]:
        print("usage: python -m bang_emu.wasm prebuild", file=sys.stderr)
        return 2
    absent = build.missing()
    if absent:
        print("bang_emu.wasm prebuild: the wasm toolchain is not installed, nothing to make: " + ", ".join(absent))
        return 0
    try:
        for what, make in (("device libc", build.devlibc), ("device printf", build.device_stdio),
                           ("builtins header", build.generated_include)):
            print(f"bang_emu.wasm prebuild: {what}: {make()}")
        print(f"bang_emu.wasm prebuild: import allow-list: {len(build.allowed_imports())} imports")
    except Exception as exc:  # the engine is opt-in: the image (and every default grading) must not depend on it
        print(f"bang_emu.wasm prebuild: not made, the WebAssembly replay will build its caches per grading or replay "
              f"natively: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
