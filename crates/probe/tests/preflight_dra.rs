//! DRA preflight: which ResourceSlice devices a DeviceClass's CEL selectors select, per node, and the
//! attribute no published device carries (seed 002's DRANET slices and the aliyun-erdma-dra profile).

use probe::Verdict;
use probe::preflight;

/// Seed 002's DeviceClass for eRDMA under DRANET, as its two CEL selectors.
fn erdma_device_class() -> Vec<String> {
    vec![
        r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == true"#.into(),
        r#""alibaba.dra.net" in device.attributes && device.attributes["alibaba.dra.net"]["erdma"] == true"#.into(),
    ]
}

/// The devices of tests/fixtures/resourceslices-erdma.json.
fn erdma_slices() -> Vec<probe::preflight::DraDevice> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/resourceslices-erdma.json"),
    )
    .expect("tests/fixtures/resourceslices-erdma.json is readable");
    probe::preflight::parse_resource_slices(&text).expect("the fixture parses")
}

#[test]
fn dra_gap_names_the_missing_attribute() {
    let devices = erdma_slices();
    assert_eq!(devices.len(), 3);
    // v1beta1 `basic` attributes without a domain belong to the driver's.
    assert_eq!(
        devices[2]
            .attributes
            .get("dra.net/rdmaDevice")
            .map(String::as_str),
        Some("erdma_0")
    );
    assert_eq!(devices[0].node, "cn-beijing.10.0.5.75");
    let terms = probe::preflight::parse_cel_selector(&erdma_device_class()[1]);
    assert_eq!(terms.len(), 2, "{terms:?}");
    let gaps = probe::preflight::dra_selector_gaps(&erdma_device_class(), &devices);
    assert_eq!(gaps.len(), 1, "{gaps:#?}");
    assert_eq!(gaps[0].selector, 1);
    assert_eq!(gaps[0].term, "alibaba.dra.net/erdma == true");
    assert!(
        gaps[0].reason.contains("other values: eth1=false"),
        "{}",
        gaps[0].reason
    );
    // With the attribute published as true on one node, the class is satisfiable.
    let mut fixed = devices.clone();
    fixed[2]
        .attributes
        .insert("alibaba.dra.net/erdma".into(), "true".into());
    assert!(probe::preflight::dra_selector_gaps(&erdma_device_class(), &fixed).is_empty());
    // Node .75 publishes no alibaba.dra.net attribute at all: only .76 can satisfy the class.
    let only_75: Vec<_> = devices[..2].to_vec();
    let gaps = probe::preflight::dra_selector_gaps(&erdma_device_class(), &only_75);
    let terms: Vec<&str> = gaps.iter().map(|g| g.term.as_str()).collect();
    assert_eq!(
        terms,
        vec![
            "\"alibaba.dra.net\" in device.attributes",
            "alibaba.dra.net/erdma == true"
        ]
    );
    assert!(
        gaps[1]
            .reason
            .contains("no published device has the attribute")
    );
}

#[test]
fn dra_gap_when_no_single_device_satisfies_all() {
    use probe::preflight::{DraDevice, dra_selector_gaps};
    let dev = |name: &str, k: &str| DraDevice {
        node: "n1".into(),
        driver: "dra.net".into(),
        name: name.into(),
        attributes: [(k.to_string(), "true".to_string())].into(),
    };
    let devices = vec![
        dev("eth0", "dra.net/rdma"),
        dev("eth1", "alibaba.dra.net/erdma"),
    ];
    let gaps = dra_selector_gaps(&erdma_device_class(), &devices);
    assert_eq!(gaps.len(), 1, "{gaps:#?}");
    assert!(
        gaps[0].reason.contains("no single device"),
        "{}",
        gaps[0].reason
    );
    assert!(gaps[0].device.is_some());
    // Not JSON, or not ResourceSlices: typed errors that say what to pass.
    let e = probe::preflight::parse_resource_slices("nope").unwrap_err();
    assert!(
        e.to_string().contains("kubectl get resourceslices -o json"),
        "{e}"
    );
    assert!(probe::preflight::parse_resource_slices("{\"kind\":\"Pod\"}").is_err());
}

