#!/usr/bin/env bash
# The HTML run report (cli/html_report.h) in a real browser: a kilnd runs a model in both modes
# (unet_small) at a precision where layers fall below tt-metal's PCC threshold (bfloat4_b weights, LoFi);
# `kiln result` of the two jobs writes the page (and its JSON, the expectation); headless chromium
# (Debian's chromium-headless-shell; --no-sandbox: CI runs as root) must show, in --dump-dom, one
# row per layer, exactly the failing layers marked, the two SVG charts, and, in --screenshot, a PNG
# that is not blank (decoded: several colours, a share of non-white pixels).
# Usage: html_report_browser_test.sh KILND KILN CONV_CASES_DIR
set -euo pipefail
KILND=$1 KILN=$2 CASES=$3
MODEL=unet_small
PRECISION=(--weights-dtype bfloat4_b --math-fidelity LoFi)

WORK=$(mktemp -d)
KILND_PID=""
cleanup() {
  if [[ -n "$KILND_PID" ]]; then kill "$KILND_PID" 2>/dev/null || true; wait "$KILND_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "html_report_browser_test: $*" >&2; [[ -f "$WORK/kilnd.log" ]] && tail -20 "$WORK/kilnd.log" >&2; exit 1; }

"$KILND" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$WORK/data" --devices tt-emu:1 \
  --log-level warn >"$WORK/kilnd.out" 2>"$WORK/kilnd.log" &
KILND_PID=$!
for _ in $(seq 100); do
  grep -q '^kilnd listening grpc=' "$WORK/kilnd.out" 2>/dev/null && break
  sleep 0.1
done
SERVER=$(sed -n 's/^kilnd listening grpc=\([^ ]*\) .*/\1/p' "$WORK/kilnd.out")
[[ -n "$SERVER" ]] || fail "kilnd did not start"
kiln() { "$KILN" --server "$SERVER" "$@"; }

kiln upload "$CASES/$MODEL.onnx" >/dev/null || fail "upload"
mapfile -t JOBS < <(kiln run "$MODEL" "${PRECISION[@]}" --mode both --detach) || fail "run --detach"
[[ ${#JOBS[@]} -eq 2 ]] || fail "expected 2 jobs, got: ${JOBS[*]}"
for j in "${JOBS[@]}"; do kiln watch "$j" >/dev/null 2>&1 || [[ $? -eq 3 ]] || fail "watch $j"; done
rc=0
kiln result "${JOBS[@]}" --report html --report-file "$WORK/report.html" 2>/dev/null || rc=$?
[[ $rc -eq 3 ]] || fail "kiln result --report html: exit $rc, expected 3 (a layer below its threshold)"
rc=0
kiln result "${JOBS[@]}" --report json >"$WORK/report.json" || rc=$?
[[ $rc -eq 3 ]] || fail "kiln result --report json: exit $rc"

CHROME=(chromium-headless-shell --no-sandbox --headless --disable-gpu --hide-scrollbars --user-data-dir="$WORK/chrome")
timeout 20 "${CHROME[@]}" --dump-dom "file://$WORK/report.html" >"$WORK/dom.html" 2>"$WORK/chrome.log" ||
  fail "chromium --dump-dom: $(tail -3 "$WORK/chrome.log")"
timeout 20 "${CHROME[@]}" --window-size=1280,1024 --screenshot="$WORK/shot.png" "file://$WORK/report.html" \
  >/dev/null 2>>"$WORK/chrome.log" || fail "chromium --screenshot: $(tail -3 "$WORK/chrome.log")"

/usr/bin/python3 "$(dirname "$0")/html_report_check.py" "$WORK/report.json" "$WORK/dom.html" "$WORK/shot.png"
