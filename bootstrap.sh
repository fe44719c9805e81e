#!/usr/bin/env bash
# Creates .venv with everything the grader needs; idempotent and quiet when already done.
# Torch comes from the CPU wheel that pip finds on this kind of machine (pip install torch==2.13.0).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$root/.venv"
stamp="$venv/.bootstrap-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
say() { echo "bootstrap: $*" >&2; }
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then say "needs $* (run: sudo apt-get install -y $*)"; exit 1; fi
  say "installing $* (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq "$@" >&2
}
command -v g++ >/dev/null || apt_install g++
py="$(command -v python3.11 || command -v python3)"
"$py" -c "import ensurepip" >/dev/null 2>&1 || [ -x "$venv/bin/python" ] || apt_install python3-venv
started=$SECONDS
say "first run: making $venv (torch CPU wheel + the grader; a few minutes, once)"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >&2
say "installing torch==2.13.0"
"$venv/bin/pip" install -q torch==2.13.0 >&2
say "installing the grader (pip install -e .[dev])"
"$venv/bin/pip" install -q -e "$root[dev]" >&2
rm -f "$venv"/.bootstrap-*; touch "$stamp"
say ".venv ready in $((SECONDS - started)) s"
