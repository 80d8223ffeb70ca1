#!/usr/bin/env bash
# Comments cite files in the repository (docs/architecture.md, "Rules of the house"; the specs are in
# docs/specs/, see docs/specs/README.md). Fails, listing every offending comment line, when a comment
# in one of the given folders
#   * cites an issue by number, or a step of the seed (the word "issue" or "seed step" followed by
#     a number): history, not a source; keep the why, cite a file;
#   * points outside the repository (the shared folder beside it, or an absolute /work path);
#   * names a spec file without its repository path (the file name alone instead of
#     docs/specs/<name>; a Markdown file may use a relative path that leads there), or by a name it
#     had before it moved into docs/specs/ (old_names below);
#   * cites docs/specs/<file> that does not exist, or docs/specs/<file> §N where <file> has no
#     heading numbered N (section numbers are part of a spec's interface);
#   * cites a bare section (§N) in a file whose comments name no docs/specs/ file.
# Comments: // and /* */ in C++/proto/JavaScript files, # in CMake, shell, Python, YAML and text
# files; every line of a Markdown file.
# Usage: citations.sh SOURCE_ROOT FOLDER...   (folders relative to SOURCE_ROOT)
set -u
root=${1:?usage: citations.sh SOURCE_ROOT FOLDER...}
shift
[ $# -gt 0 ] || { echo "usage: citations.sh SOURCE_ROOT FOLDER..."; exit 2; }
cd "$root" || exit 2
status=0

# Spec names that must be cited with their path: the files in docs/specs/, and OLD=NEW names
# documents had before they moved into the repository.
old_names="IZER-RULES.md=docs/specs/ai8x-izer-rules.md izer-baseline.md=docs/specs/ai8x-izer-baseline.md"
old_names="$old_names ARCHITECTURE.md=docs/architecture.md"
names=""
for f in docs/specs/*.md; do
  [ -e "$f" ] && [ "$(basename "$f")" != README.md ] && names="$names $(basename "$f")"
done

files=()
for folder in "$@"; do
  [ -d "$folder" ] || { echo "missing folder $folder"; status=1; continue; }
  while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find "$folder" -type d \( -name node_modules -o -name build -o -name .git \) -prune -o -type f \
      \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' -o -name '*.c' -o -name '*.proto' \
         -o -name '*.js' -o -name '*.mjs' -o -name '*.sh' -o -name '*.py' -o -name '*.cmake' \
         -o -name 'CMakeLists.txt' -o -name '*.txt' -o -name '*.yaml' -o -name '*.yml' -o -name '*.md' \) \
      -print0 | sort -z)
done

# One line per finding: FILE:LINE: what: comment text. Citations of docs/specs/ come out as
# "?spec FILE:LINE PATH SECTION" for the existence checks below.
findings=$(
  [ ${#files[@]} -gt 0 ] && awk -v names="$names" -v old_names="$old_names" '
    function style(f) {
      if (f ~ /\.md$/) return "md"
      if (f ~ /\.(h|hpp|cc|cpp|c|proto|js|mjs)$/) return "c"
      return "hash"
    }
    function report(what) { printf "%s:%d: %s: %s\n", FILENAME, FNR, what, $0 }
    # The comment text of the current line (empty when it has none).
    function comment_of(line,    s, i, j, out) {
      if (st == "md") return line
      if (st == "hash") {
        if (line ~ /^[ \t]*#/) return line
        i = match(line, /[ \t]#/)
        return i ? substr(line, i + 1) : ""
      }
      out = ""
      s = line
      while (s != "") {
        if (in_block) {
          j = index(s, "*/")
          if (!j) { out = out " " s; return out }
          out = out " " substr(s, 1, j - 1); s = substr(s, j + 2); in_block = 0
        } else {
          i = index(s, "//"); j = index(s, "/*")
          if (i && (!j || i < j)) { out = out " " substr(s, i + 2); return out }
          if (!j) return out
          s = substr(s, j + 2); in_block = 1
        }
      }
      return out
    }
    BEGIN {
      n = split(names, spec, " ")
      m = split(old_names, olds, " ")
      for (k = 1; k <= m; k++) { split(olds[k], kv, "="); old[k] = kv[1]; new[k] = kv[2] }
    }
    # A bare section number (§N) needs the file to name its spec (docs/specs/...) somewhere.
    function flush_bare() {
      if (bare_line && !names_spec)
        printf "%s:%d: cites a section without naming its spec (docs/specs/<file>): %s\n", file, bare_line, bare_text
    }
    FNR == 1 { flush_bare(); file = FILENAME; st = style(FILENAME); in_block = 0; bare_line = 0; names_spec = 0 }
    END { flush_bare() }
    {
      c = comment_of($0)
      if (c == "") next
      lc = tolower(c)
      if (lc ~ /(^|[^a-z0-9_])issue[ -]?#?[0-9]/) report("cites an issue number")
      if (lc ~ /(^|[^a-z0-9_])seed steps?[ -]?[0-9]/) report("cites a seed step")
      if (c ~ /(^|[^A-Za-z0-9_])(\.\.\/)+shared([^A-Za-z0-9_-]|$)/ || c ~ /\/work\//) report("points outside the repository")
      # Spec names: the whole path-like token ending in the name must be docs/specs/<name>.
      for (k = 1; k <= n; k++) {
        s = c
        while ((p = index(s, spec[k])) > 0) {
          b = p
          while (b > 1 && substr(s, b - 1, 1) ~ /[A-Za-z0-9_.\/-]/) b--
          tok = substr(s, b, p - b + length(spec[k]))
          if (b > 1 && substr(s, b - 1, 1) ~ /[A-Za-z0-9_]/) tok = ""  # part of a longer word
          if (tok != "" && tok != "docs/specs/" spec[k]) {
            if (st == "md" && tok ~ /^(\.\.\/)+docs\/specs\//) printf "?rel %s:%d %s\n", FILENAME, FNR, tok
            else report("cite " spec[k] " as docs/specs/" spec[k] " (not " tok ")")
          }
          s = substr(s, p + length(spec[k]))
        }
      }
      for (k = 1; k <= m; k++) {
        s = c
        while ((p = index(s, old[k])) > 0) {
          if (p == 1 || substr(s, p - 1, 1) !~ /[A-Za-z0-9_-]/) report("cites " old[k] ", now " new[k])
          s = substr(s, p + length(old[k]))
        }
      }
      if (index(c, "docs/specs/")) names_spec = 1
      if (!bare_line && c ~ /§[0-9]/) { bare_line = FNR; bare_text = $0 }
      # docs/specs/ citations, with the section right after them when there is one.
      s = c
      while (match(s, /docs\/specs\/[A-Za-z0-9_.-]*/)) {
        path = substr(s, RSTART, RLENGTH); sub(/\.+$/, "", path)
        rest = substr(s, RSTART + RLENGTH)
        sec = ""
        if (match(rest, /^[ \t]*§[0-9]+(\.[0-9]+)*/)) {
          sec = substr(rest, RSTART, RLENGTH); sub(/^[^0-9]*/, "", sec)
        }
        printf "?spec %s:%d %s %s\n", FILENAME, FNR, path, sec
        s = rest
      }
    }' "${files[@]}"
)

while IFS= read -r line; do
  [ -n "$line" ] || continue
  case $line in
    "?spec "*)
      read -r _ where path sec <<<"$line"
      if [ ! -e "$path" ]; then
        echo "$where: cites $path, which does not exist"
        status=1
      elif [ -n "${sec:-}" ] && [ -f "$path" ]; then
        re="^#+ ${sec//./\\.}\.?( |$)"
        if ! grep -qE "$re" "$path"; then
          echo "$where: cites $path §$sec, which has no heading numbered $sec"
          status=1
        fi
      fi
      ;;
    "?rel "*)
      read -r _ where rel <<<"$line"
      if [ ! -e "$(dirname "${where%:*}")/$rel" ]; then
        echo "$where: links $rel, which does not exist"
        status=1
      fi
      ;;
    *)
      echo "$line"
      status=1
      ;;
  esac
done <<<"$findings"

[ $status -eq 0 ] && echo "citations hold in: $*"
exit $status
