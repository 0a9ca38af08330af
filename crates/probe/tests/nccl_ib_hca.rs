//! Issue 25 (and 24 item 6): NCCL_IB_HCA judged the way NCCL reads it, through the judgements workflows call
//! (`nccl_uses_device`, `ibv_port_active`) and the host facts' selection. Written against the functions that
//! existed before the fix, so each test here failed on the old text matching (`contains`, `starts_with`,
//! ports dropped, the value trimmed).

use std::path::PathBuf;

use probe::facts;
use probe::judge::{ibv_port_active, nccl_uses_device};
use probe::{HostFacts, ProbeOptions, Verdict};

/// NCCL's init line on two ranks, two RoCE ports each.
const TWO_PORTS: &str = "\
w0:41:88 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.76<0>
w1:41:88 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.77<0>
w0:41:88 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
";

#[test]
fn a_working_run_passes_for_list_and_exclude_values() -> Result<(), probe::ProbeError> {
    for hca in [
        "=mlx5_0,mlx5_1",
        "^mlx5_2",
        "^=mlx5_2,mlx5_3",
        "=mlx5_0:1,mlx5_1:1",
    ] {
        let c = nccl_uses_device(TWO_PORTS, hca)?;
        assert_eq!(c.verdict, Verdict::Ok, "{hca}: {}", c.summary);
    }
    Ok(())
}

#[test]
fn a_device_outside_the_value_fails_naming_it() -> Result<(), probe::ProbeError> {
    // `mlx5_1` is in the line's text, yet port 1 of it is what `=mlx5_1:2` leaves out.
    let c = nccl_uses_device(TWO_PORTS, "=mlx5_0:1,mlx5_1:2")?;
    assert_eq!(c.verdict, Verdict::Fail, "{}", c.summary);
    assert!(c.summary.contains("mlx5_1:1"), "{}", c.summary);
    // A prefix the line contains as text is not enough: `mlx5_1` selects mlx5_1, NCCL used mlx5_0 too.
    let c = nccl_uses_device(TWO_PORTS, "mlx5_1")?;
    assert_eq!(c.verdict, Verdict::Fail, "{}", c.summary);
    assert!(c.summary.contains("mlx5_0:1"), "{}", c.summary);
    Ok(())
}

fn devinfo(devs: &[(&str, &str)]) -> String {
    devs.iter()
        .map(|(name, state)| {
            format!(
                "hca_id:\t{name}\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\t\t\tstate:\t\t\t{state}\n\t\t\tlink_layer:\t\tEthernet\n\n"
            )
        })
        .collect()
}

#[test]
fn ibv_devinfo_is_judged_with_the_values_mlx5_profiles_use() {
    let out = devinfo(&[("mlx5_0", "PORT_ACTIVE (4)"), ("mlx5_1", "PORT_ACTIVE (4)")]);
    for hca in ["mlx5", "=mlx5_0,mlx5_1", "^mlx5_bond", "=mlx5_1"] {
        let c = ibv_port_active(&out, hca);
        assert_eq!(c.verdict, Verdict::Ok, "{hca}: {}", c.summary);
    }
    // Port 2 of mlx5_0 exists on no card here.
    assert_eq!(ibv_port_active(&out, "=mlx5_0:2").verdict, Verdict::Fail);
    // The selected device down, another one up: NCCL has nothing to use.
    let one_down = devinfo(&[("mlx5_0", "PORT_DOWN (1)"), ("mlx5_1", "PORT_ACTIVE (4)")]);
    assert_eq!(ibv_port_active(&one_down, "=mlx5_0").verdict, Verdict::Fail);
}

#[test]
fn host_facts_select_as_nccl_does() -> Result<(), probe::ProbeError> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlx5");
    let f = HostFacts::gather(&ProbeOptions::new(root))?;
    let sel = |s: &str| facts::ib_hca_selects(s, &f.rdma_devices);
    // Excluding one port leaves the card's other ports: the card stays selected.
    assert_eq!(sel("^=mlx5_0:2"), ["mlx5_0", "mlx5_1"]);
    // NCCL does not trim: ` mlx5_1` is a name no device has.
    assert_eq!(sel("=mlx5_0, mlx5_1"), ["mlx5_0"]);
    // `^` with an empty list excludes every device.
    assert!(sel("^").is_empty());
    Ok(())
}
