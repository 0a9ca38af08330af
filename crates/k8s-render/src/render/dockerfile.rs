//! `Dockerfile`: the base image plus the vendor's RDMA userspace and a known-good NCCL.

use std::fmt::Write as _;

use super::{Ctx, RenderError};
use crate::bundle::{Bundle, FileKind};
use crate::profile::PluginSource;

pub(crate) const FILE: &str = "Dockerfile";

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    bundle.add_text(FILE, FileKind::Dockerfile, dockerfile(ctx))?;
    Ok(())
}

/// The net plugin's install steps, for a plugin the image carries (`source: image`).
fn plugin_steps(ctx: &Ctx<'_>, d: &mut String) {
    let p = ctx.profile;
    let Some(plugin) = p.net_plugin() else {
        return;
    };
    if plugin.source != PluginSource::Image {
        let _ = writeln!(
            d,
            "# NCCL net plugin {} comes from the node ({}, mounted by the pods): nothing to install here.",
            plugin.name, plugin.library_dir
        );
        return;
    }
    let version = ctx.values.plugin_version_for(p).unwrap_or_default();
    let _ = writeln!(
        d,
        "# NCCL net plugin {}{}: {} in {}.",
        plugin.name,
        if version.is_empty() {
            String::new()
        } else {
            format!(" {version}")
        },
        plugin.library,
        plugin.library_dir
    );
    if !plugin.known_bad.is_empty() {
        let why = plugin
            .bad_reason
            .clone()
            .unwrap_or_else(|| "known to fail on this fabric".to_owned());
        let _ = writeln!(
            d,
            "# {} {}: {why}.",
            plugin.name,
            plugin.known_bad.join(" and ")
        );
    }
    let _ = writeln!(d, "USER root");
    let mut steps: Vec<String> = Vec::new();
    if !plugin.packages.is_empty() {
        steps.push("apt-get update -qq".to_owned());
        steps.push(format!(
            "apt-get install -y -qq --no-install-recommends {}",
            plugin.packages.join(" ")
        ));
    }
    steps.extend(
        plugin
            .install
            .iter()
            .map(|s| s.replace("${VERSION}", &version)),
    );
    if !plugin.packages.is_empty() {
        steps.push("rm -rf /var/lib/apt/lists/*".to_owned());
    }
    let _ = writeln!(d, "RUN {}", steps.join(" \\\n && "));
    let _ = writeln!(
        d,
        "ENV LD_LIBRARY_PATH={}:${{LD_LIBRARY_PATH}}",
        plugin.library_dir
    );
    let _ = writeln!(d, "USER ray");
}

fn dockerfile(ctx: &Ctx<'_>) -> String {
    let p = ctx.profile;
    let v = ctx.values;
    let mut d = String::new();
    // `writeln!` into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(d, "# syntax=docker/dockerfile:1");
    let _ = writeln!(
        d,
        "# Image for profile {} ({}), rendered by rdmakit.",
        p.name, p.fabric
    );
    let _ = writeln!(
        d,
        "# Build: buildctl ... --output type=image,name={},push=true",
        ctx.image()
    );
    if let Some(src) = &p.userspace.apt_source
        && let Some(note) = &src.note
    {
        let _ = writeln!(d, "# {note}");
    }
    if v.with_rdmakit {
        let _ = writeln!(d);
        let _ = writeln!(
            d,
            "# Stage with the rdmakit binary: put it next to this Dockerfile in the build context."
        );
        let _ = writeln!(d, "FROM scratch AS rdmakit");
        let _ = writeln!(d, "COPY rdmakit /rdmakit");
    }
    let _ = writeln!(d);
    let _ = writeln!(d, "FROM {}", v.base_image);
    if !p.userspace.packages.is_empty() {
        let _ = writeln!(d, "USER root");
        let mut steps: Vec<String> = Vec::new();
        steps.push("apt-get update -qq".to_owned());
        if let Some(src) = &p.userspace.apt_source {
            let keyring = format!("/usr/share/keyrings/{}.gpg", src.name);
            steps.push(
                "apt-get install -y -qq --no-install-recommends wget gnupg ca-certificates"
                    .to_owned(),
            );
            steps.push(format!(
                "wget -qO - {} | gpg --dearmor -o {keyring}",
                src.key_url
            ));
            steps.push(". /etc/os-release".to_owned());
            steps.push(format!(
                "echo \"deb [signed-by={keyring}] {}\" > /etc/apt/sources.list.d/{}.list",
                src.repo, src.name
            ));
            steps.push("apt-get update -qq".to_owned());
        }
        steps.push(format!(
            "apt-get install -y -qq --no-install-recommends {}",
            p.userspace.packages.join(" ")
        ));
        steps.push("rm -rf /var/lib/apt/lists/*".to_owned());
        let _ = writeln!(d, "RUN {}", steps.join(" \\\n && "));
        // The Ray images run as user `ray`; go back to it so pip writes into its environment.
        let _ = writeln!(d, "USER ray");
    }
    plugin_steps(ctx, &mut d);
    if let Some(version) = v.nccl_version_for(p) {
        if !p.nccl.known_bad.is_empty() {
            let why = p
                .nccl
                .bad_reason
                .clone()
                .unwrap_or_else(|| "known to fail on this fabric".to_owned());
            let _ = writeln!(d, "# NCCL {}: {why}.", p.nccl.known_bad.join(" and "));
        }
        if !p.nccl.known_good.is_empty() {
            let _ = writeln!(d, "# Known good here: {}.", p.nccl.known_good.join(", "));
        }
        let _ = writeln!(
            d,
            "RUN pip install --no-cache-dir --upgrade {}=={version}",
            p.nccl.pip_package
        );
    }
    if v.rdt_transport == "rdmakit" {
        let _ = writeln!(
            d,
            "# Ray Direct Transport over gpu-stage (tensor_transport=\"RDMAKIT\"): put the rdmakit_rdt wheel next to"
        );
        let _ = writeln!(
            d,
            "# this Dockerfile (python/rdmakit-rdt: maturin build --release --features python,rdma --compatibility linux -o <context>)."
        );
        let _ = writeln!(d, "COPY {RDT_WHEEL} /tmp/rdmakit-rdt/");
        let _ = writeln!(
            d,
            "RUN pip install --no-cache-dir /tmp/rdmakit-rdt/{RDT_WHEEL}"
        );
    }
    if v.with_rdmakit {
        let _ = writeln!(
            d,
            "COPY --from=rdmakit --chmod=0755 /rdmakit /usr/local/bin/rdmakit"
        );
    }
    d
}

/// The rdmakit_rdt wheel maturin writes (`rdmakit_rdt-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl`).
const RDT_WHEEL: &str = "rdmakit_rdt-*.whl";
