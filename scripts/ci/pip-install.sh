#!/usr/bin/env bash
# Installs the named PyPI packages when their command or module is missing.
set -euo pipefail
for p in "$@"; do
  case "$p" in
    virtme-ng) command -v vng >/dev/null 2>&1 && continue ;;
  esac
  echo "installing PyPI package: $p"
  python3 -m pip install -q --disable-pip-version-check "$p"
done
