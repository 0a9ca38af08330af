//! Dockerfile rules: NCCL pins and base images against the known-bad versions, the RDMA userspace
//! packages the profile needs, and the vendor APT source they must come from.

use super::catalog::{DOCKERFILE_APT_SOURCE, DOCKERFILE_USERSPACE, PLUGIN_MISSING, TORCH_NCCL};
use super::text::{good_nccl_pin, other_vendor, text_rules};
use super::{Finding, LintOptions, sort};
use crate::DevicePattern;
use crate::manifest::{FieldPath, Location, Severity};

/// Packages every RDMA image needs when the profile names none.
const DEFAULT_USERSPACE: &[&str] = &["libibverbs1", "ibverbs-providers"];

/// Where the eRDMA provider comes from when the options name no APT source but the devices are eRDMA.
const ERDMA_APT_HOST: &str = "mirrors.cloud.aliyuncs.com/erdma";

/// True for a Dockerfile: named `Dockerfile`, `Containerfile`, `*.Dockerfile` or `Dockerfile.*`,
/// or text whose first instruction is `FROM` (or `ARG` before a `FROM`).
pub fn is_dockerfile(path: &str, text: &str) -> bool {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let lower = name.to_ascii_lowercase();
    if lower == "dockerfile"
        || lower == "containerfile"
        || lower.ends_with(".dockerfile")
        || lower.starts_with("dockerfile.")
    {
        return true;
    }
    // Lazily: a manifest is told apart by its first line, not by splitting all of it into instructions.
    let mut first = keywords(text);
    match first.next().as_deref() {
        Some("FROM") => true,
        Some("ARG") => first.any(|k| k == "FROM"),
        _ => false,
    }
}

/// The keyword of each instruction, in order: what [`instructions`] gives, without joining arguments.
fn keywords(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut open = false;
    text.lines().filter_map(move |raw| {
        let line = raw.trim();
        if line.starts_with('#') {
            return None;
        }
        let (body, continues) = match line.strip_suffix('\\') {
            Some(b) => (b.trim_end(), true),
            None => (line, false),
        };
        if open {
            open = continues;
            return None;
        }
        if body.is_empty() {
            return None;
        }
        let kw = body
            .split_once(char::is_whitespace)
            .map_or(body, |(k, _)| k)
            .to_ascii_uppercase();
        open = continues;
        Some(kw)
    })
}

/// One instruction with its continuation lines joined.
struct Instruction {
    keyword: String,
    args: String,
    line: u64,
}

fn instructions(text: &str) -> Vec<Instruction> {
    let mut out: Vec<Instruction> = Vec::new();
    let mut open: Option<Instruction> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('#') {
            continue;
        }
        let (body, continues) = match line.strip_suffix('\\') {
            Some(b) => (b.trim_end(), true),
            None => (line, false),
        };
        match open.as_mut() {
            Some(ins) => {
                ins.args.push(' ');
                ins.args.push_str(body);
            }
            None if body.is_empty() => continue,
            None => {
                let (kw, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
                open = Some(Instruction {
                    keyword: kw.to_ascii_uppercase(),
                    args: rest.trim().to_owned(),
                    line: i as u64 + 1,
                });
            }
        }
        if !continues && let Some(ins) = open.take() {
            out.push(ins);
        }
    }
    out.extend(open);
    out
}

/// Packages named by `apt-get install`, `apt install`, `yum/dnf/microdnf install` in a RUN line,
/// with whether the installer was apt.
fn installed_packages(run: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for command in run.split(['&', ';', '|']) {
        let words: Vec<&str> = command.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "install") else {
            continue;
        };
        let Some(tool) = words[..at].iter().rev().find(|w| !w.starts_with('-')) else {
            continue;
        };
        let apt = matches!(*tool, "apt-get" | "apt");
        if !(apt || matches!(*tool, "yum" | "dnf" | "microdnf")) {
            continue;
        }
        for w in &words[at + 1..] {
            if w.starts_with('-') {
                continue;
            }
            // `libnccl2=2.28.7-1+cuda12.9` → `libnccl2`
            let name = w.split('=').next().unwrap_or(w);
            out.push((name.to_owned(), apt));
        }
    }
    out
}

