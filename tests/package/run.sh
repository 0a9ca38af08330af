#!/usr/bin/env bash
# "Ready for cargo add": the four library crates as a registry would serve them, used from outside the
# workspace. Part of `make test` (`make package-test`).
#
# 1. `cargo package --no-verify` writes the .crate files (the workspace's own crates resolved together, as
#    crates.io would resolve them once published); they are unpacked into a scratch folder.
# 2. A scratch workspace whose members are the unpacked packages and `user/` (a crate that depends on all
#    four by version, [patch.crates-io] pointing at the unpacked sources) runs every doc example of the
#    packaged crates (`cargo test --doc`: the crate-level examples the READMEs and docs.rs show, with only
#    the files the package ships) and then `user`'s main (one call into each crate's public API).
# A file an example needs but the package leaves out, a dependency only the workspace provides, or a
# metadata field crates.io requires fails here, not after `cargo publish`.
#
#   tests/package/run.sh        # exit 0: packaged, every doc example passed, the user crate ran
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
crates=(erdma-verbs gpu-stage rdmakit-probe k8s-render)
t0=$SECONDS

# What crates.io shows on a crate's page (description and license it requires; cargo package only warns).
meta="$(mktemp)"
cargo metadata --no-deps --format-version 1 >"$meta"
python3 - "$meta" "${crates[@]}" <<'PY'
import json, sys
fields = ("description", "license", "readme", "documentation", "keywords", "categories")
packages = json.load(open(sys.argv[1]))["packages"]
bad = []
for p in packages:
    if p["name"] in sys.argv[2:]:
        bad += [p["name"] + ": no " + f for f in fields if not p.get(f)]
sys.exit("package-test: " + "; ".join(bad) + " (add it to the crate's Cargo.toml)" if bad else 0)
PY
rm -f "$meta"

echo "== cargo package --no-verify ${crates[*]/#/-p }"
args=(); for c in "${crates[@]}"; do args+=(-p "$c"); done
cargo package --no-verify --allow-dirty "${args[@]}" >/dev/null

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$1/Cargo.toml" | head -1; }
members=() patches=()
for c in "${crates[@]}"; do
  dir="crates/${c#rdmakit-}"
  v="$(version "$dir")"
  # -m: the files get the time of unpacking, not the packaged one, so cargo rebuilds a crate that changed
  # since the last run (with the packaged times its fingerprint took an older build in the shared target
  # folder for current).
  tar -xzmf "$target/package/$c-$v.crate" -C "$scratch"
  members+=("\"$c-$v\"")
  patches+=("$c = { path = \"$c-$v\" }")
done
cp -r "$here/user" "$scratch/user"
{
  echo "[workspace]"
  echo "resolver = \"3\""
  echo "members = [$(IFS=,; echo "${members[*]}"), \"user\"]"
  echo
  echo "# The unpacked packages stand in for crates.io."
  echo "[patch.crates-io]"
  printf '%s\n' "${patches[@]}"
} >"$scratch/Cargo.toml"
# The workspace's lock file pins what CI tested; the scratch workspace starts from it.
cp Cargo.lock "$scratch/Cargo.lock"

echo "== doc examples of the packaged crates"
log="$scratch/doctest.log"
if ! (cd "$scratch" && CARGO_TARGET_DIR="$target/package-test" cargo test --doc --workspace --exclude user >"$log" 2>&1); then
  cat "$log" >&2
  echo "package-test: a doc example of a packaged crate failed (above)" >&2
  exit 1
fi
grep -E "^(   Doc-tests|test result)" "$log"
echo "== a user crate on the packaged sources"
(cd "$scratch" && CARGO_TARGET_DIR="$target/package-test" cargo run -q -p user)
echo "package-test: ok in $((SECONDS - t0)) s"
