//! What `rdmakit check` reads inside each check pod: one exec of [`DUMP_SCRIPT`] (POSIX `sh`, no tools
//! beyond `cat`/`ls`, so it runs in any workload image), whose stdout is the pod's sysfs/procfs files and a
//! few commands' output in `### file|dir|cmd PATH` sections. [`Dump::write_tree`] lays the files out under
//! a root, so the same readers that probe a host ([`crate::facts`]) read the pod: one parser for both.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};

/// The version of the section format the script prints on its first line.
pub const DUMP_FORMAT: &str = "rdmakit-check-dump 1";

/// The script run in each check pod (`sh -c`). Prints files (`### file P`), directory listings
/// (`### dir P`) and command output (`### cmd NAME`), then `### end`. Files are read and directories
/// listed with shell builtins (`read`, globs), not one `cat`/`ls` process each: a port's GID table has up to
/// 256 entries (1,024 on rxe), eight HCAs make thousands, and a process each took past a minute in the
/// soft-RoCE VM. Only the environment variables that
/// steer the RDMA path (`NCCL_*`, `GLOO_*`, `UCX_*`, `FI_*`, `TORCH_NCCL_*`) are printed: never the rest,
/// which may hold credentials.
pub const DUMP_SCRIPT: &str = r####"echo "### rdmakit-check-dump 1"
f() { for p in "$@"; do [ -f "$p" ] && { echo "### file $p"; { while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done < "$p"; } 2>/dev/null; }; done; }
d() { for p in "$@"; do [ -d "$p" ] && { echo "### dir $p"; for e in "$p"/*; do [ -e "$e" ] || [ -L "$e" ] && echo "${e##*/}"; done; }; done; }
f /proc/self/status /proc/self/limits
d /dev/infiniband /sys/class/infiniband /sys/class/net
for dev in /sys/class/infiniband/*; do
  [ -d "$dev" ] || continue
  f "$dev/node_guid" "$dev/node_type" "$dev/fw_ver" "$dev/parent" "$dev/device/vendor" "$dev/device/device" "$dev/device/numa_node"
  d "$dev/ports"
  for port in "$dev"/ports/*; do
    [ -d "$port" ] || continue
    f "$port/state" "$port/phys_state" "$port/link_layer" "$port/rate"
    d "$port/gids" "$port/hw_counters" "$port/counters"
    for g in "$port"/gids/*; do
      v=; { IFS= read -r v < "$g"; } 2>/dev/null
      case "$v" in 0000:0000:0000:0000:0000:0000:0000:0000|"") continue;; esac
      i=${g##*/}
      f "$g" "$port/gid_attrs/types/$i" "$port/gid_attrs/ndevs/$i"
    done
  done
done
for n in /sys/class/net/*; do f "$n/operstate" "$n/mtu" "$n/address"; done
echo "### cmd ulimit-l"; ulimit -l 2>&1
echo "### cmd shm"; df -k /dev/shm 2>&1
echo "### cmd addresses"; ip -o addr show 2>/dev/null || hostname -i 2>&1
echo "### cmd env"; env | while IFS= read -r l; do case "$l" in NCCL_*|GLOO_*|UCX_*|FI_*|TORCH_NCCL_*) echo "$l";; esac; done
echo "### cmd gpus"; nvidia-smi -L 2>&1
echo "### cmd topo"; nvidia-smi topo -m 2>&1
echo "### cmd libraries"; for l in /usr/lib/x86_64-linux-gnu/* /usr/local/lib/* /usr/lib64/* /opt/amazon/efa/lib/* /opt/amazon/ofi-nccl/lib/*; do case "${l##*/}" in libnccl*|libibverbs*|*efa*|libfabric*) echo "${l##*/}";; esac; done
echo "### end"
"####;

/// One run of [`DUMP_SCRIPT`], split into its sections.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dump {
    /// The format line the script printed first (`None`: not our script's output).
    pub format: Option<String>,
    /// File contents by absolute path (trailing newlines trimmed).
    pub files: BTreeMap<String, String>,
    /// Directory listings by absolute path.
    pub dirs: BTreeMap<String, Vec<String>>,
    /// Command output by section name (`ulimit-l`, `shm`, `addresses`, `env`, `gpus`, `topo`, `libraries`).
    pub cmds: BTreeMap<String, String>,
    /// Whether `### end` arrived (false: the exec was cut short).
    pub complete: bool,
}

enum Section {
    File(String),
    Dir(String),
    Cmd(String),
}

