#!/bin/bash
# Developer check (not run by ctest/CI: it needs the real izer, which is not part of the project):
# compiles the 14 reference models in one export form with ai8x_compile_tool and feeds every YAML
# to ai8x-synthesis' ai8xize.py through the ai8x oracle's izer_check.py (tools/ai8x-oracle in the
# folder named by $KILN_SHARED, which is not part of the repository).
#
# Set-up once (see that folder's README.md): fetch ai8x-synthesis, ai8x-training and distiller,
# then run its setup.sh.
#
# Usage: tests/ai8x/oracle_check.sh [qat|float|simplified] [BUILD_DIR] [OUT_DIR]
# Overrides as the tests pass them: simplified forms get `last.output_width=32` where the
# hand-written YAML has it; float/simplified forms get the qat form's `quantization` values
# (run the qat form first).
set -u
FORM=${1:-qat}
BUILD=${2:-build-ai8x}
OUT=${3:-/tmp/kiln-ai8x-oracle}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${KILN_SHARED:-$ROOT/../shared}
TOOL=$ROOT/$BUILD/tests/ai8x/ai8x_compile_tool
DATA=$ROOT/tests/data/ai8x
mkdir -p "$OUT/$FORM"
/usr/bin/python3 - "$FORM" "$DATA" "$OUT" > "$OUT/cases-$FORM.txt" <<'PY'
import json, os, sys, yaml
form, data, out = sys.argv[1:4]
for e in json.load(open(os.path.join(data, 'models', 'manifest.json'))):
    if e['form'] != form:
        continue
    extra = []
    golden = yaml.safe_load(open(os.path.join(data, 'networks', e['golden_yaml'])))['layers']
    if form == 'simplified' and str(golden[-1].get('output_width', 8)) == '32':
        extra.append('last.output_width=32')
    qat = os.path.join(out, 'qat', e['name'] + '.yaml')
    if form != 'qat' and os.path.exists(qat):
        extra += ['%s.quantization=%s' % (l['name'], l['quantization'])
                  for l in yaml.safe_load(open(qat))['layers'] if 'quantization' in l]
    print(e['name'], e['file'], e['device'], e['factory'], e['dataset'], ' '.join(extra))
PY
pass=0
total=0
while read -r name file dev fac ds extra; do
  y=$OUT/$FORM/$name.yaml
  # shellcheck disable=SC2086
  "$TOOL" "$DATA/models/$file" "$dev" "$fac" "$ds" $extra > "$y" 2> "$OUT/$FORM/$name.log"
  # the plan's flags (ai8x_compile_tool prints "flags: --device CHIP ..."), without --device CHIP
  flags=$(sed -n 's/^flags: --device [A-Z0-9]*//p' "$OUT/$FORM/$name.log" | xargs)
  verdict=$(/usr/bin/python3 "$SHARED/tools/ai8x-oracle/izer_check.py" --yaml "$y" --model "$name" \
            --extra="$flags" 2>&1 | tail -1)
  echo "$name ($FORM): $verdict"
  total=$((total + 1))
  case "$verdict" in PASS*) pass=$((pass + 1)) ;; esac
done < "$OUT/cases-$FORM.txt"
echo "$pass/$total PASS"
