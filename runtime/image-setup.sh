#!/bin/sh
# One step of runtime/Dockerfile, run as root on whatever base image it was given: paijob-runtime into a venv
# (/opt/paijob, created with the base's python3 and its site packages, so the base's torch is seen and PEP 668's
# "externally managed" system Python is never touched), and openssh-server, which OpenPAI's ssh plugin otherwise
# tries to install at every task start. POSIX sh: the base may have no bash.
set -eu
wheel_dir=$1
version=$2
fail() { echo "paijob image: $*" >&2; exit 1; }

[ -n "$version" ] || fail "pass --build-arg VERSION=X.Y.Z (paijob's version: paijob --version)"
command -v python3 >/dev/null || fail "the base image has no python3 on PATH; pick a BASE_IMAGE with Python 3.10+"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || fail "the base image's python3 is older than 3.10"

packages=
[ -x /usr/sbin/sshd ] || packages=openssh-server
# Debian and Ubuntu ship venv's pip bootstrap apart from python3.
python3 -c 'import ensurepip, venv' 2>/dev/null || packages="$packages python3-venv"
if [ -n "$packages" ]; then
  if command -v apt-get >/dev/null; then
    apt-get update -qq
    # shellcheck disable=SC2086  # a word list
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
    rm -rf /var/lib/apt/lists/*
  elif command -v dnf >/dev/null; then
    dnf install -y -q openssh-server && dnf clean all
  elif command -v yum >/dev/null; then
    yum install -y -q openssh-server && yum clean all
  else
    fail "cannot install $packages: the base image has no apt-get, dnf or yum"
  fi
fi
mkdir -p /run/sshd

wheel="$wheel_dir/paijob-$version-py3-none-any.whl"
[ -f "$wheel" ] || fail "no $(basename "$wheel") in the wheel folder (it has: $(ls "$wheel_dir")); VERSION must be the wheel's"
python3 -m venv --system-site-packages /opt/paijob
# --no-deps: the runtime needs the standard library and the base's torch only (as the templates' install step).
/opt/paijob/bin/python -m pip install -q --no-cache-dir --no-index --no-deps "$wheel"
# py-spy: the hang watch reads a stopped rank's line from outside with it (docs/runtime/faults.md). From the wheel
# folder when it holds one, else the package index; best effort: without it the watch names the last-seen line.
/opt/paijob/bin/python -m pip install -q --no-cache-dir --no-index --find-links "$wheel_dir" 'py-spy>=0.4' 2>/dev/null \
  || /opt/paijob/bin/python -m pip install -q --no-cache-dir --retries 1 --timeout 15 'py-spy>=0.4' 2>/dev/null \
  || echo "paijob image: warning: py-spy not installed (no wheel in the wheel folder, no package index): the hang" \
    "watch names a stopped rank at the line it was last seen at" >&2
# Also where a shell with a reset PATH looks (an ssh login reads /etc/profile, not the image's ENV).
ln -sf /opt/paijob/bin/paijob-runtime /usr/local/bin/paijob-runtime
/opt/paijob/bin/paijob-runtime --version
/opt/paijob/bin/python -c 'import torch' 2>/dev/null \
  || echo "paijob image: warning: the base image has no torch; paijob-runtime train needs it" >&2