#[test]
fn device_class_checks_name_the_missing_attribute() {
    // Seed 002's DeviceClass as `kubectl get deviceclass erdma.alibaba.dra.net -o json` prints it.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let class = std::fs::read_to_string(dir.join("deviceclass-erdma.json")).unwrap();
    let (name, selectors) = preflight::parse_device_class(&class).unwrap();
    assert_eq!(name, "erdma.alibaba.dra.net");
    assert_eq!(selectors, erdma_device_class());
    let slices = std::fs::read_to_string(dir.join("resourceslices-erdma.json")).unwrap();
    let mut devices = preflight::parse_resource_slices(&slices).unwrap();
    let cs = preflight::device_class_checks(&name, &selectors, &devices);
    assert_eq!(cs.len(), 1, "{cs:?}");
    assert_eq!(
        (cs[0].id.as_str(), cs[0].verdict),
        ("dra-device-class", Verdict::Fail)
    );
    assert_eq!(cs[0].subject, "DeviceClass erdma.alibaba.dra.net");
    assert!(
        cs[0].summary.contains("selector 2")
            && cs[0].summary.contains("alibaba.dra.net/erdma == true"),
        "{}",
        cs[0].summary
    );
    assert!(cs[0].fix.as_deref().unwrap_or("").contains("stays pending"));
    devices[2]
        .attributes
        .insert("alibaba.dra.net/erdma".into(), "true".into());
    let cs = preflight::device_class_checks(&name, &selectors, &devices);
    assert_eq!(cs[0].verdict, Verdict::Ok, "{cs:?}");
    assert!(
        cs[0]
            .summary
            .starts_with("1 device(s) satisfy every selector"),
        "{}",
        cs[0].summary
    );
    // Wrong input: typed errors that say what to pass.
    let e = preflight::parse_device_class(&slices).unwrap_err();
    assert!(e.to_string().contains("not a DeviceClass"), "{e}");
    assert!(
        preflight::parse_device_class("{")
            .unwrap_err()
            .to_string()
            .contains("kubectl get deviceclass")
    );
}

