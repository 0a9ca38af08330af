//! The grammars `--set` values are checked against when parsed: image references (the OCI distribution
//! reference grammar), Kubernetes label keys and values, DNS-1123 names, nccl-tests byte sizes, absolute
//! paths, executables, network interface lists and NCCL_DEBUG levels. Each is a plain predicate; the
//! error text is the caller's ([`super::ValueKind::expected`]).

/// `[a-z0-9]+ ([_.]|__|-+) [a-z0-9]+ ...`: one path component of an image repository.
fn is_path_component(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !is_lower_alnum(b[0]) || !is_lower_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_lower_alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__`, or one or more `-`, each followed by an alphanumeric.
        let start = i;
        match b[i] {
            b'.' => i += 1,
            b'_' => i += if b.get(i + 1) == Some(&b'_') { 2 } else { 1 },
            b'-' => {
                while b.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
        if i == start || !b.get(i).copied().is_some_and(is_lower_alnum) {
            return false;
        }
    }
    true
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `host[:port]`: dot-separated components of letters, digits and inner `-`, or `[IPv6]`.
fn is_domain(s: &str) -> bool {
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, after)) => {
                if v6.is_empty() || !v6.bytes().all(|c| c.is_ascii_hexdigit() || c == b':') {
                    return false;
                }
                match after {
                    "" => return true,
                    a => ("", a.strip_prefix(':').or(Some("x"))),
                }
            }
            None => return false,
        },
        None => match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        },
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit())) {
        return false;
    }
    if s.starts_with('[') {
        return true;
    }
    !host.is_empty()
        && host.split('.').all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        })
}

/// A repository path without a registry: `ray-llm`, `pai/nccl-tests`.
pub fn is_repository_path(s: &str) -> bool {
    !s.is_empty() && s.len() <= 255 && s.split('/').all(is_path_component)
}

/// An image name without tag or digest: `[domain/]path`, the domain recognised as Docker does (the
/// first component has a `.` or `:`, or is `localhost`): `registry.example.com/me`, `busybox`.
pub fn is_image_name(s: &str) -> bool {
    if s.is_empty() || s.len() > 255 {
        return false;
    }
    match s.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first != first.to_lowercase() =>
        {
            is_domain(first) && is_repository_path(rest)
        }
        _ => is_repository_path(s),
    }
}

/// A registry (and optional repository) images are pushed to: an image name, or a bare domain
/// (`registry.example.com`, `localhost:5000`).
pub fn is_registry(s: &str) -> bool {
    let s = s.strip_suffix('/').unwrap_or(s);
    is_image_name(s)
        || (!s.contains('/') && (s.contains(['.', ':']) || s == "localhost") && is_domain(s))
}

/// A full image reference: `name[:tag][@digest]` (`rayproject/ray-llm:2.57.0-py312-cu130`,
/// `host:5000/ns/img:1.0@sha256:<64 hex>`).
pub fn is_image_reference(s: &str) -> bool {
    let (rest, digest) = match s.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (s, None),
    };
    if let Some(d) = digest
        && !is_digest(d)
    {
        return false;
    }
    // A tag is after the last `:` that follows the last `/` (a `:` before it is a port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    tag.is_none_or(is_tag) && is_image_name(name)
}

/// `[\w][\w.-]{0,127}`.
fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// `algorithm:hex`, the algorithm `[A-Za-z][A-Za-z0-9]*` joined by `+.-_`, at least 32 hex digits.
fn is_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['+', '.', '-', '_']).all(|c| {
        c.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && c.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// A DNS-1123 label: lowercase letters, digits and inner `-`, at most 63 (the profile checks' rule).
pub fn is_dns_label(s: &str) -> bool {
    crate::profile::is_dns_label(s)
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label value as the API server checks it: empty, or at most 63 of letters, digits, `-`, `_`, `.`,
/// starting and ending with a letter or digit.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, 1 to 63 characters: the name part of a label key, and
/// a non-empty label value (the one grammar both `--set` values and `validate` use).
pub(crate) fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain, the name as a label value (non-empty).
pub fn is_label_key(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

/// An nccl-tests size (`-b`/`-e`): a whole number of bytes with an optional `K`, `M` or `G`
/// (either case), as its `parsesize` reads it. Returns the bytes.
pub fn byte_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if num.is_empty() || !num.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// An absolute path: starts with `/`, no control characters (NUL, newline, tab ...), at most 4096.
pub fn is_absolute_path(s: &str) -> bool {
    s.starts_with('/') && s.len() <= 4096 && !s.chars().any(char::is_control)
}

/// A program to run: a path or a bare name of letters, digits and `. _ - + /` only (no shell
/// metacharacters, no spaces), at most 4096.
pub fn is_executable(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 4096
        && !s.starts_with('-')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'+' | b'/'))
        && !s.ends_with('/')
}

/// A Linux interface name: 1 to 15 bytes, no `/`, `:`, whitespace or control characters, not `.`/`..`.
pub fn is_interface_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_graphic() && !matches!(c, b'/' | b':'))
        && !s.contains([
            '$', '`', '\'', '"', '\\', ';', '&', '|', '<', '>', '(', ')', '*', '?',
        ])
}

/// `NCCL_SOCKET_IFNAME`'s grammar: an optional `^` (exclude) or `=` (exact), then a comma-separated
/// list of interface names or prefixes (`eth0`, `^docker,lo`, `=ens1f0`).
pub fn is_socket_ifname(s: &str) -> bool {
    let list = s
        .strip_prefix("^=")
        .or_else(|| s.strip_prefix('^'))
        .or_else(|| s.strip_prefix('='))
        .unwrap_or(s);
    !list.is_empty() && list.split(',').all(is_interface_name)
}

