#!/usr/bin/env bash
# Regenerate docs/report.png, the README's picture of `goodput report --format html`: the report of
# sample_traces/grpo_restart/ (a job restarted from a checkpoint: attempts, rework and downtime show) as headless
# Chromium draws it. Needs the project's venv (.ci/run makes it) and chromium (apt-get install chromium); GOODPUT and
# CHROMIUM name other binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
goodput=${GOODPUT:-.venv/bin/goodput}
chromium=${CHROMIUM:-chromium}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

GOODPUT_CACHE_DIR="$work/cache" "$goodput" report sample_traces/grpo_restart/ --format html --output "$work/report.html"
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=10000 \
  --user-data-dir="$work/profile" --window-size=1280,1760 --screenshot="$work/report.png" \
  "file://$work/report.html" 2>/dev/null
mv "$work/report.png" docs/report.png
echo "docs/report.png: $(wc -c < docs/report.png) bytes"
