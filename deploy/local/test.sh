#!/usr/bin/env bash
# Runs the whole test suite against the local stack, starting the stack first.
# Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$repo_root/deploy/local/up.sh"
"$repo_root/deploy/local/build-tansu-sasl.sh"
cd "$repo_root"
cargo build --workspace --all-targets --quiet
cargo test --workspace --all-targets "$@"
