#!/usr/bin/env bash
# Create (or reuse) a separate venv holding Arize Phoenix for tests/test_phoenix_integration.py,
# and print the path of its python on stdout (everything else goes to stderr).
#
#   usage: .ci/phoenix-venv.sh DIR
#   TRACESCORE_PHOENIX_PYTHON="$(bash .ci/phoenix-venv.sh "$HOME/.cache/tracescore/phoenix-venv")"
#   export TRACESCORE_PHOENIX_PYTHON   # (a separate line, so that set -e sees a failure)
#
# Phoenix pulls in ~150 packages (about 850 MB); they stay out of the venv tracescore is tested
# in. Idempotent: a DIR that already imports a new enough Phoenix is reused without touching
# the package index; anything else in DIR is (re)installed into.
set -euo pipefail

PHOENIX_REQ='arize-phoenix>=20.26.1'
PHOENIX_MIN='20.26.1'

dir="${1:?usage: $0 DIR (where to create or reuse the Phoenix venv)}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"  # absolute: the printed python is used from other directories
py_base="${PYTHON:-python3}"
py="$dir/bin/python"

have_phoenix() {
    [ -x "$py" ] && "$py" - "$PHOENIX_MIN" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

# the server entry point the test runs (found without importing it: that takes seconds)
spec = find_spec("phoenix")
assert spec and any((Path(p) / "server" / "main.py").is_file()
                    for p in spec.submodule_search_locations or ())

def key(v):
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return out

sys.exit(0 if key(version("arize-phoenix")) >= key(sys.argv[1]) else 1)
EOF
}

if have_phoenix; then
    echo "phoenix-venv: reusing $dir" >&2
else
    # Phoenix needs Python >= 3.11.
    "$py_base" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
        echo "phoenix-venv: arize-phoenix needs Python >= 3.11; $py_base is $("$py_base" -V 2>&1)" >&2
        exit 1
    }
    echo "phoenix-venv: installing $PHOENIX_REQ into $dir (takes 1-2 minutes)" >&2
    start=$(date +%s)
    "$py_base" -m venv "$dir"
    "$py" -m pip install -qq --disable-pip-version-check "$PHOENIX_REQ" >&2
    have_phoenix || { echo "phoenix-venv: phoenix is not importable from $py after install" >&2; exit 1; }
    echo "phoenix-venv: installed in $(( $(date +%s) - start ))s" >&2
fi
echo "$py"
