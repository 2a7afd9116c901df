#!/usr/bin/env bash
# Set up and use the lab:  ./lab.sh run   (the app)   |   ./lab.sh test [pytest args]   (every test)
# The virtual environment lives in .venv unless LAB_VENV names another folder.
set -euo pipefail
cd "$(dirname "$0")"
venv="${LAB_VENV:-.venv}"
stamp="$venv/.requirements.sha256"
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi
case "${1:-}" in
  run)
    shift
    # Loopback only, unless the caller passes --server.address (later flags win); README: serving a class.
    exec "$venv/bin/python" -m streamlit run app.py --server.address 127.0.0.1 "$@"
    ;;
  test)
    shift
    exec "$venv/bin/python" -m pytest "$@"
    ;;
  *)
    echo "usage: ./lab.sh run [streamlit args] | ./lab.sh test [pytest args]" >&2
    exit 2
    ;;
esac
