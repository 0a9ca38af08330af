//! `report::` — checks, measurements, tables and the verdict of the run's report.

use std::sync::Arc;

use rhai::Module;

use super::super::{Ctx, runtime_error};
use super::RResult;
use crate::report::Status;

/// The `report::` module.
pub(crate) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let statuses: [(&str, Status); 6] = [
        ("pass", Status::Pass),
        ("warn", Status::Warn),
        ("fail", Status::Fail),
        ("planned", Status::Planned),
        ("skip", Status::Skip),
        ("info", Status::Info),
    ];
    for (name, status) in statuses {
        let doc = format!(
            "{name}(check, detail): records a check as {}{}",
            name.to_uppercase(),
            match status {
                Status::Fail => " (also printed to stderr); a failed check fails the run",
                Status::Warn => ": likely to hurt, not a failure",
                Status::Planned => ": what a dry run would check against a cluster",
                Status::Skip => ": not run (say why in the detail)",
                _ => "",
            }
        );
        let c = ctx.clone();
        reg!(&mut m, name, doc, move |check: &str, detail: &str| {
            if status == Status::Fail {
                eprintln!("FAIL: {check}: {detail}");
            }
            c.report().check(check, status, detail);
        }, check: &str, detail: &str);
    }
    let c = ctx.clone();
    reg!(&mut m, "check",
        "check(name, ok, detail) -> ok: records a pass or a fail.",
        move |check: &str,
                                ok: bool,
                                detail: &str|
          -> bool {
        c.report()
            .check(check, if ok { Status::Pass } else { Status::Fail }, detail);
        ok
    }, check: &str, ok: bool, detail: &str);
    // measure(name, value, unit), value a float or an integer; refused in dry-run (nothing was measured).
    let c = ctx.clone();
    let measure = move |name: &str, value: f64, unit: &str| -> RResult<()> {
        if c.exec.is_dry_run() {
            return Err(runtime_error(format!(
                "report::measure({name:?}) in dry-run: nothing was measured; guard it with `if !DRY_RUN`"
            )));
        }
        c.report().measure(name, value, unit);
        Ok(())
    };
    let as_int = measure.clone();
    regp!(&mut m, "measure",
        "measure(name, value, unit): records a number the workflow measured (a float or an integer); \
        refused in a dry run, where nothing was measured.",
        measure, name: &str, value: f64, unit: &str);
    regp!(&mut m, "measure",
        "measure(name, value, unit): records a number the workflow measured (a float or an integer); \
        refused in a dry run, where nothing was measured.",
        move |name: &str, value: i64, unit: &str| as_int(name, value as f64, unit), name: &str, value: i64, unit: &str);
    let c = ctx.clone();
    reg!(&mut m, "title",
        "Sets the report's title.",
        move |t: &str| c.report().title =
        t.to_owned(), t: &str);
    let c = ctx.clone();
    reg!(&mut m, "table",
        "table(title, text): a preformatted table kept verbatim (a code block in report.md, `tables` \
        in report.json).",
        move |title: &str, text: &str| c
        .report()
        .table(title, text), title: &str, text: &str);
    let c = ctx.clone();
    regp!(
        &mut m,
        "finish",
        "finish() -> \"VERDICT: summary\": computes the verdict from the checks and writes report.md \
        and report.json (a run that ends without it is finished the same way).",
        move || -> RResult<String> {
            let mut r = c.report();
            let v = r.finish();
            c.write_report(&r)
                .map_err(|e| runtime_error(e.to_string()))?;
            Ok(format!("{}: {}", v.word(), r.summary))
        },
    );
    m
}
