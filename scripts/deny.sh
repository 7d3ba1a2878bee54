#!/usr/bin/env bash
# cargo deny check (advisories, licenses, bans, sources) under deny.toml; scripts/test.sh runs it,
# so CI does. Installs cargo-deny 0.20.2 when missing (from crates.io, --locked). The RustSec
# advisory database is fetched from GitHub when GitHub answers; otherwise the snapshot committed
# in supply-chain/advisory-db is staged where cargo-deny keeps its database (a git repository
# whose one commit carries the snapshot's date, as cargo-deny reads it) and the check runs
# offline against it, saying so and naming the snapshot's date.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $DENY_VERSION" ]; then
  cargo install --quiet --locked "cargo-deny@$DENY_VERSION"
fi
# cargo-deny reads the metadata of every target's crates (windows ones too).
cargo fetch --locked --quiet

# Where cargo-deny 0.20 keeps the database of https://github.com/rustsec/advisory-db.
db="$HOME/.cargo/advisory-dbs/advisory-db-3157b0e258782691"
if timeout 20 git ls-remote --quiet https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then
  if [ -f "$db/.neyman-snapshot" ]; then rm -rf "$db"; fi # a staged snapshot: fetch the real one
  exec cargo deny --locked check
fi

snapshot=supply-chain/advisory-db
commit=$(sed -n 's/^commit: //p' "$snapshot/README.md")
date=$(sed -n 's/^date: //p' "$snapshot/README.md")
echo "deny.sh: GitHub is unreachable; checking advisories against the committed snapshot of" \
  "rustsec/advisory-db at $commit ($date)" >&2
if ! [ -f "$db/.neyman-snapshot" ] || [ "$(cat "$db/.neyman-snapshot")" != "$commit" ]; then
  if [ -d "$db" ] && ! [ -f "$db/.neyman-snapshot" ]; then
    echo "deny.sh: using the database fetched earlier in $db instead" >&2
  else
    rm -rf "$db" && mkdir -p "$db"
    cp -r "$snapshot/crates" "$db/"
    (
      cd "$db"
      git init --quiet
      git add crates
      GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
        git -c user.name=neyman -c user.email=neyman@localhost -c commit.gpgsign=false \
        commit --quiet -m "rustsec/advisory-db $commit (snapshot staged by neyman's scripts/deny.sh)"
      echo "$commit" > .neyman-snapshot
    )
  fi
fi
exec cargo deny --offline --locked check
