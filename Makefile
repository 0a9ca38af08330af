# rdmakit — the two commands a new user needs: `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
OUT ?= out
# Debian packages the build needs (rdma-sys runs bindgen against the verbs headers).
BUILD_PKGS := libibverbs-dev librdmacm-dev libclang-dev clang pkg-config
# Debian packages the tests need: shellcheck checks every plan.sh (crates/rdmakit/tests/workflows_dry_run.rs);
# chromium opens `rdmakit check`'s HTML report headless (crates/probe/tests/check_report.rs).
TEST_PKGS := shellcheck chromium
# PyPI packages the tests need: jsonschema validates the SARIF logs (crates/k8s-render/tests/sarif.rs).
TEST_PYPI := jsonschema
# Debian packages the soft-RoCE VM tier needs (see tests/rxe/README.md).
VM_PKGS := qemu-system-x86 linux-image-amd64 busybox-static file rdma-core ibverbs-providers ibverbs-utils perftest rdmacm-utils iproute2 kmod udev

.PHONY: demo test deps test-deps fmt-check clippy unit package-test py-test cluster-build-start cluster-test cluster-up cluster-down vm-test build fuzz miri clean

## demo: the eRDMA Ray RDT workflow in dry-run (no cluster): bundle under out/, plan printed.
demo: deps
	$(CARGO) build -p rdmakit
	./target/debug/rdmakit run scripts/workflows/erdma-ray-rdt.rhai --dry-run --out $(OUT)/erdma-ray-rdt

## test: format, lints, unit + snapshot tests, the Ray RDT package, the control-plane tier, the soft-RoCE VM tier.
## test-deps has installed every tool a test looks for, so under `make test` a test that would skip for a missing
## tool fails instead (RDMAKIT_NO_SKIP); tests that need hardware (a GPU, RDMA devices) still report as ignored.
test: export RDMAKIT_NO_SKIP = 1
## The tier's Go build starts first, in the background at low priority (cluster-build-start), and takes the CPU
## the steps before the tier leave idle; cluster-test waits for it. A `make test` stopped early leaves it to
## finish on its own (its log: target/cluster/build-bg.log).
test: cluster-build-start deps test-deps fmt-check clippy unit package-test py-test cluster-test vm-test

build:
	$(CARGO) build --workspace --all-targets

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

# The library crates as a registry would serve them, used from a crate outside the workspace (tests/package/run.sh).
package-test:
	tests/package/run.sh

# The rdmakit_rdt Python package (maturin wheel, pytest, Ray actors on CPU): python/rdmakit-rdt/README.md.
py-test:
	python/rdmakit-rdt/test.sh

cluster-build-start:
	tests/cluster/build.sh --background

# The control-plane tier (tests/cluster/README.md): real kube-apiserver, scheduler, controllers, KubeRay and the
# MPI Operator built from their pinned Go modules (cached after the first build), KWOK nodes, the node emulator.
cluster-test:
	tests/cluster/run.sh

## cluster-up: start the control-plane tier and leave it running (KUBECONFIG=target/cluster/kubeconfig).
cluster-up:
	tests/cluster/build.sh
	tests/cluster/up.sh

## cluster-down: stop it.
cluster-down:
	tests/cluster/down.sh

