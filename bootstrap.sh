#!/usr/bin/env bash
# Creates .venv with everything the grader needs; idempotent and quiet when already done.
# Torch comes from the CPU wheel that pip finds on this kind of machine (pip install torch==2.13.0).
# The venv's Python is the first `python3.11` on PATH (else `python3`); another one, into another folder:
#   BANG_GRADER_PYTHON=/usr/bin/python3.11 BANG_GRADER_VENV=.venv-debian ./bootstrap.sh
# (./run-tests and ./grade take BANG_GRADER_VENV too; a relative folder is under the checkout).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${BANG_GRADER_VENV:-.venv}"
[[ "$venv" = /* ]] || venv="$root/$venv"
stamp="$venv/.bootstrap-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
say() { echo "bootstrap: $*" >&2; }
if [ -n "${BANG_GRADER_PYTHON:-}" ] && [ -x "$venv/bin/python" ]; then  # a venv is made by one Python only
  version() { "$1" -c 'import sys; print(sys.version.split()[0])'; }
  [ "$(version "$BANG_GRADER_PYTHON")" = "$(version "$venv/bin/python")" ] || {
    say "$venv has Python $(version "$venv/bin/python"), not $BANG_GRADER_PYTHON's; pick another BANG_GRADER_VENV"
    exit 1; }
fi
[ -f "$stamp" ] && exit 0
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then say "needs $* (run: sudo apt-get install -y $*)"; exit 1; fi
  say "installing $* (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq "$@" >&2
}
command -v g++ >/dev/null || apt_install g++
py="${BANG_GRADER_PYTHON:-$(command -v python3.11 || command -v python3)}"
# requires-python (pyproject.toml, checked by tests/test_python_floor.py): 3.11.0 on, Debian bookworm's 3.11.2 too
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { say "$py is older than Python 3.11"; exit 1; }
"$py" -c "import ensurepip" >/dev/null 2>&1 || [ -x "$venv/bin/python" ] || apt_install python3-venv
started=$SECONDS
say "first run: making $venv from $py ($("$py" -V 2>&1)) (torch CPU wheel + the grader; a few minutes, once)"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >&2
say "installing torch==2.13.0"
"$venv/bin/pip" install -q torch==2.13.0 >&2
say "installing the grader (pip install -e .[dev])"
"$venv/bin/pip" install -q -e "$root[dev]" >&2
rm -f "$venv"/.bootstrap-*; touch "$stamp"
say "$venv ready in $((SECONDS - started)) s"
