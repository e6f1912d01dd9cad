# Sourced by the scripts in this folder: makes .venv with the project and its dev extras, and
# puts the local emulator's npm package in the cache, reinstalling only when pyproject changes
# or when another Python is asked for (PYTHON=/path/to/python3.X, default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! version="$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>&1)"; then
    echo "error: cannot run $PY ($version); set PYTHON to a Python 3.10 or newer"
    exit 1
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "error: $PY is Python $version; kinesis-connectors needs 3.10 or newer (set PYTHON)"
    exit 1
fi
VENV="$ROOT/.venv"
STAMP="$VENV/.kinesis-connectors-stamp"
want="$(sha256sum pyproject.toml | cut -c1-16) python $version"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "==> installing the Python environment in .venv with Python $version" \
        "(first run takes about a minute)"
    "$PY" -m venv --clear "$VENV"
    log="$VENV/install.log"
    if ! { "$VENV/bin/python" -m pip install --upgrade pip \
           && "$VENV/bin/python" -m pip install -e ".[dev]"; } > "$log" 2>&1; then
        tail -n 40 "$log"
        echo "error: pip could not install the project; the whole log is in $log"
        exit 1
    fi
    # (its output, Beam's import-time warnings included, only shows when it fails)
    if ! out="$("$VENV/bin/python" -c "import kinesis_core, apache_beam, faust, moto" 2>&1)"; then
        echo "$out"
        echo "error: the Python environment did not install"
        exit 1
    fi
    echo "$want" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# kinesis-mock (npm kinesis-local) goes into the user cache on first use; do it up front so a
# missing node/npm shows here, with what to install, rather than in the middle of the tests
# (unless the caller needs no emulator: scripts/test --fast sets KINESIS_CONNECTORS_NO_EMULATOR).
if [ -z "${KINESIS_CONNECTORS_NO_EMULATOR:-}" ]; then
    python -m kinesis_core.local install
fi
