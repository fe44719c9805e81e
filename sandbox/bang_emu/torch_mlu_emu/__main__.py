"""`python -m bang_emu.torch_mlu_emu prebuild|path|include-dirs`: for image builds and scripts."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bang_emu.torch_mlu_emu", description=__doc__)
    parser.add_argument(
        "command",
        choices=["prebuild", "path", "include-dirs", "pyshim"],
        help="prebuild: compile the emulated mlu device library into the cache ($BANG_EMU_CACHE); "
        "path: print where it is (or would be) cached; include-dirs: the binding include dirs; "
        "pyshim: the directory to put on PYTHONPATH for `import torch_mlu`",
    )
    args = parser.parse_args(argv)

    from bang_emu import torch_mlu_emu
    from bang_emu.torch_mlu_emu import build

    try:
        if args.command == "prebuild":
            print(build.prebuild())
        elif args.command == "path":
            print(build.library_path())
        elif args.command == "include-dirs":
            print("\n".join(str(p) for p in torch_mlu_emu.include_dirs()))
        else:
            print(torch_mlu_emu.pyshim_dir())
    except build.DeviceLibraryError as exc:
        print(f"bang_emu.torch_mlu_emu: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