/// Lints a Dockerfile: the text rules (NCCL pins in `pip install`, `ENV NCCL_VERSION`, base
/// image tags, torch's bundled NCCL) outside comments, base images whose torch bundles a bad
/// NCCL, RDMA userspace packages, and the vendor APT source.
///
/// ```
/// use k8s_render::lint::{self, LintOptions};
/// let text = "FROM rayproject/ray-llm:2.57.0-py312-cu130\nRUN pip install nvidia-nccl-cu13==2.28.9\n";
/// let findings = lint::lint_dockerfile("Dockerfile", text, &LintOptions::default());
/// assert!(findings.iter().any(|f| f.rule == "nccl-known-bad-version" && f.location.line == Some(2)));
/// assert!(findings.iter().any(|f| f.rule == "dockerfile-missing-rdma-userspace"));
/// ```
pub fn lint_dockerfile(source: &str, text: &str, options: &LintOptions) -> Vec<Finding> {
    let erdma = options
        .device_pattern
        .as_ref()
        .is_some_and(DevicePattern::names_erdma);
    let mut out = Vec::new();
    let finding = |rule: &'static super::Rule,
                   severity: Severity,
                   keyword: &str,
                   line: u64,
                   message: String,
                   fix: String| Finding {
        rule: rule.id,
        severity,
        location: Location::in_file(source, "Dockerfile", FieldPath::root().key(keyword), line),
        message,
        why: rule.why,
        fix,
    };
    // Comments keep their line but lose their text: a comment naming a bad version is no pin.
    let code: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with('#') {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let has_good_pin = good_nccl_pin(&code);
    let ins = instructions(text);
    for ((rule, severity, message, fix), at) in text_rules(
        &code,
        erdma,
        other_vendor(options),
        has_good_pin,
        options.plugin.as_ref(),
    ) {
        let line = code[..at].matches('\n').count() as u64 + 1;
        let keyword = ins
            .iter()
            .rev()
            .find(|i| i.line <= line)
            .map_or("text", |i| i.keyword.as_str());
        out.push(finding(rule, severity, keyword, line, message, fix));
    }
    for from in ins.iter().filter(|i| i.keyword == "FROM") {
        let image = from.args.split_whitespace().find(|w| !w.starts_with("--"));
        if let Some(image) = image
            && let Some((name, tag)) = image.rsplit_once(':')
            && name.contains("torch")
            && (tag.starts_with("2.11") || tag.starts_with("v2.11"))
            && !has_good_pin
        {
            out.push(finding(
                TORCH_NCCL,
                if other_vendor(options) && !erdma {
                    Severity::Info
                } else {
                    Severity::Warning
                },
                "FROM",
                from.line,
                format!("base image {image} ships torch 2.11, whose bundled NCCL is 2.28.9"),
                "add `RUN pip install --no-cache-dir nvidia-nccl-cu13==2.30.7` after the FROM"
                    .to_owned(),
            ));
        }
    }
    let from_line = ins
        .iter()
        .find(|i| i.keyword == "FROM")
        .map_or(1, |i| i.line);
    if let Some(p) = options.plugin.as_ref().filter(|p| p.in_image) {
        let lower = code.to_ascii_lowercase();
        if !lower.contains(&p.name.to_ascii_lowercase())
            && !lower.contains(&p.library.to_ascii_lowercase())
        {
            out.push(finding(
                PLUGIN_MISSING,
                Severity::Error,
                "FROM",
                from_line,
                format!(
                    "never installs the {} plugin ({} in {})",
                    p.name, p.library, p.library_dir
                ),
                format!(
                    "add the plugin's install steps and `ENV LD_LIBRARY_PATH={}:$LD_LIBRARY_PATH` (`rdmakit render image --profile <profile>` writes them)",
                    p.library_dir
                ),
            ));
        }
    }
    // A plugin installer that brings its own rdma-core (the EFA installer) replaces the
    // distribution's packages; with no packages named, there is nothing to require.
    let plugin_userspace = options.plugin.as_ref().is_some_and(|p| p.in_image)
        && options.userspace_packages.is_empty();
    let required: Vec<String> = if plugin_userspace {
        Vec::new()
    } else if options.userspace_packages.is_empty() {
        DEFAULT_USERSPACE.iter().map(|p| (*p).to_owned()).collect()
    } else {
        options.userspace_packages.clone()
    };
    let profile_given = !options.userspace_packages.is_empty();
    let mut installed: Vec<(String, bool, u64)> = Vec::new();
    for run in ins.iter().filter(|i| i.keyword == "RUN") {
        for (name, apt) in installed_packages(&run.args) {
            installed.push((name, apt, run.line));
        }
    }
    let has = |p: &str| installed.iter().any(|(n, ..)| n == p || n == "rdma-core");
    let missing: Vec<&str> = required
        .iter()
        .map(String::as_str)
        .filter(|p| !has(p))
        .collect();
    if !required.is_empty() && !missing.is_empty() {
        let line = ins
            .iter()
            .find(|i| i.keyword == "FROM")
            .map_or(1, |i| i.line);
        let what = if missing.len() == required.len() {
            "installs no RDMA userspace package".to_owned()
        } else {
            "does not install every RDMA userspace package".to_owned()
        };
        out.push(finding(
            DOCKERFILE_USERSPACE,
            if profile_given || erdma { Severity::Error } else { Severity::Warning },
            "FROM",
            line,
            format!("{what}: missing {}", missing.join(", ")),
            format!(
                "add `RUN apt-get update && apt-get install -y --no-install-recommends {}` (from the vendor's APT source where the profile has one)",
                required.join(" ")
            ),
        ));
    }
    let vendor_host = options
        .apt_source
        .as_deref()
        .map(|repo| {
            let url = repo.split_whitespace().next().unwrap_or(repo);
            let bare = url.split_once("://").map_or(url, |(_, rest)| rest);
            // host plus the first path segment (`mirrors.cloud.aliyuncs.com/erdma`)
            bare.splitn(3, '/').take(2).collect::<Vec<_>>().join("/")
        })
        .or_else(|| erdma.then(|| ERDMA_APT_HOST.to_owned()));
    if let Some(host) = vendor_host.filter(|h| !h.is_empty())
        && !code.contains(&host)
        && let Some((name, _, line)) = installed
            .iter()
            .find(|(n, apt, _)| *apt && required.iter().any(|r| r == n))
    {
        out.push(finding(
            DOCKERFILE_APT_SOURCE,
            Severity::Error,
            "RUN",
            *line,
            format!("installs {name} with apt but never adds the vendor's APT source ({host})"),
            format!(
                "add the vendor repository before installing (`rdmakit render image --profile <profile>` writes the steps): key, `deb [signed-by=...] http://{host}/...` in /etc/apt/sources.list.d/, apt-get update"
            ),
        ));
    }
    sort(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_are_the_instructions_keywords() {
        for text in [
            "FROM a\nRUN x \\\n  y\n# c\nARG z\n",
            "ARG V=1\n\\\n\nFROM b:$V\nRUN a \\\n# inside\n  b \\\n\nCMD c",
            "apiVersion: v1\nkind: Pod\n",
            "",
            "RUN open \\",
            "  \n# only\nfrom x",
        ] {
            let want: Vec<String> = instructions(text).into_iter().map(|i| i.keyword).collect();
            assert_eq!(keywords(text).collect::<Vec<_>>(), want, "{text:?}");
        }
    }
}
