#!/usr/bin/env python3
"""The scale benchmark: `rdmakit preflight --pods` on N simulated eRDMA nodes of the control-plane tier (started
by tests/cluster/up.sh; KUBECONFIG=target/cluster/kubeconfig), for each N given, writing
bench/results/scale/preflight.json:

  wall time, rdmakit's peak RSS (/usr/bin/time -v), the API server's CPU seconds over the run (/proc/PID/stat),
  and the API requests rdmakit's work shows up as (apiserver_request_total deltas for nodes, pods, pods/exec,
  resourceslices and deviceclasses, by verb; status writes and leases, the simulated kubelets' heartbeats, are
  left out); with the tier's audit log (RDMAKIT_TIER_AUDIT=1 tests/cluster/up.sh) the same requests by who sent
  them, rdmakit or the node emulator's kubectl; plus whether every planted fault (bench/scale/fixture.py) was named.

Then node-level preflight (no pods: node capacity, ResourceSlices, plugins, APIs) by each shape's profile on the
whole pool: aliyun-erdma for the N eRDMA nodes, gke-rdma-dranet, aws-efa-eks and rdma-shared-device for the N/4
nodes of each hyperscaler shape (fixture.py) beside them, with the same figures and the shape's planted faults.

Then, unless SCALE_CHECK=0, `rdmakit check --no-matrix` on the same pool: a check pod per eligible node created
and Ready, its facts read by exec, the pods deleted (the same figures, and the planted faults found).

Usage: bench/scale/run.py 100 300 1000   (sizes not given keep their earlier results in the JSON)
"""
import json
import os
import re
import subprocess
import sys
import time

import fixture

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KUBECTL = os.path.join(ROOT, "target/cluster/bin/kubectl")
RDMAKIT = os.environ.get("RDMAKIT", os.path.join(ROOT, "target/debug/rdmakit"))
ENV = dict(os.environ, KUBECONFIG=os.path.join(ROOT, "target/cluster/kubeconfig"), NO_COLOR="1")
NS = "scale-bench"
RESOURCES = {"nodes", "pods", "resourceslices", "deviceclasses", "daemonsets"}


