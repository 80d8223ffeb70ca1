#!/usr/bin/python3
"""Checks that every external command the tests call comes from a Debian package that
scripts/install-deps.sh installs (or that such a package pulls in, or an Essential package), so
that the README's two commands work on a fresh Debian 12 machine and not only on machines that
carry extra software. .ci/run runs it before `make test`.

Commands are collected from tests/**/CMakeLists.txt, tests/**/*.sh, scripts/*.sh and .ci/run
(words in command position, including inside `bash -c "..."` strings), plus system()/popen()
calls in tests/**/*.cc. Each is resolved on the Debian PATH only (/usr/sbin:/usr/bin:/sbin:/bin,
so /usr/local and pip/npm installs do not count) and mapped to its package with `dpkg -S`. A
command found in a package that is not Debian's (its installed version is in no debian.org
archive, e.g. NodeSource's nodejs, which bundles npm while Debian's does not) must be listed in
NON_DEBIAN below with the Debian package that provides it on a fresh machine, and that package
must be installed by install-deps.sh. Words that resolve to nothing are not commands of this
machine and are skipped (a test that needs them fails on its own).

Usage: scripts/check-test-deps.py [-v]     exit 0 = every command covered, 1 = a miss (listed)
"""
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBIAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# command -> the Debian 12 package that provides it where the installed provider is not Debian's.
NON_DEBIAN = {"npm": "npm", "npx": "npm", "node": "nodejs", "nodejs": "nodejs"}
# Words in command position that are shell syntax, not commands.
SHELL_WORDS = set("""if then else elif fi for while until do done case esac in function select time
  return exit break continue local export readonly declare set unset shift trap eval exec source
  cd echo printf read test true false wait command type builtin let ulimit umask alias pushd popd
  mapfile getopts hash kill pwd""".split())
# Words that come before a command in a simple command (keywords and wrappers).
PREFIX_WORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "time", "exec", "sudo", "$SUDO",
                "nice", "timeout", "env", "xargs", "command", "{", "}"}


def shell_commands(text):
    """(word, offset) for the command word of every simple command in shell text."""
    text = re.sub(r"'[^']*'", "''", text)  # single-quoted: data (awk and python programs, messages)
    text = text.replace("\\\n", " ")
    out = []
    for seg in re.finditer(r"[^|;&()`\n{}]+", text):
        words = list(re.finditer(r"\S+", seg.group(0)))
        i = 0
        while i < len(words):
            w = words[i].group(0)
            if w in PREFIX_WORDS or re.match(r"^[A-Za-z_]\w*=", w) or (w.startswith("-") and i > 0):
                i += 1
                if w in ("nice", "timeout") and i < len(words) and re.match(r"^-?\d|^-n$", words[i].group(0)):
                    i += 2 if words[i].group(0) == "-n" else 1
                continue
            if re.match(r"^[A-Za-z0-9_./+-]+$", w):
                out.append((w, seg.start() + words[i].start()))
            break
    return out


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True).stdout


def install_deps_packages():
    text = open(os.path.join(ROOT, "scripts/install-deps.sh")).read()
    block = re.search(r"PACKAGES=\((.*?)\)", text, re.S).group(1)
    pkgs = set(re.sub(r"#.*", "", block).split())
    pkgs |= set(re.findall(r"missing\+=\(([\w.+-]+)\)", text))
    return pkgs


def installed_packages():
    """name -> (version, maintainer, set of dependency names) for every installed package."""
    out = sh("dpkg-query", "-W", "-f=${Package}\t${Version}\t${Maintainer}\t${Essential}\t${Priority}\t"
             "${Depends}, ${Pre-Depends}\t${Status}\n")
    pkgs = {}
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 7 or not f[6].endswith(" installed"):
            continue
        deps = set()
        for alt in f[5].split(","):
            for d in alt.split("|"):
                d = d.strip().split(" ")[0].split(":")[0]
                if d:
                    deps.add(d)
        pkgs[f[0]] = (f[1], f[2], f[3] == "yes" or f[4] == "required", deps)
    return pkgs


