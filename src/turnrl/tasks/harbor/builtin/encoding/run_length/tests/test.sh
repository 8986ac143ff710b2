#!/bin/bash
# Verifier: the hidden tests beside this script, run against the workspace with plain python3.
# Reward 1 when every test passes, else 0. The folders come from the environment when set, so the
# script runs in a sandbox session (/app, /logs/verifier) and in a plain temporary folder alike.
tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
reward_dir="${TURNRL_VERIFIER_DIR:-/logs/verifier}"
mkdir -p "$reward_dir"
cd "${TURNRL_WORKSPACE:-/app}" || exit 1
if PYTHONPATH="$PWD" PYTHONDONTWRITEBYTECODE=1 python3 "$tests_dir/test_outputs.py"; then
  echo 1 > "$reward_dir/reward.txt"
else
  echo 0 > "$reward_dir/reward.txt"
fi