impl Dump {
    /// Splits the script's stdout. Text before the format line (a login banner) and unknown section kinds
    /// are ignored; a path that is not absolute or climbs with `..` is dropped (it would escape the
    /// root [`Dump::write_tree`] writes under).
    pub fn parse(stdout: &str) -> Dump {
        let mut out = Dump::default();
        let mut current: Option<Section> = None;
        let mut body = String::new();
        for line in stdout.lines() {
            let line = line.trim_end_matches('\r');
            let Some(head) = line.strip_prefix("### ") else {
                if current.is_some() {
                    body.push_str(line);
                    body.push('\n');
                }
                continue;
            };
            out.flush(current.take(), std::mem::take(&mut body));
            let (kind, arg) = head.split_once(' ').unwrap_or((head, ""));
            current = match kind {
                "rdmakit-check-dump" => {
                    out.format = Some(head.to_owned());
                    None
                }
                "end" => {
                    out.complete = true;
                    None
                }
                "file" if safe_path(arg) => Some(Section::File(arg.to_owned())),
                "dir" if safe_path(arg) => Some(Section::Dir(arg.to_owned())),
                "cmd" => Some(Section::Cmd(arg.to_owned())),
                _ => None,
            };
        }
        out.flush(current, body);
        out
    }

    fn flush(&mut self, section: Option<Section>, body: String) {
        match section {
            Some(Section::File(p)) => {
                self.files.insert(p, body.trim_end_matches('\n').to_owned());
            }
            Some(Section::Dir(p)) => {
                let entries = body
                    .lines()
                    .map(str::trim)
                    .filter(|e| !e.is_empty() && !e.contains('/') && *e != "." && *e != "..")
                    .map(str::to_owned)
                    .collect();
                self.dirs.insert(p, entries);
            }
            Some(Section::Cmd(name)) => {
                self.cmds
                    .insert(name, body.trim_end_matches('\n').to_owned());
            }
            None => {}
        }
    }

    /// A command's output, if its section arrived.
    pub fn cmd(&self, name: &str) -> Option<&str> {
        self.cmds.get(name).map(String::as_str)
    }

    /// Writes the dumped files and directories under `root` (`/sys/class/net/eth0/mtu` becomes
    /// `root/sys/class/net/eth0/mtu`; a listed entry with no file of its own becomes an empty file), so the
    /// [`crate::facts`] readers read the pod as they read a host.
    pub fn write_tree(&self, root: &Path) -> Result<()> {
        let at = |p: &str| root.join(p.trim_start_matches('/'));
        for (dir, entries) in &self.dirs {
            let d = at(dir);
            std::fs::create_dir_all(&d).map_err(|e| ProbeError::io(&d, e))?;
            for e in entries {
                let child = format!("{dir}/{e}");
                let p = d.join(e);
                let is_dir = self.dirs.contains_key(&child)
                    || self
                        .files
                        .keys()
                        .any(|f| f.starts_with(&format!("{child}/")));
                if is_dir {
                    std::fs::create_dir_all(&p).map_err(|e| ProbeError::io(&p, e))?;
                } else if !self.files.contains_key(&child) && !p.exists() {
                    std::fs::write(&p, "").map_err(|e| ProbeError::io(&p, e))?;
                }
            }
        }
        for (file, text) in &self.files {
            let p = at(file);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| ProbeError::io(parent, e))?;
            }
            std::fs::write(&p, text).map_err(|e| ProbeError::io(&p, e))?;
        }
        Ok(())
    }
}

/// An absolute path without `..` or empty components that stays under a root when joined.
fn safe_path(p: &str) -> bool {
    p.starts_with('/')
        && p.len() > 1
        && p[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sections_split_and_paths_stay_under_the_root() {
        let out = "banner\n### rdmakit-check-dump 1\n### dir /sys/class/net\neth0\nlo\n\
                   ### file /sys/class/net/eth0/mtu\n9000\n\n### file /../etc/passwd\nroot\n\
                   ### cmd shm\nFilesystem 1K-blocks\nshm 65536\n### end\n";
        let d = Dump::parse(out);
        assert_eq!(d.format.as_deref(), Some(DUMP_FORMAT));
        assert!(d.complete);
        assert_eq!(d.dirs["/sys/class/net"], ["eth0", "lo"]);
        assert_eq!(d.files["/sys/class/net/eth0/mtu"], "9000");
        assert!(!d.files.keys().any(|k| k.contains("passwd")), "{d:?}");
        assert!(d.cmd("shm").unwrap().contains("65536"));
        let tmp = tempfile::tempdir().unwrap();
        d.write_tree(tmp.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("sys/class/net/eth0/mtu")).unwrap(),
            "9000"
        );
        assert!(tmp.path().join("sys/class/net/lo").exists());
        let cut = Dump::parse("### rdmakit-check-dump 1\n### file /proc/self/status\nCapEff:\t0\n");
        assert!(!cut.complete);
        assert_eq!(cut.files["/proc/self/status"], "CapEff:\t0");
    }
}