def dependency_closure(roots, installed):
    provides = {}
    for line in sh("dpkg-query", "-W", "-f=${Package}\t${Provides}\n").splitlines():
        name, _, prov = line.partition("\t")
        for v in prov.split(","):
            v = v.strip().split(" ")[0]
            if v:
                provides.setdefault(v, set()).add(name)
    closure, todo = set(), list(roots)
    # Essential and required packages are on every Debian system.
    todo += [n for n, (_, _, base, _) in installed.items() if base]
    while todo:
        p = todo.pop()
        if p in closure:
            continue
        closure.add(p)
        todo += list(installed.get(p, ("", "", False, set()))[3])
        todo += list(provides.get(p, ()))
    return closure


def path_owners():
    owners = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        for path in open(lst, errors="replace"):
            owners.setdefault(path.rstrip("\n"), pkg)
    return owners


def cmake_targets():
    names = set()
    for f in glob.glob(os.path.join(ROOT, "**/CMakeLists.txt"), recursive=True):
        if "/build" in f[len(ROOT):]:
            continue
        names |= set(re.findall(r"add_executable\(\s*([\w.+-]+)", open(f).read()))
    return names


def strip_comments(text):
    return "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in text.splitlines())


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def candidate_commands():
    found = {}

    def shell(text, rel, base_line=0):
        for word, pos in shell_commands(text):
            found.setdefault(word, f"{rel}:{base_line + line_of(text, pos)}")

    cmakes = glob.glob(os.path.join(ROOT, "tests/**/CMakeLists.txt"), recursive=True)
    scripts = set(glob.glob(os.path.join(ROOT, "tests/**/*.sh"), recursive=True))
    callers = cmakes + [os.path.join(ROOT, ".ci/run")]
    # scripts/*.sh that tests or CI run (not the ones only syntax-checked with bash -n).
    for f in callers:
        for m in re.finditer(r"(?<!-n )(?:\$\{KILN_SOURCE_ROOT\}/|\b)(scripts/[\w.-]+\.sh)", open(f).read()):
            scripts.add(os.path.join(ROOT, m.group(1)))
    for f in sorted(scripts) + [os.path.join(ROOT, ".ci/run")]:
        if os.path.exists(f):
            shell(strip_comments(open(f, errors="replace").read()), os.path.relpath(f, ROOT))
    for f in cmakes:
        text = strip_comments(open(f, errors="replace").read())
        rel = os.path.relpath(f, ROOT)
        for m in re.finditer(r"\bCOMMAND\s+([A-Za-z0-9_./+-]+)", text):
            found.setdefault(m.group(1), f"{rel}:{line_of(text, m.start())}")
        for m in re.finditer(r'\b(?:bash|sh)\s+-c\s+"((?:[^"\\]|\\.)*)"', text, re.S):
            shell(m.group(1), rel, line_of(text, m.start(1)) - 1)
    for f in glob.glob(os.path.join(ROOT, "tests/**/*.cc"), recursive=True):
        rel = os.path.relpath(f, ROOT)
        for n, line in enumerate(open(f, errors="replace"), 1):
            for m in re.finditer(r"""(?:system|popen)\(\s*(?:std::string\()?"([A-Za-z0-9_.+-]+)""", line):
                found.setdefault(m.group(1), f"{rel}:{n}")
            for m in re.finditer(r'"(unshare|mount|umount|dd|truncate|fallocate) ', line):
                found.setdefault(m.group(1), f"{rel}:{n}")
    return found


def owner(path, owners):
    for p in (path, os.path.realpath(path)):
        for q in (p, p[4:] if p.startswith("/usr/") else "/usr" + p):  # usrmerge: /bin/x == /usr/bin/x
            if q in owners:
                return owners[q]
    return None


