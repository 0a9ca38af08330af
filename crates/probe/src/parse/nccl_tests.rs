//! nccl-tests output (`all_reduce_perf` and friends): the text table and the JSON file
//! (`-J`/`--output_file`, format version 2).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ParseError;

const WHAT: &str = "nccl-tests";

/// One direction of a row: out-of-place or in-place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Time per operation in microseconds (`time` or `cputime` column).
    pub time_us: f64,
    /// Algorithm bandwidth in GB/s.
    pub algbw_gbps: f64,
    /// Bus bandwidth in GB/s.
    pub busbw_gbps: f64,
    /// `#wrong`; `None` when the run did not check (`N/A`, `-c 0`).
    pub wrong: Option<u64>,
    /// Per-iteration statistics (`-R`/per-iteration mode): min, max, p99 in µs and CV in %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_iter: Option<[f64; 4]>,
}

/// One table row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclTestsRow {
    /// Bytes.
    pub size: u64,
    /// Elements.
    pub count: u64,
    /// Data type (`float`).
    pub dtype: String,
    /// Reduction (`sum`, `none`).
    pub redop: String,
    /// Root rank (`-1` for rootless collectives); `None` in old versions without the column.
    pub root: Option<i64>,
    /// Out-of-place result.
    pub out_of_place: Option<Measurement>,
    /// In-place result.
    pub in_place: Option<Measurement>,
}

impl NcclTestsRow {
    /// The best bus bandwidth of the row.
    pub fn busbw_gbps(&self) -> f64 {
        let a = self.out_of_place.as_ref().map_or(0.0, |m| m.busbw_gbps);
        let b = self.in_place.as_ref().map_or(0.0, |m| m.busbw_gbps);
        a.max(b)
    }

    /// Total wrong elements, if checked.
    pub fn wrong(&self) -> Option<u64> {
        let w: Vec<u64> = [&self.out_of_place, &self.in_place]
            .iter()
            .filter_map(|m| m.as_ref().and_then(|m| m.wrong))
            .collect();
        (!w.is_empty()).then(|| w.iter().sum())
    }
}

/// Run parameters from the `# nThread ...` header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclTestsHeader {
    /// nccl-tests version (`2.17.6`).
    pub tests_version: Option<String>,
    /// Collective binary (`all_reduce_perf`).
    pub collective: Option<String>,
    /// `nThread`.
    pub nthreads: Option<u32>,
    /// `nGpus`.
    pub ngpus: Option<u32>,
    /// `minBytes`.
    pub min_bytes: Option<u64>,
    /// `maxBytes`.
    pub max_bytes: Option<u64>,
    /// `warmup iters`.
    pub warmup_iters: Option<u32>,
    /// `iters`.
    pub iters: Option<u32>,
    /// `validation` (the `-c` flag).
    pub validation: Option<u32>,
}

/// A `#  Rank N Group G Pid P on HOST device D [BUS] NAME` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankDevice {
    /// Rank.
    pub rank: u32,
    /// Host name.
    pub host: String,
    /// CUDA device ordinal.
    pub device: u32,
    /// Bus id as printed.
    pub bus_id: String,
    /// GPU name.
    pub gpu: String,
}

/// A parsed nccl-tests run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclTestsRun {
    /// Header facts.
    pub header: NcclTestsHeader,
    /// NCCL version from `NCCL version 2.19.3+cuda12.2` (or the JSON `nccl_version` code).
    pub nccl_version: Option<String>,
    /// Ranks and GPUs.
    pub ranks: Vec<RankDevice>,
    /// Result rows in order.
    pub rows: Vec<NcclTestsRow>,
    /// `# Out of bounds values : N`.
    pub out_of_bounds: Option<u64>,
    /// `# Avg bus bandwidth : X` in GB/s.
    pub avg_busbw_gbps: Option<f64>,
    /// `# error: ...` lines / JSON `errors`.
    pub errors: Vec<String>,
}

