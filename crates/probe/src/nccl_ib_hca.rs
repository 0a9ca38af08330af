//! `NCCL_IB_HCA` as NCCL reads it (`transport/net_ib.cc` with `parseStringList`/`matchIfList`), so a
//! check predicts which devices and ports NCCL opens instead of searching a log for the variable's text.
//!
//! The grammar, from NCCL's environment documentation and its parser:
//! - an optional leading `^` excludes the listed devices (else only they are used);
//! - then an optional `=`: names are exact (else each entry is a prefix: `mlx5` matches `mlx5_0`);
//!   `^` must come first (`^=mlx5_1`); in `=^x` the `^` is part of the name;
//! - comma-separated entries `dev[:port]`; without a port every port of the device matches. The port is
//!   read as C's `atoi` does (`mlx5_0:1x` is port 1, `mlx5_0:` port 0, which no device has); `-1` means
//!   any port, as in NCCL. Entries with an empty name (`,,`, `:1`) are dropped.
//! - nothing is trimmed: NCCL keeps a space as part of the name, so `mlx5_0, mlx5_1` selects mlx5_0
//!   only (the second entry is ` mlx5_1`). [`IbHca::whitespace`] names such entries for a warning.
//! - an empty list matches every device; with `^` (`NCCL_IB_HCA=^`) it therefore excludes every device.
//!
//! ```
//! use probe::nccl_ib_hca::IbHca;
//!
//! // NCCL's documented examples.
//! let all = IbHca::parse("mlx5");
//! assert!(all.selects("mlx5_3", 2) && !all.selects("erdma_0", 1));
//! let ports = IbHca::parse("=mlx5_0:1,mlx5_1:1");
//! assert!(ports.selects("mlx5_0", 1) && !ports.selects("mlx5_0", 2) && !ports.selects("mlx5_10", 1));
//! let not = IbHca::parse("^=mlx5_1,mlx5_4");
//! assert!(not.selects("mlx5_0", 1) && !not.selects("mlx5_4", 1) && not.selects("mlx5_10", 1));
//! ```

use serde::Serialize;

/// One `dev[:port]` entry of the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HcaEntry {
    /// The name (exact with `=`, else a prefix), as written: spaces included.
    pub name: String,
    /// The port; `None` for every port (no `:port`, or `:-1`).
    pub port: Option<i64>,
}

/// A parsed `NCCL_IB_HCA` value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IbHca {
    /// The value as given.
    pub value: String,
    /// Leading `^`: the entries are excluded.
    pub exclude: bool,
    /// `=` (after any `^`): names match exactly, not as prefixes.
    pub exact: bool,
    /// The entries, in order.
    pub entries: Vec<HcaEntry>,
}

impl IbHca {
    /// Parses `value` the way NCCL does (see the module documentation). Never fails: NCCL accepts any
    /// string, and a value that matches nothing is judged by what it selects.
    pub fn parse(value: &str) -> IbHca {
        let (exclude, rest) = match value.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, value),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let entries = rest
            .split(',')
            .filter_map(|item| {
                let (name, port) = match item.split_once(':') {
                    Some((n, p)) => (n, Some(atoi(p))),
                    None => (item, None),
                };
                (!name.is_empty()).then(|| HcaEntry {
                    name: name.to_owned(),
                    port: port.filter(|p| *p != -1),
                })
            })
            .collect();
        IbHca {
            value: value.to_owned(),
            exclude,
            exact,
            entries,
        }
    }

    fn name_matches(&self, entry: &HcaEntry, device: &str) -> bool {
        if self.exact {
            device == entry.name
        } else {
            device.starts_with(&entry.name)
        }
    }

    /// `matchIfList` for one device port, before `^` is applied.
    fn listed(&self, device: &str, port: Option<i64>) -> bool {
        self.entries.is_empty()
            || self.entries.iter().any(|e| {
                self.name_matches(e, device)
                    && match (port, e.port) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    }
            })
    }

    /// Whether NCCL uses port `port` of `device` under this value.
    pub fn selects(&self, device: &str, port: u32) -> bool {
        self.listed(device, Some(i64::from(port))) != self.exclude
    }

    /// Whether NCCL may use some port of `device` (its ports unknown, as in a device listing): listed
    /// at all without `^`; with `^`, not excluded on every port (an entry without a port).
    pub fn selects_device(&self, device: &str) -> bool {
        if self.exclude {
            // `^` with no entries excludes every device; else only an entry for every port does.
            !self.entries.is_empty()
                && !self
                    .entries
                    .iter()
                    .any(|e| e.port.is_none() && self.name_matches(e, device))
        } else {
            self.listed(device, None)
        }
    }

    /// The names among `devices` NCCL may use, in their order ([`IbHca::selects_device`]).
    pub fn select<'a, I>(&self, devices: I) -> Vec<String>
    where
        I: IntoIterator<Item = &'a str>,
    {
        devices
            .into_iter()
            .filter(|d| self.selects_device(d))
            .map(str::to_owned)
            .collect()
    }

    /// Entries whose name holds whitespace: NCCL matches it literally, which is rarely meant.
    pub fn whitespace(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| e.name.contains(char::is_whitespace))
            .map(|e| e.name.as_str())
            .collect()
    }
}

