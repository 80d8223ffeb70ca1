#!/usr/bin/env bash
# The rules of the house (docs/architecture.md, "Rules of the house") as include checks over the source
# tree: fails, listing every offending line, when a folder includes one it must not.
#   cli/ <-> server/        never include each other (both use api/)
#   compiler/               never includes sched/, server/, store/, api/, cli/, runtime/
#   device/                 never includes compiler/, sched/, server/, store/, api/, cli/
#   sched/                  never includes compiler/, server/, store/, api/, cli/
#   store/                  never includes sched/, server/, api/, cli/
#   runtime/                never includes sched/, server/, store/, api/, cli/ (knows no scheduler)
#   api/                    never includes server/, cli/
set -u
root=${1:?usage: include_rules.sh SOURCE_ROOT}
cd "$root" || exit 2
status=0
check() {  # FOLDER FORBIDDEN...
  local folder=$1; shift
  [ -d "$folder" ] || { echo "missing folder $folder"; status=1; return; }
  for forbidden in "$@"; do
    hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$forbidden/" "$folder" \
             --include='*.h' --include='*.cc' --include='*.cpp' 2>/dev/null)
    if [ -n "$hits" ]; then
      echo "$folder/ must not include $forbidden/:"
      echo "$hits"
      status=1
    fi
  done
}
check cli server
check server cli
check compiler sched server store api cli runtime
check device compiler sched server store api cli runtime
check sched compiler server store api cli runtime
check store sched server api cli runtime
check runtime sched server store api cli
check api server cli
[ $status -eq 0 ] && echo "include rules hold"
exit $status