impl NcclTestsRun {
    /// Largest bus bandwidth of any row.
    pub fn peak_busbw_gbps(&self) -> Option<f64> {
        self.rows
            .iter()
            .map(NcclTestsRow::busbw_gbps)
            .fold(None, |acc, v| Some(acc.map_or(v, |a: f64| a.max(v))))
    }

    /// Total wrong elements over all rows, if any row was checked.
    pub fn total_wrong(&self) -> Option<u64> {
        let w: Vec<u64> = self.rows.iter().filter_map(NcclTestsRow::wrong).collect();
        (!w.is_empty()).then(|| w.iter().sum())
    }

    /// The run finished cleanly: it has a table, no row has wrong elements (where validated) and no
    /// error line was seen.
    pub fn completed(&self) -> bool {
        !self.rows.is_empty() && self.total_wrong().unwrap_or(0) == 0 && self.errors.is_empty()
    }

    /// Lower bound of the bytes the devices of `nodes` nodes transmit together for this table's timed
    /// iterations of all_reduce: an all_reduce of S bytes over N nodes makes each node send at least
    /// 2(N-1)/N x S to the others (ring, tree, or one reduce-scatter + all-gather), so the N nodes together
    /// at least 2(N-1) x S per iteration. Warm-up iterations and other traffic only add to it. The header's
    /// `iters` (nccl-tests' default [`DEFAULT_ITERS`] without one).
    pub fn all_reduce_min_bytes(&self, nodes: u32) -> u64 {
        let sizes = self.rows.iter().fold(0u64, |a, r| a.saturating_add(r.size));
        all_reduce_floor(sizes, self.header.iters.unwrap_or(DEFAULT_ITERS), nodes)
    }
}

/// nccl-tests' timed iterations without `-n`.
pub const DEFAULT_ITERS: u32 = 20;

/// [`NcclTestsRun::all_reduce_min_bytes`] for a run not made yet: the sizes nccl-tests runs from
/// `min_bytes` doubling (`-f 2`) up to `max_bytes`, `iters` timed iterations each, over `nodes` nodes.
pub fn planned_all_reduce_min_bytes(min_bytes: u64, max_bytes: u64, iters: u32, nodes: u32) -> u64 {
    let mut sizes = 0u64;
    let mut size = min_bytes;
    while size > 0 && size <= max_bytes {
        sizes = sizes.saturating_add(size);
        size = match size.checked_mul(2) {
            Some(s) => s,
            None => break,
        };
    }
    all_reduce_floor(sizes, iters, nodes)
}

fn all_reduce_floor(sizes: u64, iters: u32, nodes: u32) -> u64 {
    sizes
        .saturating_mul(u64::from(iters))
        .saturating_mul(2)
        .saturating_mul(u64::from(nodes.saturating_sub(1)))
}

/// Bytes of an nccl-tests size argument (`-b 512M`, `-e 8G`, `1024`): K, M and G are powers of 1024, as
/// nccl-tests reads them; `None` for anything else.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

fn is_int(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit())
}

fn is_timestamp_token(s: &str) -> bool {
    // `2025-01-01` or `12:00:00`
    let b = s.as_bytes();
    (b.len() == 10 && b.get(4) == Some(&b'-') && b.get(7) == Some(&b'-'))
        || (b.len() == 8 && b.get(2) == Some(&b':') && b.get(5) == Some(&b':'))
}

fn parse_f(s: &str) -> Option<f64> {
    s.parse::<f64>().ok()
}

fn parse_wrong(s: &str) -> Option<Option<u64>> {
    if s == "N/A" {
        return Some(None);
    }
    let v = s.parse::<f64>().ok()?;
    (v.is_finite() && v >= 0.0).then_some(Some(v as u64))
}

