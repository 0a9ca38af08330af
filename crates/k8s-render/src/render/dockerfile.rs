//! `Dockerfile`: the base image plus the vendor's RDMA userspace and a known-good NCCL.
//!
//! Every value is checked before it is written: comment and `RUN` text may hold no line break
//! ([`dockerfile::text`]), arguments the Dockerfile parser expands are one plain token
//! ([`dockerfile::token`]), and a value inside a `RUN` command is one shell word ([`word`]). A profile's
//! `install` steps are commands by design: they are checked for line breaks only.

use std::fmt::Write as _;

use super::{Ctx, RenderError};
use crate::bundle::{Bundle, FileKind};
use crate::profile::PluginSource;
use crate::quote::dockerfile;
use crate::quote::shell::word;

pub(crate) const FILE: &str = "Dockerfile";

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    bundle.add_text(FILE, FileKind::Dockerfile, dockerfile(ctx)?)?;
    Ok(())
}

/// `value` for a comment or `RUN` line, or the error naming `field`.
fn text<'a>(ctx: &Ctx<'_>, field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    dockerfile::text(field, value).map_err(|problem| unsafe_value(ctx, problem))
}

/// `value` as one token of `FROM`/`ENV`, or the error naming `field`.
fn token<'a>(ctx: &Ctx<'_>, field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    dockerfile::token(field, value).map_err(|problem| unsafe_value(ctx, problem))
}

/// `value` as one shell word of a `RUN` command, or the error naming `field`.
fn run_word(ctx: &Ctx<'_>, field: &str, value: &str) -> Result<String, RenderError> {
    dockerfile::run_word(field, value).map_err(|problem| unsafe_value(ctx, problem))
}

/// Each of `values` as a [`run_word`], space-separated, the field named with its index.
fn run_words(ctx: &Ctx<'_>, field: &str, values: &[String]) -> Result<String, RenderError> {
    let mut words = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        words.push(run_word(ctx, &format!("{field}[{i}]"), v)?);
    }
    Ok(words.join(" "))
}

/// Each of `values` checked with [`text`], the field named with its index.
fn texts(ctx: &Ctx<'_>, field: &str, values: &[String]) -> Result<(), RenderError> {
    for (i, v) in values.iter().enumerate() {
        text(ctx, &format!("{field}[{i}]"), v)?;
    }
    Ok(())
}

fn unsafe_value(ctx: &Ctx<'_>, problem: crate::quote::Unsafe) -> RenderError {
    RenderError::Unsafe {
        profile: ctx.profile.name.clone(),
        problem,
    }
}

/// `repo` (`URI suite components`) for the inside of a shell command: every part one quoted word, the
/// suite's `${VERSION_CODENAME}` (from /etc/os-release, sourced before) left to the shell.
fn apt_repo_words(repo: &str) -> String {
    repo.split("${VERSION_CODENAME}")
        .map(word)
        .collect::<Vec<_>>()
        .join("\"${VERSION_CODENAME}\"")
}

/// The net plugin's install steps, for a plugin the image carries (`source: image`).
fn plugin_steps(ctx: &Ctx<'_>, d: &mut String) -> Result<(), RenderError> {
    let p = ctx.profile;
    let Some(plugin) = p.net_plugin() else {
        return Ok(());
    };
    let name = text(ctx, "nccl.net_plugin.name", &plugin.name)?;
    let library_dir = token(ctx, "nccl.net_plugin.library_dir", &plugin.library_dir)?;
    if plugin.source != PluginSource::Image {
        let _ = writeln!(
            d,
            "# NCCL net plugin {name} comes from the node ({library_dir}, mounted by the pods): nothing to install here."
        );
        return Ok(());
    }
    let version = ctx.values.plugin_version_for(p).unwrap_or_default();
    let _ = writeln!(
        d,
        "# NCCL net plugin {name}{}: {} in {library_dir}.",
        if version.is_empty() {
            String::new()
        } else {
            format!(" {}", text(ctx, "nccl_plugin_version", &version)?)
        },
        text(ctx, "nccl.net_plugin.library", &plugin.library)?,
    );
    if !plugin.known_bad.is_empty() {
        texts(ctx, "nccl.net_plugin.known_bad", &plugin.known_bad)?;
        let why = plugin
            .bad_reason
            .clone()
            .unwrap_or_else(|| "known to fail on this fabric".to_owned());
        let _ = writeln!(
            d,
            "# {name} {}: {}.",
            plugin.known_bad.join(" and "),
            text(ctx, "nccl.net_plugin.bad_reason", &why)?
        );
    }
    let _ = writeln!(d, "USER root");
    let mut steps: Vec<String> = Vec::new();
    if !plugin.packages.is_empty() {
        steps.push("apt-get update -qq".to_owned());
        steps.push(format!(
            "apt-get install -y -qq --no-install-recommends {}",
            run_words(ctx, "nccl.net_plugin.packages", &plugin.packages)?
        ));
    }
    texts(ctx, "nccl.net_plugin.install", &plugin.install)?;
    steps.extend(
        plugin
            .install
            .iter()
            .map(|s| s.replace("${VERSION}", &word(&version))),
    );
    if !plugin.packages.is_empty() {
        steps.push("rm -rf /var/lib/apt/lists/*".to_owned());
    }
    let _ = writeln!(d, "RUN {}", steps.join(" \\\n && "));
    let _ = writeln!(d, "ENV LD_LIBRARY_PATH={library_dir}:${{LD_LIBRARY_PATH}}");
    let _ = writeln!(d, "USER ray");
    Ok(())
}

