import os
import tempfile

# Every test process gets its own model cache, so no test reads a checkpoint it did not make.
os.environ.setdefault("RLHF_LAB_CACHE", tempfile.mkdtemp(prefix="rlhf-lab-test-cache-"))
# Tests build exactly the models they use; the app's background warm start would only compete for the CPU.
os.environ.setdefault("RLHF_LAB_WARM_START", "0")