fn measurement(vals: &[&str], per_iter: bool) -> Option<Measurement> {
    let m = Measurement {
        time_us: parse_f(vals.first()?)?,
        algbw_gbps: parse_f(vals.get(1)?)?,
        busbw_gbps: parse_f(vals.get(2)?)?,
        wrong: parse_wrong(vals.get(3)?)?,
        per_iter: if per_iter {
            Some([
                parse_f(vals.get(4)?)?,
                parse_f(vals.get(5)?)?,
                parse_f(vals.get(6)?)?,
                parse_f(vals.get(7)?)?,
            ])
        } else {
            None
        },
    };
    Some(m)
}

/// Column layout learnt from the `#  size count type redop root time ...` header.
#[derive(Clone, Copy)]
struct Layout {
    has_root: Option<bool>,
    per_iter: bool,
}

fn parse_row(line: &str, layout: Layout) -> Option<NcclTestsRow> {
    let mut toks: Vec<&str> = line.split_whitespace().collect();
    if toks.len() < 6 || !is_int(toks[0]) || !is_int(toks[1]) || is_int(toks[2]) || is_int(toks[3])
    {
        return None;
    }
    while toks.last().is_some_and(|t| is_timestamp_token(t)) {
        toks.pop();
    }
    let size = toks[0].parse().ok()?;
    let count = toks[1].parse().ok()?;
    let mut rest = &toks[4..];
    let width = if layout.per_iter { 8 } else { 4 };
    let has_root = layout
        .has_root
        .unwrap_or(rest.len() % width == 1 && is_int(rest[0]));
    let root = if has_root {
        let r = rest.first()?.parse().ok()?;
        rest = &rest[1..];
        Some(r)
    } else {
        None
    };
    let (oop, ip) = match rest.len() {
        n if n == 2 * width => (
            Some(measurement(&rest[..width], layout.per_iter)?),
            Some(measurement(&rest[width..], layout.per_iter)?),
        ),
        n if n == width => (None, Some(measurement(rest, layout.per_iter)?)),
        _ => return None,
    };
    Some(NcclTestsRow {
        size,
        count,
        dtype: toks[2].to_string(),
        redop: toks[3].to_string(),
        root,
        out_of_place: oop,
        in_place: ip,
    })
}

fn kv_after<'a>(toks: &[&'a str], key: &str) -> Option<&'a str> {
    toks.iter()
        .position(|t| *t == key)
        .and_then(|i| toks.get(i + 1))
        .copied()
}

fn parse_header_line(h: &mut NcclTestsHeader, body: &str) {
    let toks: Vec<&str> = body.split_whitespace().collect();
    if let Some(v) = body.strip_prefix("nccl-tests version ") {
        h.tests_version = v.split_whitespace().next().map(str::to_string);
    } else if let Some(v) = body.strip_prefix("Collective test starting:") {
        h.collective = Some(v.trim().to_string());
    } else if toks.first() == Some(&"nThread") {
        h.nthreads = kv_after(&toks, "nThread").and_then(|v| v.parse().ok());
        h.ngpus = kv_after(&toks, "nGpus").and_then(|v| v.parse().ok());
        h.min_bytes = kv_after(&toks, "minBytes").and_then(|v| v.parse().ok());
        h.max_bytes = kv_after(&toks, "maxBytes").and_then(|v| v.parse().ok());
        // `warmup iters: 5 iters: 20 agg iters: 1`: the plain `iters:` is the one not after warmup/agg.
        h.iters = toks
            .windows(3)
            .find(|w| w[1] == "iters:" && w[0] != "warmup" && w[0] != "agg")
            .and_then(|w| w[2].parse().ok());
        h.warmup_iters = toks
            .windows(3)
            .find(|w| w[0] == "warmup" && w[1] == "iters:")
            .and_then(|w| w[2].parse().ok());
        h.validation = kv_after(&toks, "validation:").and_then(|v| v.parse().ok());
    }
}

