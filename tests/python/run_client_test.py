#!/usr/bin/python3
"""Installs clients/python into a fresh venv with the README's command, then runs client_test.py
with that venv's Python against a live kilnd. Run by ctest (tests/python/CMakeLists.txt):

  run_client_test.py --source REPO --venv DIR --kilnd PATH --version X.Y.Z
"""
import argparse
import os
import shutil
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--kilnd", required=True)
    ap.add_argument("--version", required=True)
    a = ap.parse_args()
    venv = os.path.abspath(a.venv)
    shutil.rmtree(venv, ignore_errors=True)
    t0 = time.monotonic()
    # The README's two commands, from the repository root.
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], cwd=a.source, check=True)
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
                    "./clients/python"], cwd=a.source, check=True)
    print(f"venv + install: {time.monotonic() - t0:.1f} s", flush=True)
    env = dict(os.environ, KILND=a.kilnd, KILN_SOURCE=os.path.abspath(a.source), KILN_VERSION=a.version)
    env.pop("PYTHONPATH", None)
    test = os.path.join(os.path.dirname(os.path.abspath(__file__)), "client_test.py")
    # From an empty directory: the kiln_client imported is the installed one, not a source tree.
    work = os.path.join(venv, "work")
    os.makedirs(work, exist_ok=True)
    return subprocess.run([os.path.join(venv, "bin", "python"), test, "-v"], cwd=work, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
