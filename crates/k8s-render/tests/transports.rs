//! How each NCCL transport renders: IB verbs (`NCCL_IB_HCA`), a net plugin (its env, no
//! `NCCL_IB_HCA`), sockets (`NCCL_NET=Socket`), and what the linter says about each.

use k8s_render::lint::{LintOptions, lint};
use k8s_render::manifest::{Severity, parse_str};
use k8s_render::{Profile, RenderError, System, Values, render};
use serde_json::json;

fn profile(transport: serde_json::Value, ib_hca: Option<&str>) -> Profile {
    let p = Profile::from_json(json!({
        "name": "t",
        "fabric": "T",
        "short_name": "t",
        "rdma": {"kind": "device-plugin", "resources": {"example.com/rdma": 1}},
        "pod": {"capabilities": ["IPC_LOCK"], "shm": {"volume_name": "shm"}},
        "nccl": {"transport": transport, "ib_hca": ib_hca, "socket_ifname": "eth0"},
        "devices": {"name_pattern": "x_*", "tx_counter": "ports/1/counters/port_xmit_data"},
    }))
    .expect("profile parses");
    p.check().expect("profile checks");
    p
}

fn pods(p: &Profile) -> String {
    render(System::NcclCheck, p, &Values::default())
        .expect("renders")
        .get("t-nccl-check-pods.yaml")
        .expect("pods file")
        .contents
        .clone()
}

#[test]
fn sockets_render_nccl_net_socket_and_lint_clean() {
    let p = profile(json!({"kind": "sockets"}), None);
    let text = pods(&p);
    assert!(
        text.contains("name: NCCL_NET\n      value: Socket"),
        "{text}"
    );
    assert!(!text.contains("NCCL_IB_HCA") && !text.contains("NCCL_IB_DISABLE"));
    let findings = lint(
        &parse_str("p.yaml", &text).unwrap(),
        &LintOptions::for_profile(&p, None, false),
    );
    assert!(
        findings.iter().all(|f| f.severity != Severity::Error),
        "{findings:#?}"
    );
}

#[test]
fn a_plugin_renders_its_env_and_refuses_its_bad_versions() {
    let plugin = json!({
        "kind": "net-plugin", "name": "p", "library": "libnccl-net-p.so",
        "library_dir": "/opt/p/lib", "env": {"P_PROVIDER": "fast"},
        "required_env": ["P_PROVIDER"], "install": ["echo install ${VERSION}"],
        "version": "1.2.0", "known_bad": ["1.1.0"], "known_good": ["1.2.0"],
    });
    let p = profile(plugin, None);
    let text = pods(&p);
    assert!(
        text.contains("name: P_PROVIDER\n      value: fast"),
        "{text}"
    );
    assert!(!text.contains("NCCL_IB_HCA"), "{text}");
    let d = render(System::Image, &p, &Values::default())
        .unwrap()
        .get("Dockerfile")
        .unwrap()
        .contents
        .clone();
    assert!(d.contains("echo install 1.2.0"), "{d}");
    assert!(
        d.contains("ENV LD_LIBRARY_PATH=/opt/p/lib:${LD_LIBRARY_PATH}"),
        "{d}"
    );
    let mut v = Values::default();
    v.set("nccl_plugin_version", "1.1.0").unwrap();
    let e = render(System::Image, &p, &v).unwrap_err();
    assert!(matches!(e, RenderError::BadPluginVersion { .. }), "{e}");
    assert!(e.to_string().contains("1.2.0"), "{e}");
}

#[test]
fn ib_verbs_keeps_nccl_ib_hca() {
    let p = profile(json!({"kind": "ib-verbs"}), Some("x_0"));
    let text = pods(&p);
    assert!(
        text.contains(
            "name: NCCL_IB_DISABLE\n      value: \"0\"\n    - name: NCCL_IB_HCA\n      value: x_0"
        ),
        "{text}"
    );
}
