#!/usr/bin/env bash
# Installs the Debian packages the grader and its tests use, and starts dockerd if none answers.
# Idempotent: quick when everything is already there. Needs root (as on the dev and CI machines).
set -euo pipefail
need=()
# debootstrap builds the sandbox base image from the mirror apt uses here (grader/sandbox/images.py);
# util-linux gives prlimit/setpriv and bubblewrap the daemon-less self-check sandbox.
for pkg_cmd in "docker.io:dockerd" "debootstrap:debootstrap" "chromium:chromium" "bubblewrap:bwrap" "g++:g++" \
               "util-linux:setpriv" "debian-archive-keyring:/usr/share/keyrings/debian-archive-keyring.gpg"; do
  probe="${pkg_cmd#*:}"
  if [ "${probe#/}" != "$probe" ]; then [ -e "$probe" ] || need+=("${pkg_cmd%%:*}")
  else command -v "$probe" >/dev/null 2>&1 || need+=("${pkg_cmd%%:*}"); fi
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-system: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need[@]}" >&2
fi
if ! docker info >/dev/null 2>&1; then
  echo "setup-system: starting dockerd" >&2
  mkdir -p /var/log
  (nohup dockerd >/var/log/bang-grader-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "setup-system: dockerd did not start; see /var/log/bang-grader-dockerd.log" >&2; exit 1; }
fi
