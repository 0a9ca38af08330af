//! `--set` values are checked by their kind when parsed (issue 25): a value that could change the
//! structure of what is rendered (a newline in an image reference, a shell metacharacter in a program
//! path, a label value the API server refuses) and a number out of its key's range are refused, the error
//! naming the key, the value (escaped) and what it must be, with an example.

use k8s_render::Values;

fn refused(key: &str, value: &str) -> String {
    let mut v = Values::default();
    match v.set(key, value) {
        Ok(()) => panic!("{key}={value:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn values_that_would_change_the_structure_of_an_artifact_are_refused() {
    let cases = [
        ("registry", "r.example.com/me\nRUN echo injected"),
        ("image", "img:1\nRUN id"),
        ("image", "a b"),
        ("base_image", "ubuntu:22.04 AS x"),
        ("buildkit_image", "moby/buildkit:v0.23.2;id"),
        ("nccl_tests_image", "$(id)"),
        ("test_image", "busy\nbox"),
        ("image_name", "Ray LLM"),
        ("nccl_debug", "INFO $(touch P)"),
        ("nccl_debug", "DEBUG"),
        ("all_reduce_perf", "/opt/x;id;#"),
        ("all_reduce_perf", "all_reduce_perf -g 8"),
        ("nccl_tests_min_bytes", "1G; id"),
        ("nccl_tests_max_bytes", "8GB"),
        ("nccl_debug_file", "relative.log"),
        ("nccl_debug_file", "/tmp/a\nb"),
        ("nccl_version", "2.30.7 && id"),
        ("ray_version", "2.57.0\nRUN id"),
        ("namespace", "My-NS"),
        ("storage_class", "fast ssd"),
        ("instance_type", "p5.48xlarge; id"),
        ("node_selector.pool", "bar; baz"),
        ("node_selector.bad key", "x"),
        ("test_command", "sleep 1\nid"),
    ];
    for (key, value) in cases {
        let msg = refused(key, value);
        let shown = value.escape_debug().to_string();
        assert!(
            msg.contains(&format!("{key}={shown}")),
            "{key}={value:?}: the error does not name key and escaped value: {msg}"
        );
        assert!(
            !msg.contains('\n'),
            "{key}: the error is not one line: {msg}"
        );
        assert!(msg.contains("e.g. `"), "{key}: no example in: {msg}");
    }
}

#[test]
fn numbers_have_a_range_and_the_error_names_it() {
    for (key, value) in [
        ("worker_replicas", "2147483648"),
        ("worker_replicas", "5000000000"),
        ("mpi_workers", "100000"),
        ("mpi_workers", "0"),
        ("gpus_per_worker", "0"),
        ("gpus_per_worker", "1000"),
        ("slots_per_worker", "99999999999"),
    ] {
        let msg = refused(key, value);
        assert!(
            msg.contains(&format!("{key}={value}"))
                && msg.contains(" from ")
                && msg.contains(" to "),
            "{key}={value}: {msg}"
        );
    }
    let mut v = Values::default();
    v.set("worker_replicas", "1024").unwrap();
    v.set("mpi_workers", "16").unwrap();
    assert_eq!((v.worker_replicas, v.mpi_workers), (1024, 16));
}

#[test]
fn ordinary_values_are_accepted() {
    let mut v = Values::default();
    for (key, value) in [
        ("registry", "registry.cn-beijing.aliyuncs.com/me"),
        ("registry", "localhost:5000"),
        ("image", "host:8443/ns/img:1.0"),
        ("image", ""),
        (
            "nccl_tests_image",
            "public.ecr.aws/hpc-cloud/nccl-tests:latest",
        ),
        ("nccl_debug", "WARN"),
        ("nccl_debug", ""),
        ("all_reduce_perf", "all_reduce_perf"),
        ("nccl_tests_min_bytes", "8"),
        ("nccl_tests_max_bytes", "16G"),
        ("nccl_debug_file", "/var/log/nccl-%h-%p.log"),
        ("instance_type", "Standard_ND96isr_H100_v5"),
        (
            "node_selector.node.kubernetes.io/instance-type",
            "p5en.48xlarge",
        ),
        ("node_selector.example.com/pool", ""),
        ("storage_class", "alicloud-disk-essd"),
        ("test_command", "sleep 10000"),
    ] {
        v.set(key, value)
            .unwrap_or_else(|e| panic!("{key}={value:?}: {e}"));
    }
    assert!(v.check().is_ok());
}