/// The built-in aliyun-erdma-dra profile's second selector tests the key first
/// (`"erdma" in device.attributes["alibaba.dra.net"]`): that is the attribute alibaba.dra.net/erdma, not a
/// domain called `erdma` (which no device has, so the profile's own class was reported unsatisfiable).
#[test]
fn key_in_domain_is_the_attribute_not_a_domain() {
    use probe::preflight::{DraDevice, SelectorTerm, dra_selector_gaps, parse_cel_selector};
    let profile_selectors = vec![
        r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == true"#.to_string(),
        r#""alibaba.dra.net" in device.attributes && "erdma" in device.attributes["alibaba.dra.net"] && device.attributes["alibaba.dra.net"]["erdma"] == true"#.to_string(),
    ];
    let terms = parse_cel_selector(&profile_selectors[1]);
    assert!(
        terms.contains(&SelectorTerm::Domain("alibaba.dra.net".into())),
        "{terms:?}"
    );
    assert!(
        !terms.contains(&SelectorTerm::Domain("erdma".into())),
        "{terms:?}"
    );
    assert!(
        terms.contains(&SelectorTerm::Attribute {
            key: "alibaba.dra.net/erdma".into(),
            value: None
        }),
        "{terms:?}"
    );
    let device = |erdma: Option<&str>| {
        let mut attributes: std::collections::BTreeMap<String, String> = [
            ("dra.net/rdma", "true"),
            ("dra.net/rdmaDevice", "erdma_0"),
            ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(v) = erdma {
            attributes.insert("alibaba.dra.net/erdma".into(), v.into());
        }
        DraDevice {
            node: "n1".into(),
            driver: "dra.net".into(),
            name: "erdma-0".into(),
            attributes,
        }
    };
    assert!(dra_selector_gaps(&profile_selectors, &[device(Some("true"))]).is_empty());
    let gaps = dra_selector_gaps(&profile_selectors, &[device(None)]);
    assert!(
        gaps.iter()
            .any(|g| g.term.contains("alibaba.dra.net/erdma")),
        "{gaps:#?}"
    );
}

/// The aliyun-erdma-dra profile's DeviceClass selectors (the key is tested before it is read).
fn profile_device_class() -> Vec<String> {
    vec![
        r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == true"#.into(),
        r#""alibaba.dra.net" in device.attributes && "erdma" in device.attributes["alibaba.dra.net"] && device.attributes["alibaba.dra.net"]["erdma"] == true"#.into(),
    ]
}

#[test]
fn select_devices_per_node_and_names_what_a_partial_device_lacks() {
    use probe::preflight::{DraDevice, select_devices};
    let dev = |node: &str, name: &str, attrs: &[(&str, &str)]| DraDevice {
        node: node.into(),
        driver: "dra.net".into(),
        name: name.into(),
        attributes: attrs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
    };
    let good = |node: &str| {
        dev(
            node,
            "erdma-0",
            &[
                ("dra.net/rdma", "true"),
                ("dra.net/rdmaDevice", "erdma_0"),
                ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
                ("alibaba.dra.net/erdma", "true"),
            ],
        )
    };
    let devices = vec![
        good("n1"),
        dev("n1", "eth0", &[("dra.net/rdma", "false")]),
        // DRANET could not tell n2's adapter is eRDMA: the domain is there, the erdma attribute is not.
        dev(
            "n2",
            "erdma-0",
            &[
                ("dra.net/rdma", "true"),
                ("dra.net/rdmaDevice", "erdma_0"),
                ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
            ],
        ),
        // Another driver's device is not the class's business.
        DraDevice {
            driver: "gpu.nvidia.com".into(),
            ..good("n3")
        },
    ];
    let s = select_devices(&profile_device_class(), &devices);
    assert_eq!(s.driver.as_deref(), Some("dra.net"));
    // The existence test of alibaba.dra.net/erdma is folded into its comparison.
    assert_eq!(
        s.terms,
        vec![
            "device.driver == \"dra.net\"",
            "dra.net/rdma == true",
            "\"alibaba.dra.net\" in device.attributes",
            "alibaba.dra.net/erdma == true",
        ]
    );
    assert_eq!(s.attributes, vec!["dra.net/rdma", "alibaba.dra.net/erdma"]);
    assert!(s.unchecked.is_empty());
    assert_eq!(s.selected.len(), 1, "{s:#?}");
    assert_eq!(s.selected["n1"], vec!["erdma-0 (erdma_0)"]);
    assert_eq!(s.lacking.len(), 1, "{s:#?}");
    assert_eq!(s.lacking[0].device, "n2/erdma-0 (erdma_0)");
    assert_eq!(s.lacking[0].missing, vec!["alibaba.dra.net/erdma == true"]);
    let (able, short) = s.nodes_with(1);
    assert_eq!(able, vec!["n1 (1: erdma-0 (erdma_0))"]);
    assert!(short.is_empty());
    let (able, short) = s.nodes_with(2);
    assert!(able.is_empty());
    assert_eq!(short, vec!["n1 has 1 of 2"]);
    // A selector of another shape is not judged here, and says so.
    let odd = vec![
        r#"device.capacity["dra.net"].bandwidth.compareTo(quantity("100G")) >= 0"#.to_string(),
    ];
    let s = select_devices(&odd, &devices);
    assert_eq!(s.unchecked, odd);
    assert!(s.selected.is_empty() && s.lacking.is_empty());
}

#[test]
fn select_devices_reads_the_slices_fixture() {
    let devices = erdma_slices();
    let s = probe::preflight::select_devices(&profile_device_class(), &devices);
    // No device publishes alibaba.dra.net/erdma == true: nothing selectable, the RDMA ones lacking it.
    assert!(s.selected.is_empty(), "{s:#?}");
    let lacking: Vec<&str> = s.lacking.iter().map(|l| l.device.as_str()).collect();
    assert_eq!(
        lacking,
        vec![
            "cn-beijing.10.0.5.75/eth1 (erdma_0)",
            "cn-beijing.10.0.5.76/eth1 (erdma_0)"
        ],
        "{s:#?}"
    );
}
