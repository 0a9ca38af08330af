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
