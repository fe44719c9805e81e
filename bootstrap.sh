#!/usr/bin/env bash
# Creates .venv with everything the grader needs; idempotent and quiet when already done.
# Torch comes from the CPU wheel that pip finds on this kind of machine (pip install torch==2.13.0).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$root/.venv"
stamp="$venv/.bootstrap-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
command -v g++ >/dev/null || { echo "bootstrap: installing g++" >&2; apt-get update -qq && apt-get install -y -qq g++ >&2; }
py="$(command -v python3.11 || command -v python3)"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >&2
"$venv/bin/pip" install -q torch==2.13.0 >&2
"$venv/bin/pip" install -q -e "$root[dev]" >&2
rm -f "$venv"/.bootstrap-*; touch "$stamp"