fn parse_rank_line(body: &str) -> Option<RankDevice> {
    // Rank  0 Group  0 Pid     45 on HOST device  0 [0x00] NVIDIA L20
    let toks: Vec<&str> = body.split_whitespace().collect();
    if toks.first() != Some(&"Rank") {
        return None;
    }
    let rank = kv_after(&toks, "Rank")?.parse().ok()?;
    let host = kv_after(&toks, "on")?.to_string();
    let device = kv_after(&toks, "device")?.parse().ok()?;
    let dev_pos = toks.iter().position(|t| *t == "device")?;
    let bus_id = toks.get(dev_pos + 2)?.trim_matches(['[', ']']).to_string();
    let gpu = toks
        .get(dev_pos + 3..)
        .map(|t| t.join(" "))
        .unwrap_or_default();
    Some(RankDevice {
        rank,
        host,
        device,
        bus_id,
        gpu,
    })
}

/// Drop Open MPI's `--tag-output` prefix (`[1,0]<stdout>:`).
fn strip_mpi_tag(line: &str) -> &str {
    if line.starts_with('[')
        && let Some(end) = line.find(">:")
        && line[..end].contains("]<std")
    {
        return line[end + 2..].trim();
    }
    line
}

/// Parse the text output of an nccl-tests binary (launcher log with NCCL INFO noise is fine).
pub fn parse_nccl_tests(text: &str) -> Result<NcclTestsRun, ParseError> {
    let mut run = NcclTestsRun::default();
    let mut layout = Layout {
        has_root: None,
        per_iter: false,
    };
    for raw in text.lines() {
        let line = strip_mpi_tag(raw.trim());
        if let Some(pos) = line.find("NCCL version ")
            && run.nccl_version.is_none()
        {
            run.nccl_version = line[pos + 13..]
                .split_whitespace()
                .next()
                .map(str::to_string);
        }
        if let Some(body) = line.strip_prefix('#') {
            let body = body.trim();
            let toks: Vec<&str> = body.split_whitespace().collect();
            if toks.first() == Some(&"size") && toks.contains(&"count") {
                layout.has_root = Some(toks.contains(&"root"));
                layout.per_iter = toks.contains(&"i_min");
            } else if let Some(v) = body.strip_prefix("Avg bus bandwidth") {
                run.avg_busbw_gbps = v
                    .trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()
                    .and_then(parse_f);
            } else if let Some(v) = body.strip_prefix("Out of bounds values") {
                run.out_of_bounds = v
                    .trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok());
            } else if let Some(v) = body.strip_prefix("error:") {
                run.errors.push(v.trim().to_string());
            } else if let Some(r) = parse_rank_line(body) {
                run.ranks.push(r);
            } else {
                parse_header_line(&mut run.header, body);
            }
            continue;
        }
        if let Some(row) = parse_row(line, layout) {
            run.rows.push(row);
        }
    }
    if run.rows.is_empty() && run.avg_busbw_gbps.is_none() {
        return Err(ParseError::new(
            WHAT,
            None,
            "no result rows and no `# Avg bus bandwidth` line; expected rows like \
             `536870912  134217728  float  sum  -1  45012  11.93  11.93  0  ...` \
             (pass the launcher's whole output, e.g. `kubectl logs <launcher>`)",
        ));
    }
    Ok(run)
}

fn j_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn j_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn j_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        j_f64(v)
            .filter(|f| *f >= 0.0 && f.is_finite())
            .map(|f| f as u64)
    })
}

fn j_measurement(v: &Value, at: usize) -> Result<Option<Measurement>, ParseError> {
    if v.is_null() {
        return Ok(None);
    }
    let bad = |field: &str| {
        ParseError::new(
            WHAT,
            None,
            format!("JSON results[{at}]: missing or non-numeric `{field}`"),
        )
    };
    let time = v
        .get("time")
        .or_else(|| v.get("cpu_time"))
        .and_then(j_f64)
        .ok_or_else(|| bad("time"))?;
    Ok(Some(Measurement {
        time_us: time,
        algbw_gbps: v
            .get("alg_bw")
            .and_then(j_f64)
            .ok_or_else(|| bad("alg_bw"))?,
        busbw_gbps: v
            .get("bus_bw")
            .and_then(j_f64)
            .ok_or_else(|| bad("bus_bw"))?,
        wrong: v.get("nwrong").and_then(j_u64),
        per_iter: None,
    }))
}