# The bandwidth suites compare our release-built write_bw and `rdmakit bench stage --transport rdma` (release
# rdmakit: stage-rdma-bw.sh) with perftest inside the VM; rdmakit's debug binary (built with the workspace tests)
# runs the bench-command suite. The suite
# rdt-python-rdma.sh runs rdmakit-rdt's wheel built with the RDMA transport (target/wheels-rdma/, apart from
# py-test's TCP-only wheel in target/wheels/); maturin and numpy come from py-test's venv (made here if missing).
# rdt-ray-rdma.sh runs that wheel under a real Ray head in the VM, from target/py/venv-ray: Ray and numpy without
# torch (torch's import alone takes ~100 s under TCG; pip's cache holds the Ray wheel py-test installed).
vm-test:
	$(CARGO) build --release -p erdma-verbs --example write_bw
	$(CARGO) build --release -p rdmakit --bin rdmakit
	[ -x target/py/venv/bin/maturin ] || { python3 -m venv target/py/venv && target/py/venv/bin/pip install -q "maturin>=1.7,<2" numpy; }
	v="$$(python/rdmakit-rdt/ray-version)" && { [ "$$(target/py/venv-ray/bin/python -c 'import ray; print(ray.__version__)' 2>/dev/null)" = "$$v" ] || \
	  { rm -rf target/py/venv-ray && python3 -m venv target/py/venv-ray && target/py/venv-ray/bin/pip install -q numpy "ray==$$v"; }; }
	rm -f target/wheels-rdma/rdmakit_rdt-*.whl
	cd python/rdmakit-rdt && ../../target/py/venv/bin/maturin build --release --features python,rdma --compatibility linux \
	  -o ../../target/wheels-rdma -i ../../target/py/venv/bin/python
	tests/rxe/run.sh

deps:
	@.ci/apt-install.sh $(BUILD_PKGS)

test-deps:
	@.ci/apt-install.sh $(TEST_PKGS) $(VM_PKGS)
	@.ci/pip-install.sh $(TEST_PYPI) virtme-ng

## fuzz: bounded cargo-fuzz run of every probe parser and of k8s-render's untrusted-input entry points (manifest
## loader, validate, lint; see crates/probe/FUZZING.md and crates/k8s-render/FUZZING.md), of gpu-stage's hostile-peer
## targets (TCP receiver, RDMA side channel: crates/gpu-stage/FUZZING.md), then the injection fuzz
## target for FUZZ_SECONDS (crates/rdmakit/tests/fuzz_injection/FUZZING.md); not part of `make test` (a bounded
## run of the injection target is: `cargo test -p rdmakit --test fuzz_injection`).
## -timeout=1: an input that takes over a second is a failure (gpu-stage's: 5 s, its waits on a stalled fake peer
## are 20 ms each); gpu-stage's also run under -rss_limit_mb=1024 -malloc_limit_mb=64 (what a peer can make us hold
## is bounded; under ASan, with its 256 MB quarantine, the target runs at ~340-370 MB).
FUZZ_SECONDS ?= 30
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd crates/probe/fuzz && for t in $$(sed -n 's/^name = "\(.*\)"$$/\1/p' Cargo.toml | grep -v fuzz); do \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=1 || exit 1; done
	cd crates/k8s-render/fuzz && mkdir -p corpus/manifest corpus/validate corpus/lint && \
	  for t in manifest validate lint; do cp ../tests/fixtures/check/*.yaml corpus/$$t/; \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -timeout=1 || exit 1; done
	cd crates/gpu-stage/fuzz && for t in tcp_receiver rdma_side_channel; do mkdir -p corpus/$$t; \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=5 \
	  -rss_limit_mb=1024 -malloc_limit_mb=64 || exit 1; done
	# Injection (issue 25): proptest feeds hostile strings into every --set key and profile string, renders the
	# launcher, Dockerfile and .py programs and runs plan.sh among logging stubs (crates/rdmakit/tests/fuzz_injection/).
	RDMAKIT_FUZZ_CASES=100000000 RDMAKIT_FUZZ_SECONDS=$(FUZZ_SECONDS) RDMAKIT_FUZZ_SHELLCHECK_EVERY=1 \
	  nice -n 10 $(CARGO) test -p rdmakit --test fuzz_injection -- --nocapture --test-threads=2 rendered_scripts plan_sh

## miri: gpu-stage's host-backend paths (ring, pipeline, TCP receiver over in-memory fake peers, codecs) and
## erdma-verbs' lib under Miri (crates/gpu-stage/miri.sh says what runs and what cannot); not part of `make test`
## (minutes per crate). Needs `rustup +nightly component add miri rust-src`.
miri:
	crates/gpu-stage/miri.sh

clean:
	rm -rf $(OUT) target
