#!/usr/bin/env bash
# Installs the named PyPI packages when their command or module is missing.
# Works with a pyenv/venv python (plain pip) and with Debian's system python, whose pip refuses to touch
# an "externally managed" environment unless told --break-system-packages (PEP 668).
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

installed() {
  case "$1" in
    # pip --user installs put vng in ~/.local/bin, which may not be on PATH; tests/rxe/run.sh looks there too.
    virtme-ng) command -v vng >/dev/null 2>&1 || [ -x "$(python3 -m site --user-base 2>/dev/null)/bin/vng" ] ;;
    *) python3 -m pip show "$1" >/dev/null 2>&1 ;;
  esac
}

missing=()
for p in "$@"; do
  command -v python3 >/dev/null 2>&1 && installed "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! python3 -m pip --version >/dev/null 2>&1; then
  "$(dirname "$0")/apt-install.sh" python3 python3-pip
fi
for p in "${missing[@]}"; do
  echo "installing PyPI package: $p"
  if ! out=$(python3 -m pip install -q "$p" 2>&1); then
    if grep -q externally-managed <<<"$out"; then
      python3 -m pip install -q --break-system-packages "$p"
    else
      echo "$out" >&2
      exit 1
    fi
  fi
done
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
