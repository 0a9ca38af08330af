import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Test settings for every process (the peers and Ray's workers inherit the environment).
TEST_ENV = {
    "RDMAKIT_BACKEND": "host",
    "RDMAKIT_CHUNK": "1MiB",
    "RDMAKIT_SLOTS": "4",
    "RDMAKIT_TCP_CONNECTIONS": "3",
    "RDMAKIT_TIMEOUT_S": "10",
}
os.environ.update(TEST_ENV)


@pytest.fixture(scope="session")
def test_env():
    return dict(TEST_ENV)


@pytest.fixture(scope="session")
def cluster(test_env):
    """One local Ray instance for every Ray test module: Ray 2.60's RDT monitor thread outlives
    `ray.shutdown()` and fails on the old session's objects after a second `ray.init()`."""
    ray = pytest.importorskip("ray", reason="ray is not installed in this venv")
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        # The workers import this folder's helpers (peer.py) like the tests do.
        runtime_env={"env_vars": {**test_env, "PYTHONPATH": HERE}},
    )
    yield
    ray.shutdown()