/// The levels NCCL_DEBUG accepts (NCCL compares them ignoring case).
pub const NCCL_DEBUG_LEVELS: &[&str] = &["VERSION", "WARN", "INFO", "ABORT", "TRACE"];

/// A level NCCL_DEBUG accepts, or empty (not set).
pub fn is_nccl_debug(s: &str) -> bool {
    s.is_empty() || NCCL_DEBUG_LEVELS.iter().any(|l| l.eq_ignore_ascii_case(s))
}

/// A version string: letters, digits and `. _ + -`, starting with a letter or digit, at most 128
/// (`2.30.7`, `2.57.0`, `v1.14.0`, `1.16.3-aws`).
pub fn is_version(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'+' | b'-'))
}

/// A value as an error message shows it: control characters, quotes and backslashes escaped (a newline
/// is `\n`), so the message is one line and shows exactly what was given.
pub fn escaped(s: &str) -> String {
    s.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_follow_the_distribution_grammar() {
        for ok in [
            "busybox",
            "rayproject/ray-llm:2.57.0-py312-cu130",
            "moby/buildkit:v0.23.2",
            "public.ecr.aws/hpc-cloud/nccl-tests:latest",
            "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/nccl-tests:12.2.2-cudnn8-devel-ubuntu22.04-nccl2.19.3-1-85f9143",
            "localhost:5000/a/b",
            "host:8443/ns/img:1.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a__b/c-d---e/f.g:tag",
            "[::1]:5000/img",
        ] {
            assert!(is_image_reference(ok), "{ok}");
        }
        for bad in [
            "",
            "Busybox",
            "r.example.com/me\nRUN echo injected",
            "a b",
            "img:",
            "img:-tag",
            "img@sha256:short",
            "-img",
            "a//b",
            "a/b/",
            "a_-b",
            "a:b:c",
            "$(id)",
        ] {
            assert!(!is_image_reference(bad), "{bad:?}");
        }
        assert!(is_registry("registry.example.com/your-namespace"));
        assert!(is_registry("registry.example.com"));
        assert!(is_registry("localhost:5000"));
        assert!(is_registry("r.example.com/me/"));
        assert!(!is_registry("r.example.com/me\nRUN echo injected"));
        assert!(!is_registry("r.example.com/me:tag"));
        assert!(is_repository_path("ray-llm"));
        assert!(!is_repository_path("Ray"));
    }

    #[test]
    fn labels_and_names() {
        for ok in ["", "gpu", "NVIDIA-L20", "p5.48xlarge", "a_b-c.d"] {
            assert!(is_label_value(ok), "{ok:?}");
        }
        for bad in ["bar; baz", "-a", "a-", "a b", &"x".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
        for ok in [
            "node.kubernetes.io/instance-type",
            "aliyun.accelerator/nvidia_name",
            "pool",
        ] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in ["", "/pool", "Example.com/pool", "a/b/c", "a/", "po ol"] {
            assert!(!is_label_key(bad), "{bad:?}");
        }
        assert!(is_dns_label("ray-erdma-cluster"));
        assert!(!is_dns_label("Ray_Cluster"));
        assert!(is_dns_subdomain("alicloud-disk-essd"));
        assert!(is_dns_subdomain("a.b"));
        assert!(!is_dns_subdomain("a..b"));
    }

    #[test]
    fn sizes_paths_programs() {
        assert_eq!(byte_size("512M"), Some(512 << 20));
        assert_eq!(byte_size("8G"), Some(8 << 30));
        assert_eq!(byte_size("8"), Some(8));
        assert_eq!(byte_size("1k"), Some(1024));
        for bad in ["", "M", "8 G", "8GB", "-1", "1.5G", "$(id)"] {
            assert_eq!(byte_size(bad), None, "{bad:?}");
        }
        assert!(is_absolute_path("/tmp/nccl-%h-%p.log"));
        assert!(!is_absolute_path("tmp/x"));
        assert!(!is_absolute_path("/tmp/x\nid"));
        assert!(!is_absolute_path("/tmp/\0x"));
        assert!(is_executable("/opt/nccl_tests/build/all_reduce_perf"));
        assert!(is_executable("all_reduce_perf"));
        for bad in ["/opt/x;id;#", "a b", "$(id)", "a|b", "-x", "", "/opt/"] {
            assert!(!is_executable(bad), "{bad:?}");
        }
    }

    #[test]
    fn interfaces_and_nccl_debug() {
        for ok in ["eth0", "^docker,lo", "=ens1f0", "eth", "bond0,eth1"] {
            assert!(is_socket_ifname(ok), "{ok}");
        }
        for bad in [
            "",
            "^",
            "eth0;id",
            "a,,b",
            "waytoolonginterfacename",
            "e th",
            "$(x)",
        ] {
            assert!(!is_socket_ifname(bad), "{bad:?}");
        }
        for ok in ["", "INFO", "warn", "TRACE", "VERSION", "ABORT"] {
            assert!(is_nccl_debug(ok), "{ok}");
        }
        assert!(!is_nccl_debug("INFO $(touch P)"));
        assert!(!is_nccl_debug("DEBUG"));
        assert_eq!(escaped("a\nb"), "a\\nb");
    }
}
