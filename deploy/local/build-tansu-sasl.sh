#!/usr/bin/env bash
# Builds, once per machine, the Tansu broker the SASL tests need: the PyPI build
# the stack runs keeps its users in memory:// storage, which drops SCRAM
# credentials, so no client can ever authenticate to it. The crates.io release
# with sqlite storage keeps them (STACK.md). The binary is cached outside the
# clone like the native builds (~8-16 min on 2 cores the first time).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if [ -x "$TANSU_SASL_BIN" ]; then
  exit 0
fi
root="${TANSU_SASL_BIN%/bin/tansu}"
echo "[stack] building the SASL-capable Tansu ($TANSU_SASL_VERSION, sqlite storage) into $root" >&2
# No CARGO_TARGET_DIR: cargo builds in a temporary directory and removes it.
env -u CARGO_TARGET_DIR cargo install tansu --version "$TANSU_SASL_VERSION" --locked --debug \
  --no-default-features --features libsql --root "$root" --quiet
"$TANSU_SASL_BIN" --version >&2