fn dockerfile(ctx: &Ctx<'_>) -> Result<String, RenderError> {
    let p = ctx.profile;
    let v = ctx.values;
    let mut d = String::new();
    // `writeln!` into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(d, "# syntax=docker/dockerfile:1");
    let _ = writeln!(
        d,
        "# Image for profile {} ({}), rendered by rdmakit.",
        text(ctx, "name", &p.name)?,
        text(ctx, "fabric", &p.fabric)?
    );
    let image = ctx.image();
    let _ = writeln!(
        d,
        "# Build: buildctl ... --output type=image,name={},push=true",
        text(
            ctx,
            "image (registry/image_name:tag, or --set image)",
            &image
        )?
    );
    if let Some(src) = &p.userspace.apt_source
        && let Some(note) = &src.note
    {
        let _ = writeln!(d, "# {}", text(ctx, "userspace.apt_source.note", note)?);
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
    let _ = writeln!(d, "FROM {}", token(ctx, "base_image", &v.base_image)?);
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
                "wget -qO - {} | gpg --dearmor -o {}",
                run_word(ctx, "userspace.apt_source.key_url", &src.key_url)?,
                run_word(ctx, "userspace.apt_source.name", &keyring)?
            ));
            steps.push(". /etc/os-release".to_owned());
            steps.push(format!(
                "echo deb {} {} > {}",
                word(&format!("[signed-by={keyring}]")),
                apt_repo_words(text(ctx, "userspace.apt_source.repo", &src.repo)?),
                word(&format!("/etc/apt/sources.list.d/{}.list", src.name))
            ));
            steps.push("apt-get update -qq".to_owned());
        }
        steps.push(format!(
            "apt-get install -y -qq --no-install-recommends {}",
            run_words(ctx, "userspace.packages", &p.userspace.packages)?
        ));
        steps.push("rm -rf /var/lib/apt/lists/*".to_owned());
        let _ = writeln!(d, "RUN {}", steps.join(" \\\n && "));
        // The Ray images run as user `ray`; go back to it so pip writes into its environment.
        let _ = writeln!(d, "USER ray");
    }
    for (field, value) in [
        (
            "userspace.apt_source.name",
            p.userspace.apt_source.as_ref().map(|s| &s.name),
        ),
        (
            "userspace.apt_source.key_url",
            p.userspace.apt_source.as_ref().map(|s| &s.key_url),
        ),
        (
            "userspace.apt_source.repo",
            p.userspace.apt_source.as_ref().map(|s| &s.repo),
        ),
    ] {
        text(ctx, field, value.map_or("", String::as_str))?;
    }
    plugin_steps(ctx, &mut d)?;
    if let Some(version) = v.nccl_version_for(p) {
        if !p.nccl.known_bad.is_empty() {
            let why = p
                .nccl
                .bad_reason
                .clone()
                .unwrap_or_else(|| "known to fail on this fabric".to_owned());
            texts(ctx, "nccl.known_bad", &p.nccl.known_bad)?;
            let why = text(ctx, "nccl.bad_reason", &why)?;
            let _ = writeln!(d, "# NCCL {}: {why}.", p.nccl.known_bad.join(" and "));
        }
        if !p.nccl.known_good.is_empty() {
            texts(ctx, "nccl.known_good", &p.nccl.known_good)?;
            let _ = writeln!(d, "# Known good here: {}.", p.nccl.known_good.join(", "));
        }
        let _ = writeln!(
            d,
            "RUN pip install --no-cache-dir --upgrade {}",
            run_word(
                ctx,
                "nccl.pip_package",
                &format!("{}=={version}", p.nccl.pip_package)
            )?
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
    Ok(d)
}

/// The rdmakit_rdt wheel maturin writes (`rdmakit_rdt-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl`).
const RDT_WHEEL: &str = "rdmakit_rdt-*.whl";
