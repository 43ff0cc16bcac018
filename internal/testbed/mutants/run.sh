#!/usr/bin/env bash
# make mutants: the campaign's power, measured. Each *.patch beside this script undoes one
# fix (its first line says which). For each, the campaign runs on a copy of the tree with the
# patch applied, over each seed range, and the table says how many schedules caught it
# (stopping at MUTANT_NEED). A patch that no longer applies fails at once, so the mutants
# follow the code; a mutant caught by fewer than MUTANT_NEED schedules of a range fails the
# run: it is a hole in the campaign (widen the campaign, not the mutant list).
#
#   MUTANTS="name ..."      the mutants to run (default: all)
#   MUTANT_RANGES="1 1000001"  the first seed of each range
#   MUTANT_SCHEDULES=10000  schedules per range
#   MUTANT_NEED=10          schedules that must catch each mutant in each range
set -euo pipefail
cd "$(dirname "$0")/../../.."
dir=internal/testbed/mutants
ranges=${MUTANT_RANGES:-1 1000001}
schedules=${MUTANT_SCHEDULES:-10000}
need=${MUTANT_NEED:-10}

patches=()
for p in "$dir"/*.patch; do
  name=$(basename "$p" .patch)
  if [ -n "${MUTANTS:-}" ] && [[ " $MUTANTS " != *" $name "* ]]; then continue; fi
  patches+=("$p")
done
stale=0
for p in "$dir"/*.patch; do
  if ! git apply --check "$p" 2>/dev/null; then
    echo "mutant $(basename "$p" .patch) no longer applies: rewrite it against the code as it is now" >&2
    stale=1
  fi
done
[ "$stale" = 0 ] || exit 1

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
printf '| mutant | %s |\n|---|%s\n' "$(for r in $ranges; do printf 'seeds %s–%s | ' "$r" "$((r + schedules - 1))"; done | sed 's/ | $//')" "$(for _ in $ranges; do printf -- '---|'; done)"
survivors=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  tree=$work/$name
  mkdir -p "$tree"
  git ls-files -z | xargs -0 cp --parents -t "$tree"
  (cd "$tree" && git apply "$OLDPWD/$p")
  row="| $name |"
  for first in $ranges; do
    log=$work/$name-$first.log
    (cd "$tree" && CANARY_CAMPAIGN_FIRST_SEED=$first CANARY_CAMPAIGN_SCHEDULES=$schedules CANARY_CAMPAIGN_STOP_AFTER=$need \
      go test -count=1 -v -timeout=240m -run '^TestCampaign$' ./internal/provider >"$log" 2>&1) || true
    line=$(grep -o 'campaign caught: [0-9]* of [0-9]* schedules failed' "$log" | tail -1 || true)
    if [ -z "$line" ]; then
      echo "mutant $name, seeds from $first: the campaign did not run to its summary; the end of its log:" >&2
      tail -20 "$log" >&2
      caught=0
      row="$row did not build or run |"
    else
      caught=$(echo "$line" | awk '{print $3}')
      ran=$(echo "$line" | awk '{print $5}')
      row="$row $caught of $ran |"
    fi
    if [ "$caught" -lt "$need" ]; then survivors=$((survivors + 1)); fi
  done
  echo "$row"
  rm -rf "$tree"
done
if [ "$survivors" -gt 0 ]; then
  echo "$survivors mutant range(s) caught by fewer than $need schedules: holes in the campaign" >&2
  exit 1
fi