def kubectl(*args, stdin=None, check=True):
    r = subprocess.run([KUBECTL, *args], input=stdin, env=ENV, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {r.stderr}")
    return r.stdout


def requests():
    """apiserver_request_total summed by verb over the resources rdmakit reads (status subresources out)."""
    out = {}
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("resource") not in RESOURCES or labels.get("subresource") not in ("", "exec"):
            continue
        verb = labels["verb"] + ("/exec" if labels.get("subresource") == "exec" else "")
        out[verb] = out.get(verb, 0) + float(line.rsplit(" ", 1)[1])
    return out


AUDIT = os.path.join(ROOT, "target/cluster/logs/audit.log")


def audit_offset():
    return os.path.getsize(AUDIT) if os.path.exists(AUDIT) else None


def audited(since):
    """The API requests since `since` (a byte offset) in the audit log (tests/cluster/up.sh with
    RDMAKIT_TIER_AUDIT=1), by who sent them: rdmakit (its User-Agent), the node emulator (answering an exec it
    reads the pod spec: the stand-in's cost, not rdmakit's; User-Agent node-emulator, or kubectl before af1f6d3),
    kubectl, and the cluster's own components."""
    if since is None:
        return None
    seen, out = set(), {}
    with open(AUDIT) as f:
        f.seek(since)
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if e.get("auditID") in seen:
                continue  # long-running requests (exec, watch) log ResponseStarted and ResponseComplete
            seen.add(e.get("auditID"))
            ua = e.get("userAgent", "")
            who = ("rdmakit" if ua.startswith("rdmakit/") else "node-emulator" if ua.startswith("node-emulator")
                   else "kubectl" if ua.startswith("kubectl") else "cluster")
            ref = e.get("objectRef") or {}
            what = e["verb"] + " " + ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
            out.setdefault(who, {})
            out[who][what] = out[who].get(what, 0) + 1
    return {who: dict(sorted(v.items())) for who, v in sorted(out.items())}


def machine_cpu():
    """CPU seconds the whole machine spent (every core), from /proc/stat: the simulated nodes' exec
    handling (tests/cluster/emulator, Python) is most of it at scale, not rdmakit."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def idle_cpu_rate(seconds=10.0):
    """The machine's CPU-s per second while rdmakit runs nothing: the simulated cluster's own load (KWOK's node
    heartbeats, the controllers, the API server's watches), which grows with the pool and shares the two cores
    with every exec. Subtracted from a run's whole-machine CPU, what is left is the run's own cost."""
    m0, t0 = machine_cpu(), time.time()
    time.sleep(seconds)
    return (machine_cpu() - m0) / (time.time() - t0)


def apiserver_cpu():
    pid = subprocess.run(["pgrep", "-f", "kube-apiserver --etcd-prefix"], capture_output=True, text=True)
    pid = pid.stdout.split()[0]
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(what, ok, limit=900):
    t0 = time.time()
    while not ok():
        if time.time() - t0 > limit:
            raise SystemExit(f"{what}: not within {limit} s")
        time.sleep(3)
    return time.time() - t0


def running_pods():
    out = kubectl("-n", NS, "get", "pods", "-l", "app=scale-probe", "-o",
                  "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
    return out.split().count("Running")


def one(n):
    want = fixture.expected(n)
    healthy_pods = n - len(set(want["no_rdma"]) | set(want["not_ready"]))
    kubectl("create", "namespace", NS, check=False)
    t0 = time.time()
    kubectl("apply", "--server-side", "-f", "-",
            stdin="".join(fixture.node(i) for i in range(n)) + fixture.shapes(n) + fixture.daemonset(NS))
    setup = {"applied_s": round(time.time() - t0, 1)}
    setup["pods_running_s"] = round(wait_for("probe pods Running", lambda: running_pods() >= healthy_pods), 1)
    idle = idle_cpu_rate()
    req0, cpu0, audit0, m0 = requests(), apiserver_cpu(), audit_offset(), machine_cpu()
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-v", RDMAKIT, "preflight", "--profile", "aliyun-erdma",
                        "--pods", "app=scale-probe", "--pods-namespace", NS, "--json"],
                       env=ENV, capture_output=True, text=True)
    wall = time.time() - t0
    req1, cpu1, m1 = requests(), apiserver_cpu(), machine_cpu()
    by_agent = audited(audit0)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", r.stderr))
    v = json.loads(r.stdout)
    named = json.dumps(v["checks"])
    ineligible = {x["name"] for x in v["nodes"] if not x["eligible"]}
    found = {
        "no_rdma": all(x in ineligible for x in want["no_rdma"]),
        "not_ready": all(x in ineligible or x not in {y["name"] for y in v["nodes"]} for x in want["not_ready"]),
        "memlock": all(x in named for x in want["memlock"]),
    }
    result = {
        "nodes": n,
        "commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "probed_pods": len(v.get("pods", [])),
        "wall_s": round(wall, 2),
        "rdmakit_peak_rss_mib": round(int(rss.group(1)) / 1024, 1) if rss else None,
        "rdmakit_cpu_s": round(cpu, 2),
        "apiserver_cpu_s": round(cpu1 - cpu0, 2),
        "machine_cpu_s": round(m1 - m0, 1),
        "machine_idle_cpu_per_s": round(idle, 3),
        "requests": {k: int(req1.get(k, 0) - req0.get(k, 0)) for k in sorted(req1) if req1.get(k, 0) - req0.get(k, 0)},
        "requests_by_agent": by_agent,
        "planted_faults": {k: len(want[k]) for k in want},
        "planted_faults_named": found,
        "exit_code": r.returncode,
        "setup": setup,
    }
    result["node_preflight"] = node_preflight(n, want)
    if os.environ.get("SCALE_CHECK", "1") != "0":
        result["check"] = check(n, want)
    kubectl("delete", "namespace", NS, "--wait=true", "--timeout=600s", check=False)
    kubectl("delete", "resourceslices", "-l", "rdmakit.test/pool=scale", "--wait=true", check=False)
    # Not `--wait=true`: kubectl's wait on 1,000 deletions hung after the last node was gone (twice); the
    # count of what is left is what matters.
    kubectl("delete", "nodes", "-l", "rdmakit.test/pool=scale", "--wait=false", check=False)
    wait_for("scale nodes deleted",
             lambda: not kubectl("get", "nodes", "-l", "rdmakit.test/pool=scale", "-o", "name", check=False).strip())
    return result


def timed(args):
    """rdmakit ARGS under /usr/bin/time -v: (its JSON, wall s, peak RSS MiB, CPU s, API requests, exit)."""
    req0, cpu0 = requests(), apiserver_cpu()
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-v", RDMAKIT, *args], env=ENV, capture_output=True, text=True)
    wall = time.time() - t0
    req1, cpu1 = requests(), apiserver_cpu()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", r.stderr))
    try:
        v = json.loads(r.stdout)
    except ValueError:
        raise SystemExit(f"rdmakit {' '.join(args)}: {r.stdout[-2000:]} {r.stderr[-4000:]}")
    return v, {
        "wall_s": round(wall, 2),
        "rdmakit_peak_rss_mib": round(int(rss.group(1)) / 1024, 1) if rss else None,
        "rdmakit_cpu_s": round(cpu, 2),
        "apiserver_cpu_s": round(cpu1 - cpu0, 2),
        "requests": {k: int(req1.get(k, 0) - req0.get(k, 0)) for k in sorted(req1) if req1.get(k, 0) - req0.get(k, 0)},
        "exit_code": r.returncode,
    }


def node_preflight(n, want):
    """`rdmakit preflight --profile P` (nodes only) for eRDMA and each hyperscaler shape, on the whole pool."""
    shapes = fixture.expected_shapes(n)
    runs = {"aliyun-erdma": ("scale-erdma-", want["no_rdma"], want["not_ready"], None)}
    for shape, e in shapes.items():
        runs[e["profile"]] = (f"scale-{shape}-", e["no_rdma"], e["not_ready"], e["healthy"])
    out = {}
    for profile, (prefix, no_rdma, not_ready, healthy) in runs.items():
        v, r = timed(["preflight", "--profile", profile, "--json"])
        mine = [x for x in v["nodes"] if x["name"].startswith(prefix)]
        eligible = {x["name"] for x in mine if x["eligible"]}
        warned = {c["subject"] for c in v["checks"]
                  if c["id"] == "node-capacity" and "without RDMA capacity" in c["summary"]}
        r["shape_nodes"] = len(mine)
        r["eligible"] = len(eligible)
        r["planted_faults"] = {"no_rdma": len(no_rdma), "not_ready": len(not_ready)}
        r["planted_faults_named"] = {
            "no_rdma": all(x in warned and x not in eligible for x in no_rdma),
            "not_ready": all(x not in eligible for x in not_ready),
            # Nothing but the planted nodes left out (eRDMA: every other node of its pool is eligible).
            "only_those": eligible == set(healthy) if healthy is not None else
            len(eligible) == len(mine) - len(set(no_rdma) | set(not_ready)),
        }
        out[profile] = r
    return out


def check(n, want):
    """`rdmakit check --no-matrix` on the scale pool: a check pod per eligible node created, its facts read
    by exec, the pods deleted (the matrix at this size is a `--pairs` choice; its plan is tested apart)."""
    req0, cpu0, audit0, m0 = requests(), apiserver_cpu(), audit_offset(), machine_cpu()
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-v", RDMAKIT, "check", "--profile", "aliyun-erdma", "-n", NS,
                        "--nodes", "rdmakit.test/pool=scale,!rdmakit.test/shape", "--no-matrix", "--json", "-"],
                       env=ENV, capture_output=True, text=True)
    wall = time.time() - t0
    req1, cpu1, m1 = requests(), apiserver_cpu(), machine_cpu()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", r.stderr))
    try:
        v = json.loads(r.stdout)
    except ValueError:
        raise SystemExit(f"check --json: {r.stdout[-2000:]} {r.stderr[-4000:]}")
    found = json.dumps(v["findings"]) + json.dumps(v["state"])
    checked = {x["facts"].get("node") for x in v["nodes"]}
    return {
        "checked_nodes": len(v["nodes"]),
        "wall_s": round(wall, 2),
        "report_seconds": v["seconds"],
        "rdmakit_peak_rss_mib": round(int(rss.group(1)) / 1024, 1) if rss else None,
        "rdmakit_cpu_s": round(cpu, 2),
        "apiserver_cpu_s": round(cpu1 - cpu0, 2),
        "machine_cpu_s": round(m1 - m0, 1),
        "requests": {k: int(req1.get(k, 0) - req0.get(k, 0)) for k in sorted(req1) if req1.get(k, 0) - req0.get(k, 0)},
        "requests_by_agent": audited(audit0),
        "planted_faults_named": {
            "no_rdma": all(x not in checked for x in want["no_rdma"]),
            "not_ready": all(x not in checked for x in want["not_ready"]),
            "memlock": all(x in found for x in want["memlock"]),
        },
        "verdict": v["verdict"],
        "exit_code": r.returncode,
        "pods_left": len(v["pods"]) if v.get("kept") else 0,
    }


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [100, 300, 1000]
    out = os.path.join(ROOT, "bench/results/scale")
    os.makedirs(out, exist_ok=True)
    # Sizes not run this time keep their earlier results (one size can be measured again alone).
    path = os.path.join(out, "preflight.json")
    kept = []
    if os.path.exists(path):
        with open(path) as f:
            kept = [r for r in json.load(f).get("results", []) if r["nodes"] not in sizes]
    results = kept
    for n in sizes:
        r = one(n)
        print(json.dumps(r), flush=True)
        results.append(r)
    doc = {
        "what": "rdmakit preflight --profile aliyun-erdma --pods (one probe pod per node), node-level preflight by each shape's profile (eRDMA and N/4 each of DRANET, EFA, shared-device nodes), then rdmakit check --no-matrix (a check pod per eligible node, its facts read by exec), on N KWOK eRDMA nodes and the shapes beside them",
        "machine": f"{os.cpu_count()} cores, control-plane tier (tests/cluster)",
        "results": sorted(results, key=lambda r: r["nodes"]),
    }
    with open(os.path.join(out, "preflight.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
