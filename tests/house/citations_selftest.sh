#!/usr/bin/env bash
# citations.sh over a planted tree: every kind of bad citation is reported (file:line), the good
# ones are not, and the exit status is non-zero; a clean tree passes.
set -u
checker=${1:?usage: citations_selftest.sh CITATIONS_SH}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/docs/specs" "$t/device" "$t/clean"
printf '# Numerics\n## 9. PCC\n### 9.3 comp_pcc\n' > "$t/docs/specs/tt-numerics.md"
# Lines 1-8 are bad, 9-12 are good.
cat > "$t/device/a.h" <<'X'
// see issue 4 "Inputs"
int x;  // fused as in seed step 7a
/* copied from ../shared/reference/tt-numerics.md */
// docs/specs/nope.md
// docs/specs/tt-numerics.md §9.4
// tt-numerics.md §9
// IZER-RULES.md §1.3
int y;  // izer-baseline.md, ARCHITECTURE.md
// docs/specs/tt-numerics.md §9.3 and docs/specs/tt-numerics.md §9.
const char* s = "issue 4";  // a string, not a comment
// the tissue 4 of the fuzz seeds (not a citation)
/* docs/specs/tt-numerics.md */
X
printf '# issue-5 conv\nadd_test(NAME a COMMAND b)\n' > "$t/device/CMakeLists.txt"
printf '// docs/specs/tt-numerics.md §9.3\n' > "$t/clean/b.cc"
printf '// spec: docs/specs/tt-numerics.md\nint z;  // §9.3\n' > "$t/clean/c.cc"
printf 'int z;\n// the PCC rule of §9.3\n' > "$t/device/bare.cc"
out=$(bash "$checker" "$t" device clean 2>&1); rc=$?
echo "$out"
fail=0
[ $rc -ne 0 ] || { echo "SELFTEST: expected a non-zero exit"; fail=1; }
for where in device/a.h:1 device/a.h:2 device/a.h:3 device/a.h:4 device/a.h:5 device/a.h:6 \
             device/a.h:7 device/a.h:8 device/CMakeLists.txt:1 device/bare.cc:2; do
  echo "$out" | grep -q "^$where:" || { echo "SELFTEST: $where not reported"; fail=1; }
done
for where in device/a.h:9 device/a.h:10 device/a.h:11 device/a.h:12 device/CMakeLists.txt:2 clean/b.cc clean/c.cc; do
  echo "$out" | grep -q "^$where:" && { echo "SELFTEST: $where reported, but it is fine"; fail=1; }
done
out=$(bash "$checker" "$t" clean 2>&1) || { echo "$out"; echo "SELFTEST: a clean folder failed"; fail=1; }
out=$(bash "$checker" "$t" clean nosuchfolder 2>&1) && { echo "SELFTEST: a missing folder passed"; fail=1; }
[ $fail -eq 0 ] && echo "citations.sh self-test passed"
exit $fail