def debian_origins(pkgs, installed):
    """pkg -> whether the installed pkg is Debian's: its version is in a debian.org archive, or
    the archive has another version of it from the same maintainer (a superseded binNMU, say).
    NodeSource's nodejs is neither. Without apt lists nothing can be compared: trusted."""
    pkgs = sorted(pkgs)
    policy = sh("apt-cache", "policy", *pkgs)
    show = sh("apt-cache", "show", *pkgs)
    stanzas = {}
    for st in show.split("\n\n"):
        name = re.search(r"^Package: (\S+)", st, re.M)
        if name:
            stanzas.setdefault(name.group(1), []).append(st)
    result = {}
    for block in re.split(r"\n(?=\S)", "\n" + policy):
        m = re.match(r"\n?(\S+):\n", block)
        if not m or m.group(1) not in installed:
            continue
        pkg = m.group(1)
        version, maintainer = installed[pkg][0], installed[pkg][1]
        if "debian.org" not in block:
            result[pkg] = "Version table" not in block or "debian" not in policy
            continue
        ok = False
        for entry in re.split(r"\n(?= {5}\S| \*\*\* )", block):
            if re.match(r"\s*(\*\*\*\s+)?" + re.escape(version) + r"\s", entry) and "debian.org" in entry:
                ok = True
        for st in stanzas.get(pkg, []):
            if f"\nVersion: {version}\n" not in st + "\n" and f"\nMaintainer: {maintainer}\n" in st + "\n":
                ok = True
        result[pkg] = ok
    return result


def main():
    verbose = "-v" in sys.argv
    packages = install_deps_packages()
    installed = installed_packages()
    allowed = dependency_closure(packages, installed)
    owners = path_owners()
    targets = cmake_targets()
    misses = []
    resolved = []
    for cmd, where in sorted(candidate_commands().items()):
        name = os.path.basename(cmd)
        if name in SHELL_WORDS or name in targets or cmd.startswith(("$", "./", "../")) or "/" in cmd and not cmd.startswith("/"):
            continue
        if cmd.startswith("/"):
            path = cmd if os.path.isfile(cmd) and os.access(cmd, os.X_OK) else None
        else:
            path = shutil.which(name, path=DEBIAN_PATH)
        if not path:
            if verbose:
                print(f"skip {name} ({where}): not a command on this machine")
            continue
        resolved.append((name, where, path, owner(path, owners)))
    debian = debian_origins({pkg for _, _, _, pkg in resolved if pkg in installed}, installed)
    for name, where, path, pkg in resolved:
        if pkg is None or pkg not in installed:
            misses.append(f"{name} ({where}): {path} belongs to no installed Debian package")
            continue
        if not debian.get(pkg, True):
            debian_pkg = NON_DEBIAN.get(name)
            if debian_pkg is None:
                misses.append(f"{name} ({where}): provided here by {pkg} {installed[pkg][0]}, which is not Debian's; "
                              f"add the Debian package that provides it to install-deps.sh and to NON_DEBIAN here")
            elif debian_pkg not in packages:
                misses.append(f"{name} ({where}): on Debian 12 it comes from package {debian_pkg}, which "
                              f"scripts/install-deps.sh does not install")
            elif verbose:
                print(f"ok   {name}: {pkg} {installed[pkg][0]} (not Debian's) here; on Debian from {debian_pkg}, "
                      f"which install-deps.sh installs")
            continue
        if pkg not in allowed:
            misses.append(f"{name} ({where}): from package {pkg}, which scripts/install-deps.sh does not install "
                          f"(nor anything it installs depends on)")
        elif verbose:
            print(f"ok   {name}: {pkg}")
    checked = len(resolved)
    for m in misses:
        print("check-test-deps: " + m, file=sys.stderr)
    print(f"check-test-deps: {checked} commands checked, {len(misses)} not covered by scripts/install-deps.sh")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
