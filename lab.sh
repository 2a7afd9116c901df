#!/usr/bin/env bash
# Set up and use the lab:  ./lab.sh run   (the app)   |   ./lab.sh test [pytest args]   (every test)
# The virtual environment lives in .venv unless LAB_VENV names another folder.
set -euo pipefail
cd "$(dirname "$0")"
venv="${LAB_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# install FILE: pip install -r FILE, again only when FILE changed (its hash is stamped in the environment).
install() {
  local stamp="$venv/.${1%.txt}.sha256" want
  want="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$1"
    echo "$want" > "$stamp"
  fi
}
install requirements.txt
case "${1:-}" in
  run)
    shift
    # Ray only for a cluster (README: More than one machine).
    if [ -n "${RLHF_LAB_RAY_ADDRESS:-}" ]; then
      install requirements-cluster.txt
    fi
    # Loopback only, unless the caller passes --server.address (later flags win); README: serving a class.
    exec "$venv/bin/python" -m streamlit run app.py --server.address 127.0.0.1 "$@"
    ;;
  test)
    shift
    install requirements-cluster.txt  # the cluster tests start a local Ray cluster
    exec "$venv/bin/python" -m pytest "$@"
    ;;
  *)
    echo "usage: ./lab.sh run [streamlit args] | ./lab.sh test [pytest args]" >&2
    exit 2
    ;;
esac
