//! Which systems read a `--set` key ([`Key::systems`](super::Key)), and the refusal of a key none of
//! the systems being rendered reads (`render mpijob --set worker_replicas=5` would change nothing).

use std::collections::BTreeSet;

use super::{Key, Values, ValuesError};
use crate::System;

impl Values {
    /// The keys any of `systems` reads, in [`Values::KEYS`] order.
    pub fn keys_read_by(systems: &[System]) -> Vec<&'static Key> {
        Values::KEYS
            .iter()
            .filter(|k| k.systems.iter().any(|s| systems.contains(s)))
            .collect()
    }

    /// `Ok` when one of `systems` reads `key`; else an error naming the key, what reads it, the keys
    /// these systems do read and the nearest of them (by spelling, else by meaning: `worker_replicas`
    /// for an MPIJob is `mpi_workers`).
    pub fn check_read_by(key: &str, systems: &[System]) -> Result<(), ValuesError> {
        let Some(spec) = Values::key(key) else {
            return Err(super::unknown_key(key.trim()));
        };
        if spec.systems.iter().any(|s| systems.contains(s)) {
            return Ok(());
        }
        let readable = Values::keys_read_by(systems);
        Err(ValuesError::NotRead {
            key: key.trim().to_owned(),
            systems: names(systems),
            read_by: names(spec.systems),
            hint: nearest(spec, &readable).map(str::to_owned),
            keys: readable
                .iter()
                .map(|k| k.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

fn names(systems: &[System]) -> String {
    systems
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The readable key spelled most like `spec`'s, else the one of the same kind whose meaning shares the
/// most words (at least two) with it.
fn nearest(spec: &Key, readable: &[&'static Key]) -> Option<&'static str> {
    if let Some(k) = crate::validate::suggest(spec.name, readable.iter().map(|k| k.name)) {
        return Some(k);
    }
    let words = |s: &str| -> BTreeSet<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| w.len() >= 4)
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let mine = words(spec.about);
    readable
        .iter()
        .filter(|k| std::mem::discriminant(&k.kind) == std::mem::discriminant(&spec.kind))
        .map(|k| (words(k.about).intersection(&mine).count(), k.name))
        .filter(|(shared, _)| *shared >= 2)
        .max_by_key(|(shared, _)| *shared)
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_no_rendered_system_reads_is_refused_with_the_nearest() {
        assert!(Values::check_read_by("mpi_workers", &[System::MpiJob]).is_ok());
        assert!(Values::check_read_by("node_selector.x/y", &[System::MpiJob]).is_ok());
        let e = Values::check_read_by("worker_replicas", &[System::MpiJob]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("`worker_replicas`")
                && msg.contains("did you mean `mpi_workers`")
                && msg.contains("raycluster"),
            "{msg}"
        );
        let e = Values::check_read_by("size_mb", &[System::RdtDemo]).unwrap_err();
        assert!(e.to_string().contains("size_mib"), "{e}");
    }
}
