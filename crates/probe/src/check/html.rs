//! The report as one self-contained HTML page: inline CSS, no script, no fetch at view time, so it opens
//! offline and can be attached to a ticket. The matrix is a heatmap (sender rows, receiver columns, one
//! table per rail, colour by the fraction of the expected rate, or by verdict where none is known).

use std::fmt::Write;

use super::report::CheckReport;
use crate::verdict::Verdict;

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn class(v: Verdict) -> &'static str {
    v.as_str()
}

/// A cell's colour: a failed cell is red and a warned one amber whatever its rate (flat counters at line
/// rate are a failure); a passing one goes from yellow at half the expected rate to green at it.
fn heat(fraction: Option<f64>, v: Verdict) -> String {
    match (v, fraction) {
        (Verdict::Fail, _) => "hsl(0,70%,60%)".into(),
        (Verdict::Warn, _) => "hsl(40,90%,60%)".into(),
        (_, Some(f)) => {
            let t = ((f - 0.5) / 0.5).clamp(0.0, 1.0);
            format!("hsl({},70%,60%)", (60.0 + 60.0 * t).round())
        }
        (_, None) => "hsl(120,50%,65%)".into(),
    }
}

/// The whole page.
pub fn render(r: &CheckReport) -> String {
    let mut h = String::new();
    let e = escape;
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdmakit check — {}</title>\n<style>\n\
body{{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:.5em 0 1.5em}}\
td,th{{border:1px solid #bbb;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#eee}}\
.ok,.info{{color:#176a1d}}.warn{{color:#8a5d00}}.fail{{color:#b00020;font-weight:bold}}\
.heat td.cell{{text-align:center;min-width:6em}}.badge{{padding:2px 8px;border-radius:4px;color:#fff}}\
.badge.ok{{background:#2e7d32}}.badge.warn{{background:#b7791f}}.badge.fail{{background:#c62828}}.badge.info{{background:#1565c0}}\
code,pre{{font:12px ui-monospace,monospace}}pre{{background:#f6f6f6;padding:.5em;overflow:auto}}\n</style></head><body>\n",
        e(&r.profile)
    );
    let _ = writeln!(
        h,
        "<h1>rdmakit check <span class=\"badge {}\" id=\"verdict\">{}</span></h1>\n<p>profile <code>{}</code>, namespace <code>{}</code>, {} node(s), started {}, {:.1} s, rdmakit {}, report schema <code>{}</code></p>",
        class(if r.verdict == Verdict::Info {
            Verdict::Ok
        } else {
            r.verdict
        }),
        r.headline(),
        e(&r.profile),
        e(&r.namespace),
        r.nodes.len(),
        e(&r.started),
        r.seconds,
        e(&r.rdmakit_version),
        e(&r.schema)
    );
    // Heatmap per rail.
    let _ = writeln!(h, "<h2>Data path</h2>");
    if r.matrix.is_empty() {
        let _ = writeln!(h, "<p>No matrix: {}</p>", e(&r.skipped.join("; ")));
    }
    let nodes: Vec<&str> = r.nodes.iter().map(|n| n.facts.node.as_str()).collect();
    let mut rails: Vec<&str> = r.matrix.iter().map(|c| c.device.as_str()).collect();
    rails.sort_unstable();
    rails.dedup();
    for rail in rails {
        let _ = writeln!(
            h,
            "<h3>rail {}</h3>\n<table class=\"heat\" data-rail=\"{}\"><tr><th>from \\ to</th>",
            e(rail),
            e(rail)
        );
        for n in &nodes {
            let _ = write!(h, "<th>{}</th>", e(n));
        }
        let _ = writeln!(h, "</tr>");
        for from in &nodes {
            let _ = write!(h, "<tr><th>{}</th>", e(from));
            for to in &nodes {
                match r
                    .matrix
                    .iter()
                    .find(|c| c.device == rail && c.from == *from && c.to == *to)
                {
                    Some(c) => {
                        let frac = c.gib_s.zip(c.expected_gib_s).map(|(g, x)| g / x);
                        let _ = write!(
                            h,
                            "<td class=\"cell {}\" style=\"background:{}\" title=\"{}\">{}</td>",
                            class(c.verdict),
                            heat(frac, c.verdict),
                            e(&c.summary),
                            c.gib_s.map_or("—".into(), |g| format!("{g:.2} GiB/s"))
                        );
                    }
                    None => h.push_str("<td></td>"),
                }
            }
            let _ = writeln!(h, "</tr>");
        }
        let _ = writeln!(h, "</table>");
    }
    if !r.matrix.is_empty() {
        let _ = writeln!(
            h,
            "<table id=\"cells\"><tr><th>from</th><th>to</th><th>rail</th><th>GiB/s</th><th>expected</th><th>verdict</th><th>evidence</th></tr>"
        );
        for c in &r.matrix {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{v}\">{}</td><td>{}{}</td></tr>",
                e(&c.from),
                e(&c.to),
                e(&c.device),
                c.gib_s.map_or("—".into(), |g| format!("{g:.2}")),
                c.expected_gib_s.map_or("—".into(), |g| format!("{g:.2}")),
                c.verdict.as_str(),
                e(&c.summary),
                c.fix
                    .as_deref()
                    .map(|f| format!("<br><em>fix:</em> {}", e(f)))
                    .unwrap_or_default(),
                v = class(c.verdict)
            );
        }
        let _ = writeln!(h, "</table>");
    }
    // Then what to fix.
    let _ = writeln!(
        h,
        "<h2>Findings</h2>\n<table id=\"findings\"><tr><th>verdict</th><th>check</th><th>subject</th><th>cause</th><th>fix</th></tr>"
    );
    for c in r.state.iter().chain(&r.findings) {
        let _ = writeln!(
            h,
            "<tr class=\"finding {v}\"><td class=\"{v}\">{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.verdict.as_str(),
            e(&c.id),
            e(&c.subject),
            e(&c.summary),
            e(c.fix.as_deref().unwrap_or("")),
            v = class(c.verdict)
        );
    }
    let _ = writeln!(h, "</table>");
    // Facts per node.
    let _ = writeln!(h, "<h2>Nodes</h2>");
    for n in &r.nodes {
        let f = &n.facts;
        let _ = writeln!(
            h,
            "<h3 class=\"node\">{} <small>(pod {})</small></h3>\n<table><tr><th>fact</th><th>value</th></tr>",
            e(&f.node),
            e(&f.pod)
        );
        let row = |h: &mut String, k: &str, v: String| {
            let _ = writeln!(h, "<tr><td>{}</td><td>{}</td></tr>", e(k), e(&v));
        };
        for d in &f.devices {
            for p in &d.ports {
                row(
                    &mut h,
                    &format!("{} port {}", d.name, p.port),
                    format!(
                        "{}, {}, {}; GIDs: {}",
                        p.state,
                        p.link_layer.as_deref().unwrap_or("?"),
                        p.rate.as_deref().unwrap_or("?"),
                        p.gids
                            .iter()
                            .map(|g| format!(
                                "{}={} {} {}",
                                g.index,
                                g.gid_type.as_deref().unwrap_or("-"),
                                g.gid,
                                g.netdev.as_deref().unwrap_or("")
                            ))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                );
            }
        }
        row(
            &mut h,
            "interfaces",
            f.interfaces
                .iter()
                .map(|i| format!("{} {}", i.name, i.addresses.join(" ")))
                .collect::<Vec<_>>()
                .join("; "),
        );
        row(
            &mut h,
            "memlock",
            f.memlock.map_or("?".into(), |m| m.human()),
        );
        row(
            &mut h,
            "CapEff",
            format!(
                "{} (IPC_LOCK {})",
                f.cap_eff.as_deref().unwrap_or("?"),
                f.cap_ipc_lock.map_or("?", |c| if c { "yes" } else { "no" })
            ),
        );
        row(
            &mut h,
            "/dev/shm",
            f.shm_bytes.map_or("?".into(), crate::units::human_bytes),
        );
        row(
            &mut h,
            "environment",
            f.env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
        row(&mut h, "GPUs", f.gpus.join("; "));
        row(&mut h, "libraries", f.libraries.join(", "));
        row(&mut h, "sidecars", f.sidecars.join(", "));
        if !f.unreadable.is_empty() {
            row(&mut h, "unreadable", f.unreadable.join("; "));
        }
        let _ = writeln!(h, "</table>");
        if let Some(t) = &f.topo {
            let _ = writeln!(h, "<pre>{}</pre>", e(t));
        }
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Skipped</h2><ul>{}</ul>",
            r.skipped
                .iter()
                .map(|s| format!("<li>{}</li>", e(s)))
                .collect::<String>()
        );
    }
    let _ = writeln!(
        h,
        "<p>Pods: {} ({})</p>\n</body></html>",
        e(&r.pods.join(", ")),
        if r.kept { "kept" } else { "deleted" }
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(heat(Some(1.0), Verdict::Ok), "hsl(120,70%,60%)");
        assert_eq!(heat(Some(0.5), Verdict::Ok), "hsl(60,70%,60%)");
        // Line rate with flat counters is still red.
        assert_eq!(heat(Some(1.0), Verdict::Fail), "hsl(0,70%,60%)");
    }
}
