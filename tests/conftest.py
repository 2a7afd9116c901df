import os
import tempfile

# Every test process gets its own model cache, so no test reads a checkpoint it did not make.
os.environ.setdefault("RLHF_LAB_CACHE", tempfile.mkdtemp(prefix="rlhf-lab-test-cache-"))