/// Parse the JSON file nccl-tests writes with `-J FILE` (format version 2: `config`,
/// `results[]` with `out_of_place`/`in_place` objects, `average_bus_bandwidth`, `errors`).
pub fn parse_nccl_tests_json(text: &str) -> Result<NcclTestsRun, ParseError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ParseError::new(WHAT, Some(e.line()), format!("not valid JSON: {e}")))?;
    let results = v.get("results").and_then(Value::as_array).ok_or_else(|| {
        ParseError::new(
            WHAT,
            None,
            "JSON has no `results` array; expected the file nccl-tests writes with -J/--output_file",
        )
    })?;
    let mut run = NcclTestsRun {
        nccl_version: v
            .get("nccl_version")
            .and_then(Value::as_u64)
            .and_then(|c| u32::try_from(c).ok())
            .and_then(crate::facts::NcclVersion::from_code)
            .map(|v| v.to_string()),
        ..Default::default()
    };
    if let Some(c) = v.get("config") {
        let g = |k: &str| c.get(k).and_then(Value::as_u64);
        run.header = NcclTestsHeader {
            tests_version: None,
            collective: v
                .get("args")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .map(|s| s.rsplit('/').next().unwrap_or(s).to_string()),
            nthreads: g("nthreads").and_then(|x| u32::try_from(x).ok()),
            ngpus: g("ngpus").and_then(|x| u32::try_from(x).ok()),
            min_bytes: g("minimum_bytes"),
            max_bytes: g("maximum_bytes"),
            warmup_iters: g("warmup_iters").and_then(|x| u32::try_from(x).ok()),
            iters: g("iterations").and_then(|x| u32::try_from(x).ok()),
            validation: g("validation").and_then(|x| u32::try_from(x).ok()),
        };
        if let Some(devs) = c.get("devices").and_then(Value::as_array) {
            for d in devs {
                run.ranks.push(RankDevice {
                    rank: d
                        .get("rank")
                        .and_then(Value::as_u64)
                        .and_then(|x| u32::try_from(x).ok())
                        .unwrap_or(0),
                    host: d.get("hostname").and_then(j_str).unwrap_or_default(),
                    device: d
                        .get("device")
                        .and_then(Value::as_u64)
                        .and_then(|x| u32::try_from(x).ok())
                        .unwrap_or(0),
                    bus_id: d.get("device_hex").and_then(j_str).unwrap_or_default(),
                    gpu: d.get("device_info").and_then(j_str).unwrap_or_default(),
                });
            }
        }
    }
    for (i, r) in results.iter().enumerate() {
        let bad = |field: &str| {
            ParseError::new(
                WHAT,
                None,
                format!("JSON results[{i}]: missing or invalid `{field}`"),
            )
        };
        run.rows.push(NcclTestsRow {
            size: r.get("size").and_then(j_u64).ok_or_else(|| bad("size"))?,
            count: r.get("count").and_then(j_u64).ok_or_else(|| bad("count"))?,
            dtype: r.get("type").and_then(j_str).unwrap_or_default(),
            redop: r.get("redop").and_then(j_str).unwrap_or_default(),
            root: r
                .get("root")
                .and_then(j_str)
                .and_then(|s| s.trim().parse().ok()),
            out_of_place: j_measurement(r.get("out_of_place").unwrap_or(&Value::Null), i)?,
            in_place: j_measurement(r.get("in_place").unwrap_or(&Value::Null), i)?,
        });
    }
    run.out_of_bounds = v
        .get("out_of_bounds")
        .and_then(|o| o.get("count"))
        .and_then(Value::as_u64);
    run.avg_busbw_gbps = v
        .get("average_bus_bandwidth")
        .and_then(|o| o.get("bandwidth"))
        .and_then(j_f64);
    if let Some(errs) = v.get("errors").and_then(Value::as_array) {
        run.errors = errs.iter().filter_map(j_str).collect();
    }
    Ok(run)
}
