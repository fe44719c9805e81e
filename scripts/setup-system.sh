#!/usr/bin/env bash
# Installs the Debian packages the grader uses and starts dockerd if none answers. Idempotent: quick when
# everything is already there. Needs root. One script for every caller:
#   scripts/setup-system.sh            what grading needs (docker.io + dockerd, debootstrap for the image,
#                                      bubblewrap/util-linux for the daemon-less self-check sandbox, g++)
#   scripts/setup-system.sh --tests    the same plus what the test suite uses (chromium and a CJK font for the report tests)
# `./grade setup` (and `./grade submit` on a machine not set up yet) runs it, then builds the sandbox image;
# ./run-tests runs it with --tests, then `grade setup`.
#
# dockerd is started on $DOCKER_HOST's socket when that names a unix socket, with $BANG_GRADER_DOCKERD_ARGS
# added (e.g. --data-root/--exec-root/--pidfile for a second, private daemon); the default is the system one.
set -euo pipefail
with_tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) with_tests=1 ;;
    *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-system: needs root (run: sudo $0 $*)" >&2
  exit 1
fi
need=()
# debootstrap builds the sandbox base image from the mirror apt uses here (grader/sandbox/images.py);
# util-linux gives prlimit/setpriv and bubblewrap the daemon-less self-check sandbox.
wanted=("docker.io:dockerd" "debootstrap:debootstrap" "bubblewrap:bwrap" "g++:g++" "util-linux:setpriv"
        "debian-archive-keyring:/usr/share/keyrings/debian-archive-keyring.gpg")
# fonts-noto-cjk: the report tests check that Chinese text is drawn as glyphs, not boxes; clang-19: the tests'
# host builds take the fast binding path too (the image carries its own)
# redis-server: the course server's broker (grade serve starts a private one on loopback when given no URL)
wanted+=("redis-server:redis-server")
# postgresql: the server tests' PostgreSQL path (a cluster of their own, started with initdb/pg_ctl in a temp dir)
[ "$with_tests" = 1 ] && wanted+=("chromium:chromium" "fonts-noto-cjk:/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"
                                  "clang-19:clang++-19" "postgresql:/usr/lib/postgresql")
# the WebAssembly build of device code (sandbox/bang_emu/wasm, tests/wasm; bang_emu.wasm.build.REQUIRED): wasm-ld,
# llvm-ar/nm, the wasi libc and libc++ headers, compiler-rt's wasm32 builtins; wabt: wasm-validate and wasm2c
[ "$with_tests" = 1 ] && wanted+=("lld-19:wasm-ld-19" "llvm-19:llvm-ar-19" "wasi-libc:/usr/lib/wasm32-wasi/libc.a"
                                  "libc++-19-dev-wasm32:/usr/include/wasm32-wasi/c++/v1/type_traits"
                                  "libclang-rt-19-dev-wasm32:/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a"
                                  "wabt:wasm2c")
for pkg_cmd in "${wanted[@]}"; do
  probe="${pkg_cmd#*:}"
  if [ "${probe#/}" != "$probe" ]; then [ -e "$probe" ] || need+=("${pkg_cmd%%:*}")
  else command -v "$probe" >/dev/null 2>&1 || need+=("${pkg_cmd%%:*}"); fi
done
# bootstrap.sh makes .venv with `python3 -m venv`: Debian keeps ensurepip in a package of its own.
command -v python3.11 >/dev/null 2>&1 || python3 -c "import ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-system: installing ${need[*]} (apt-get; a minute or two)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need[@]}" >&2
  echo "setup-system: installed ${need[*]}" >&2
fi
if ! docker info >/dev/null 2>&1; then
  args=()
  log=/var/log/bang-grader-dockerd.log
  case "${DOCKER_HOST:-}" in
    unix://*) args+=(--host "$DOCKER_HOST"); log="/var/log/bang-grader-dockerd-$(echo "$DOCKER_HOST" | sha256sum | cut -c1-8).log" ;;
    "") ;;
    *) echo "setup-system: DOCKER_HOST=$DOCKER_HOST is not a local unix socket: start that daemon yourself" >&2; exit 1 ;;
  esac
  # shellcheck disable=SC2206 -- word splitting of the extra arguments is intended
  args+=(${BANG_GRADER_DOCKERD_ARGS:-})
  echo "setup-system: starting dockerd ${args[*]} (log: $log)" >&2
  mkdir -p /var/log
  # its own session: killing the command that started it (a test run, a grading) must not stop the daemon
  setsid -f dockerd "${args[@]}" >"$log" 2>&1 </dev/null
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "setup-system: dockerd did not start; see $log" >&2; tail -5 "$log" >&2; exit 1; }
  echo "setup-system: dockerd answers" >&2
fi
