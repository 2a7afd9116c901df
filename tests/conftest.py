import os
import tempfile

# Every test process gets its own model cache, so no test reads a checkpoint it did not make. pytest-xdist's workers
# inherit the environment of the process that starts them, so a worker makes its own too, unless the caller named
# one (RLHF_LAB_CACHE set before pytest started).
if "RLHF_LAB_CACHE" not in os.environ or os.environ.get("RLHF_LAB_TEST_OWN_CACHE") == "1":
    os.environ["RLHF_LAB_CACHE"] = tempfile.mkdtemp(prefix="rlhf-lab-test-cache-")
    os.environ["RLHF_LAB_TEST_OWN_CACHE"] = "1"
# Tests build exactly the models they use; the app's background warm start would only compete for the CPU.
os.environ.setdefault("RLHF_LAB_WARM_START", "0")
# Under pytest-xdist (pytest.ini) the workers share the cores: torch's default of a thread per core in every worker
# would oversubscribe them, so each gets its share.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))


def pytest_collection_modifyitems(config, items):
    """Files that drive a browser first, then the rest by their number of tests, the most first: the order in which
    pytest-xdist hands files to its workers (pytest.ini: `--dist loadfile --no-loadscope-reorder`). Its own order, by
    number of tests alone, left the files of one browser test (each starts the app, a minute or more) to the end,
    where the other worker, out of files, waited for them; the suite's wall is the slower worker's."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    browser = {name for name, tests in files.items() if any(t.get_closest_marker("browser") for t in tests)}
    order = sorted(files, key=lambda name: (name not in browser, -len(files[name])))
    items[:] = [item for name in order for item in files[name]]
