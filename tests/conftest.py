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
