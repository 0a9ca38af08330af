//! `ibv_devinfo` equivalent built on erdma-verbs, plus the probed caps and vendor profile.
//!
//! Usage: `cargo run -p erdma-verbs --example devices -- [-d DEVICE] [--json]`

use std::process::ExitCode;

use erdma_verbs::{Context, DeviceInfo, GidEntry, GidType, PortAttr, PortState, devices};
use serde::Serialize;

#[derive(Serialize)]
struct Port {
    #[serde(flatten)]
    attr: PortAttr,
    gids: Vec<GidEntry>,
}

#[derive(Serialize)]
struct Device {
    #[serde(flatten)]
    info: DeviceInfo,
    attr: erdma_verbs::DeviceAttr,
    caps: erdma_verbs::Caps,
    ports: Vec<Port>,
}

fn describe(info: DeviceInfo) -> erdma_verbs::Result<Device> {
    let ctx = Context::open(&info.name)?;
    let mut ports = Vec::new();
    for p in 1..=ctx.attr().phys_port_cnt {
        ports.push(Port {
            attr: ctx.query_port(p)?,
            gids: ctx.gid_table(p)?,
        });
    }
    Ok(Device {
        info,
        attr: ctx.attr().clone(),
        caps: ctx.caps().clone(),
        ports,
    })
}

fn port_state(s: PortState) -> &'static str {
    match s {
        PortState::Nop => "PORT_NOP (0)",
        PortState::Down => "PORT_DOWN (1)",
        PortState::Init => "PORT_INIT (2)",
        PortState::Armed => "PORT_ARMED (3)",
        PortState::Active => "PORT_ACTIVE (4)",
        PortState::ActiveDefer => "PORT_ACTIVE_DEFER (5)",
    }
}

fn gid_type(t: GidType) -> &'static str {
    match t {
        GidType::RoceV2 => "RoCE v2",
        GidType::IbRoceV1 => "IB/RoCE v1",
        GidType::Unknown => "unknown type",
    }
}

fn print_text(d: &Device) {
    println!("hca_id:\t{}", d.info.name);
    println!("\ttransport:\t\t\t{}", d.info.transport);
    println!("\tfw_ver:\t\t\t\t{}", d.attr.fw_ver);
    println!("\tnode_guid:\t\t\t{}", d.attr.node_guid);
    println!("\tsys_image_guid:\t\t\t{}", d.attr.sys_image_guid);
    println!("\tvendor_id:\t\t\t{:#06x}", d.attr.vendor_id);
    println!(
        "\tvendor_part_id:\t\t\t{} ({:#x})",
        d.attr.vendor_part_id, d.attr.vendor_part_id
    );
    println!("\thw_ver:\t\t\t\t{:#x}", d.attr.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", d.attr.phys_port_cnt);
    let c = &d.caps;
    println!("\tprofile:\t\t\t{}", c.vendor);
    println!(
        "\tcaps:\t\t\t\tRC {} UD {} SRQ {} ext-verbs {} atomics {} needs-rdma_cm {}",
        c.rc, c.ud, c.srq, c.extended_verbs, c.atomics, c.needs_rdma_cm
    );
    println!(
        "\tlimits:\t\t\t\tsend_wr {} recv_wr {} send_sge {} recv_sge {} inline {} cqe {} mr_size {:#x}{}",
        c.max_send_wr,
        c.max_recv_wr,
        c.max_send_sge,
        c.max_recv_sge,
        c.max_inline,
        c.max_cqe,
        c.max_mr_size,
        c.max_total_mr_bytes
            .map(|t| format!(" total_mr {} GiB", t >> 30))
            .unwrap_or_default()
    );
    for p in &d.ports {
        let a = &p.attr;
        println!("\t\tport:\t{}", a.port);
        println!("\t\t\tstate:\t\t\t{}", port_state(a.state));
        println!("\t\t\tmax_mtu:\t\t{}", a.max_mtu);
        println!("\t\t\tactive_mtu:\t\t{}", a.active_mtu);
        println!("\t\t\tport_lid:\t\t{}", a.lid);
        println!("\t\t\tlink_layer:\t\t{:?}", a.link_layer);
        for g in &p.gids {
            println!(
                "\t\t\tGID[{:>3}]:\t\t{}, {}{}",
                g.index,
                g.gid,
                gid_type(g.gid_type),
                g.netdev
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
    }
    println!();
}

fn main() -> ExitCode {
    let mut json = false;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "-d" | "--ib-dev" => only = args.next(),
            "-h" | "--help" => {
                println!("usage: devices [-d DEVICE] [--json]");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("devices: unknown argument '{other}' (expected -d DEVICE or --json)");
                return ExitCode::from(2);
            }
        }
    }
    let list = match devices() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("devices: {e}");
            return ExitCode::FAILURE;
        }
    };
    let names: Vec<String> = list.iter().map(|d| d.name.clone()).collect();
    let chosen: Vec<DeviceInfo> = list
        .into_iter()
        .filter(|d| only.as_ref().is_none_or(|n| *n == d.name))
        .collect();
    if let Some(n) = &only
        && chosen.is_empty()
    {
        eprintln!(
            "devices: no device '{n}'; present: {}",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        );
        return ExitCode::FAILURE;
    }
    let mut out = Vec::new();
    for info in chosen {
        let name = info.name.clone();
        match describe(info) {
            Ok(d) => out.push(d),
            Err(e) => {
                eprintln!("devices: {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if json {
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("devices: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if out.is_empty() {
        println!("No IB devices found");
    } else {
        out.iter().for_each(print_text);
    }
    ExitCode::SUCCESS
}
