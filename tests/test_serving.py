"""What a served app exposes: `./lab.sh run` and the Streamlit config listen on the loopback address only and
show no error details, unless the operator asks for another address."""

import hashlib
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from app_driver import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_the_streamlit_config_binds_loopback_and_hides_error_details():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["client"]["showErrorDetails"] == "none"


def listening_addresses(port: int) -> set[str]:
    """The local IPv4/IPv6 addresses with a socket listening on `port` (from /proc/net/tcp*)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from /proc")
@pytest.mark.parametrize("extra, expected", [([], {"0100007F"}), (["--server.address", "0.0.0.0"], {"00000000"})])
def test_lab_sh_run_listens_on_loopback_unless_told_otherwise(extra, expected):
    venv = Path(sys.prefix)  # the tests' own virtual environment, which lab.sh then finds installed
    stamp = venv / ".requirements.sha256"
    wanted = hashlib.sha256((ROOT / "requirements.txt").read_bytes()).hexdigest()
    if sys.prefix == sys.base_prefix or not stamp.exists() or stamp.read_text().strip() != wanted:
        pytest.skip("runs lab.sh only against a virtual environment it would not install into")
    port = free_port()
    server = subprocess.Popen(
        [str(ROOT / "lab.sh"), "run", "--server.headless", "true", "--server.port", str(port), *extra],
        cwd=ROOT,
        env={**os.environ, "LAB_VENV": str(venv)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not listening_addresses(port):
            assert server.poll() is None and time.monotonic() < deadline, "the app did not start listening"
            time.sleep(0.2)
        assert listening_addresses(port) == expected  # 0100007F is 127.0.0.1, 00000000 every interface
    finally:
        server.terminate()
        server.wait(10)


def test_the_served_app_sends_no_message_as_a_reference_to_the_browsers_cache(monkeypatch):
    # A reference to a message the browser has dropped is Streamlit's "Cached ForwardMsg MISS" modal: with the
    # project's config no message, however large, is marked cacheable, so none is ever sent as a reference.
    from streamlit import config
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.runtime.forward_msg_cache import populate_hash_if_needed

    monkeypatch.chdir(ROOT)
    config.get_config_options(force_reparse=True)
    assert config.get_option("global.minCachedMessageSize") == 1e15
    chart = ForwardMsg()
    chart.delta.new_element.markdown.body = "x" * 2_000_000  # larger than any element a page draws
    populate_hash_if_needed(chart)
    assert chart.hash and not chart.metadata.cacheable