/// C's `atoi`: leading whitespace, an optional sign, the digits that follow; 0 when there are none.
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |acc, d| {
            acc.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if neg { -n } else { n }
}

/// One device port NCCL printed in its `NET/IB : Using` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsedPort {
    /// NCCL's index (`[0]`).
    pub index: u32,
    /// The device (`mlx5_0`).
    pub device: String,
    /// The port (`1`).
    pub port: u32,
    /// The link (`RoCE`, `IB`), when printed.
    pub link: Option<String>,
}

/// The devices and ports of every `NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:…`
/// line of an NCCL INFO log (each rank prints one), without repeats, in order. A merged (virtual)
/// device `[0]mlx5_0:1/IB+mlx5_1:1/IB` gives both ports.
pub fn net_ib_using(log: &str) -> Vec<UsedPort> {
    let mut out: Vec<UsedPort> = Vec::new();
    for line in log.lines() {
        let Some(i) = line.find("NET/IB : Using") else {
            continue;
        };
        let rest = &line[i + "NET/IB : Using".len()..];
        let rest = rest.split(';').next().unwrap_or("");
        for token in rest.split_whitespace() {
            let Some((index, devs)) = token
                .strip_prefix('[')
                .and_then(|t| t.split_once(']'))
                .and_then(|(n, d)| Some((n.parse::<u32>().ok()?, d)))
            else {
                continue; // `[RO]`, `[GDR]`
            };
            for dev in devs.split('+') {
                let (name_port, link) = match dev.split_once('/') {
                    Some((np, l)) => (np, Some(l.to_owned())),
                    None => (dev, None),
                };
                let Some((device, port)) = name_port
                    .rsplit_once(':')
                    .and_then(|(d, p)| Some((d, p.parse::<u32>().ok()?)))
                else {
                    continue;
                };
                let used = UsedPort {
                    index,
                    device: device.to_owned(),
                    port,
                    link,
                };
                if !out
                    .iter()
                    .any(|u| u.device == used.device && u.port == used.port)
                {
                    out.push(used);
                }
            }
        }
    }
    out
}

