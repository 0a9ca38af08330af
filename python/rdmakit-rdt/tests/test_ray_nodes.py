"""Two Ray nodes on one machine (its own address and 127.0.0.2): a pull crosses "nodes" — the producer's
server listens on its node's address only, the consumer on the other node reaches it there. Its own
Ray cluster, in its own driver process (two_nodes.py), beside the session's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray", reason="ray is not installed in this venv")
HERE = os.path.dirname(os.path.abspath(__file__))


def test_a_pull_crosses_two_ray_nodes_on_two_addresses(test_env):
    env = {**os.environ, **test_env, "PYTHONPATH": HERE, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, os.path.join(HERE, "two_nodes.py")], env=env,
                          capture_output=True, text=True, timeout=180)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["got"] == [3 * (1 << 20) + 5, 77, 77], out
    assert out["producer_node"] == out["head_node"] != "127.0.0.2", out
    assert out["consumer_node"] == "127.0.0.2", out
    # The producer's server is bound to its node's address, and that is what the consumer dialled.
    assert out["server"].rsplit(":", 1)[0] == out["head_node"], out
    assert out["consumer_sessions"] == [out["server"]], out
    assert out["served"] == 1, out
