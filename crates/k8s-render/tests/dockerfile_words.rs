//! Every profile field that becomes a shell word of a Dockerfile `RUN` command is written through
//! `quote::dockerfile::run_word`: a line break in it is refused naming the field (found by the injection fuzz
//! target: a newline in `nccl.pip_package` started a new instruction inside the quoted word).

use k8s_render::{Profile, System, Values, render};
use serde_json::json;

fn dockerfile(edit: impl FnOnce(&mut serde_json::Value)) -> Result<String, String> {
    let mut p = json!({
        "name": "words", "fabric": "RoCE", "short_name": "words",
        "rdma": {"kind": "device-plugin", "resources": {"rdma/hca": 1}},
        "nccl": {"ib_hca": "mlx5", "pip_package": "nvidia-nccl-cu13"},
        "userspace": {
            "packages": ["rdma-core", "ibverbs-utils"],
            "apt_source": {"name": "vendor", "key_url": "https://example.com/key.gpg",
                           "repo": "https://example.com/apt ${VERSION_CODENAME} main"},
        },
        "devices": {"name_pattern": "mlx5_*", "tx_counter": "ports/1/counters/port_xmit_data"},
    });
    edit(&mut p);
    let p = Profile::from_json(p).map_err(|e| e.to_string())?;
    let mut v = Values::default();
    v.set("nccl_version", "2.21.5").map_err(|e| e.to_string())?;
    let b = render(System::Image, &p, &v).map_err(|e| e.to_string())?;
    Ok(b.get("Dockerfile")
        .map(|f| f.contents.clone())
        .unwrap_or_default())
}

/// A change to the profile's JSON.
type Edit = fn(&mut serde_json::Value);

#[test]
fn plain_fields_render() {
    let d = dockerfile(|_| {}).expect("renders");
    assert!(
        d.contains("--no-install-recommends rdma-core ibverbs-utils"),
        "{d}"
    );
    assert!(
        d.contains("RUN pip install --no-cache-dir --upgrade nvidia-nccl-cu13==2.21.5"),
        "{d}"
    );
}

#[test]
fn a_line_break_in_a_run_word_is_refused_naming_the_field() {
    let cases: [(&str, Edit); 4] = [
        ("nccl.pip_package", |p| {
            p["nccl"]["pip_package"] = json!("nccl\nRUN touch PWNED")
        }),
        ("userspace.packages[1]", |p| {
            p["userspace"]["packages"][1] = json!("x\nRUN touch PWNED")
        }),
        ("userspace.apt_source.key_url", |p| {
            p["userspace"]["apt_source"]["key_url"] = json!("https://e.com/k\rRUN touch PWNED")
        }),
        ("userspace.apt_source.repo", |p| {
            p["userspace"]["apt_source"]["repo"] = json!("https://e.com\nRUN touch PWNED")
        }),
    ];
    for (field, edit) in cases {
        let e = dockerfile(edit).expect_err(field);
        assert!(e.contains(field), "{field}: {e}");
        // Package names are refused earlier, at profile load (one apt package name: no whitespace).
        if !field.starts_with("userspace.packages") {
            assert!(e.contains("new instruction"), "{field}: {e}");
        }
    }
}