/// RDMA device names in a listing: after `ibv_devinfo -l`'s `N HCAs found:` header its indented names;
/// without that header every whitespace-separated word (`ls /sys/class/infiniband`).
pub fn device_names(listing: &str) -> Vec<String> {
    let is_header = |l: &str| {
        let l = l.trim();
        l.ends_with("found:")
            && l.split_whitespace()
                .next()
                .is_some_and(|n| n.parse::<u32>().is_ok())
    };
    let header = listing.lines().any(is_header);
    let words: Vec<String> = if header {
        listing
            .lines()
            .skip_while(|l| !is_header(l))
            .skip(1)
            .take_while(|l| l.starts_with([' ', '\t']) && !l.trim().is_empty())
            .map(|l| l.trim().to_owned())
            .collect()
    } else {
        listing.split_whitespace().map(str::to_owned).collect()
    };
    let mut out: Vec<String> = Vec::new();
    for w in words {
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVS: [&str; 6] = [
        "mlx5_0",
        "mlx5_1",
        "mlx5_4",
        "mlx5_10",
        "mlx5_bond_0",
        "erdma_0",
    ];

    fn sel(v: &str) -> Vec<String> {
        IbHca::parse(v).select(DEVS)
    }

    #[test]
    fn nccls_documented_examples() {
        // `mlx5`: all ports of all cards starting with mlx5.
        assert_eq!(
            sel("mlx5"),
            ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_10", "mlx5_bond_0"]
        );
        assert!(IbHca::parse("mlx5").selects("mlx5_1", 2));
        // `=mlx5_0:1,mlx5_1:1`: port 1 of mlx5_0 and mlx5_1, nothing else.
        let p = IbHca::parse("=mlx5_0:1,mlx5_1:1");
        assert!(p.exact && !p.exclude);
        assert_eq!(
            p.entries[0],
            HcaEntry {
                name: "mlx5_0".into(),
                port: Some(1)
            }
        );
        assert_eq!(sel("=mlx5_0:1,mlx5_1:1"), ["mlx5_0", "mlx5_1"]);
        assert!(p.selects("mlx5_0", 1) && p.selects("mlx5_1", 1));
        assert!(!p.selects("mlx5_0", 2) && !p.selects("mlx5_10", 1));
        // `^=mlx5_1,mlx5_4`: every card but mlx5_1 and mlx5_4.
        assert_eq!(
            sel("^=mlx5_1,mlx5_4"),
            ["mlx5_0", "mlx5_10", "mlx5_bond_0", "erdma_0"]
        );
    }

    #[test]
    fn prefix_exact_and_exclude() {
        // A prefix takes mlx5_10 along with mlx5_1; `=` does not.
        assert_eq!(sel("mlx5_1"), ["mlx5_1", "mlx5_10"]);
        assert_eq!(sel("=mlx5_1"), ["mlx5_1"]);
        assert_eq!(
            sel("^mlx5_1"),
            ["mlx5_0", "mlx5_4", "mlx5_bond_0", "erdma_0"]
        );
        assert_eq!(sel("=mlx5"), Vec::<String>::new());
        // `=^x`: the `^` is a name character.
        let odd = IbHca::parse("=^mlx5_0");
        assert!(odd.exact && !odd.exclude && odd.entries[0].name == "^mlx5_0");
        assert_eq!(sel("erdma_0"), ["erdma_0"]);
    }

    #[test]
    fn ports_as_ncclss_atoi_reads_them() {
        let h = IbHca::parse("mlx5_0:2,mlx5_1:,mlx5_4:1x,mlx5_10:-1");
        let ports: Vec<Option<i64>> = h.entries.iter().map(|e| e.port).collect();
        assert_eq!(ports, [Some(2), Some(0), Some(1), None]);
        assert!(h.selects("mlx5_0", 2) && !h.selects("mlx5_0", 1));
        assert!(!h.selects("mlx5_1", 1)); // port 0 exists on no device
        assert!(h.selects("mlx5_10", 7));
        // Excluding one port leaves the device's other ports in use.
        let ex = IbHca::parse("^=mlx5_0:1");
        assert!(!ex.selects("mlx5_0", 1) && ex.selects("mlx5_0", 2));
        assert!(ex.selects_device("mlx5_0"));
        assert!(!IbHca::parse("^=mlx5_0").selects_device("mlx5_0"));
    }

    #[test]
    fn empty_lists_whitespace_and_stray_commas() {
        assert_eq!(sel("").len(), DEVS.len());
        assert_eq!(sel("^"), Vec::<String>::new());
        assert_eq!(sel(",mlx5_0,,:1"), ["mlx5_0"]);
        // Not trimmed, as in NCCL: ` mlx5_1` is a name no device has.
        let spaced = IbHca::parse("=mlx5_0, mlx5_1");
        assert_eq!(spaced.select(DEVS), ["mlx5_0"]);
        assert_eq!(spaced.whitespace(), [" mlx5_1"]);
    }

    #[test]
    fn the_using_line_gives_devices_and_ports() {
        let log = "n0:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n\
                   n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.77<0>\n\
                   n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB+mlx5_3:1/IB [GDR]\n";
        let used = net_ib_using(log);
        let names: Vec<(&str, u32)> = used.iter().map(|u| (u.device.as_str(), u.port)).collect();
        assert_eq!(
            names,
            [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_2", 1), ("mlx5_3", 1)]
        );
        assert_eq!(used[1].index, 1);
        assert_eq!(used[0].link.as_deref(), Some("RoCE"));
        assert!(net_ib_using("NET/Socket : Using [0]eth0:10.0.0.1<0>\n").is_empty());
    }

    #[test]
    fn listings_of_ibv_devinfo_and_ls() {
        let ibv = "unlimited\nuverbs0\n2 HCAs found:\n\tmlx5_0\n\tmlx5_1\n";
        assert_eq!(device_names(ibv), ["mlx5_0", "mlx5_1"]);
        assert_eq!(
            device_names("mlx5_0\nmlx5_bond_0\n"),
            ["mlx5_0", "mlx5_bond_0"]
        );
        assert!(device_names("0 HCAs found:\n").is_empty());
    }
}
