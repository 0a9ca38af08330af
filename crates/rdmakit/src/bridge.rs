//! The profile bridges: what a vendor profile (k8s-render's [`Profile`]) says, as the inputs of probe's
//! judgements and k8s-render's lint, in one place for the CLI (`rdmakit bench`, `rdmakit lint`) and the
//! Rhai host (`probe::`, `bench::`, `lint::`).

use k8s_render::Profile;
use k8s_render::lint::LintOptions;
use probe::counters::CounterSpec;
use probe::expect::{Expectation, ExpectationInputs};
use probe::judge::NcclPolicy;

/// What `profile` says about NCCL versions, for probe's judgement.
pub fn nccl_policy(profile: &Profile) -> NcclPolicy {
    let n = &profile.nccl;
    NcclPolicy {
        profile: profile.name.clone(),
        fabric: profile.fabric.clone(),
        pip_package: n.pip_package.clone(),
        pin: n.pin.clone(),
        known_bad: n.known_bad.clone(),
        bad_reason: n.bad_reason.clone(),
        known_good: n.known_good.clone(),
    }
}

/// The counter `profile` reads on its devices, for probe's summed delta.
pub fn counter_spec(profile: &Profile) -> CounterSpec {
    let d = &profile.devices;
    CounterSpec {
        name_pattern: d.name_pattern.to_string(),
        exclude: d.exclude.iter().map(ToString::to_string).collect(),
        tx_counter: d.tx_counter.clone(),
        counter_multiplier: d.counter_multiplier,
    }
}

/// Lint options: the profile's device pattern, device-plugin resources, userspace packages, APT
/// source and GID index ([`LintOptions::for_profile`]); without a profile, only the node count and
/// whether the bundle is a benchmark.
pub fn lint_options(profile: Option<&Profile>, nodes: Option<u32>, benchmark: bool) -> LintOptions {
    match profile {
        Some(p) => LintOptions::for_profile(p, nodes, benchmark),
        None => LintOptions {
            rdma_nodes: nodes,
            benchmark,
            ..Default::default()
        },
    }
}

/// Why a profile gives no expectation inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpectationError {
    /// The profile lacks a fact the model needs (an unknown instance type, no `nic_gbps`).
    #[error("{0}")]
    Facts(String),
    /// k8s-render's facts and probe's inputs disagree on their shape (a bug between the two crates).
    #[error("its expectation facts do not fit probe's model inputs ({0})")]
    Shape(String),
}

/// The inputs of probe's rate model ([`probe::expect::expect`]) from the facts `profile` states for
/// `instance_type` (k8s-render's `ExpectationFacts` and probe's `ExpectationInputs` share their field
/// names: the serde round trip is the conversion, and a field one side drops fails here).
pub fn expectation_inputs(
    profile: &Profile,
    instance_type: Option<&str>,
) -> Result<ExpectationInputs, ExpectationError> {
    let facts = profile
        .expectation_facts(instance_type)
        .map_err(|e| ExpectationError::Facts(e.to_string()))?;
    serde_json::to_value(&facts)
        .and_then(serde_json::from_value)
        .map_err(|e| ExpectationError::Shape(e.to_string()))
}

/// A measured one-NIC RDMA WRITE rate (GiB/s) the model can take: finite and positive.
pub fn is_nic_write_rate(gib_s: f64) -> bool {
    gib_s.is_finite() && gib_s > 0.0
}

/// The rate a profile's instance type should reach (`probe::expect`), from the profile's facts and, when
/// measured, one NIC's RDMA WRITE bandwidth (GiB/s, `ib_write_bw`). The error names what the profile lacks.
pub fn profile_expectation(
    profile: &Profile,
    instance_type: Option<&str>,
    nic_write_gib_s: Option<f64>,
) -> Result<Expectation, String> {
    let mut inputs = expectation_inputs(profile, instance_type)
        .map_err(|e| format!("profile {}: {e}", profile.name))?;
    if let Some(w) = nic_write_gib_s {
        if !is_nic_write_rate(w) {
            return Err(format!(
                "nic_write_gib_s {w}: must be a positive rate in GiB/s (ib_write_bw's BW average)"
            ));
        }
        inputs.nic_write_gib_s = Some(w);
    }
    probe::expect::expect(&inputs).map_err(|e| format!("profile {}: {e}", profile.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erdma() -> Profile {
        crate::profiles::load("aliyun-erdma").unwrap()
    }

    #[test]
    fn the_profiles_nccl_and_counter_fields_reach_probes_judgements() {
        let p = erdma();
        let c = probe::judge::nccl_version(&nccl_policy(&p), "22809\n");
        assert_eq!(c.verdict, probe::Verdict::Fail);
        assert!(c.detail.contains("known bad on eRDMA"), "{}", c.detail);
        assert!(c.fix.unwrap_or_default().contains(
            "nvidia-nccl-cu13==2.30.7 in the image (rdmakit render image --profile aliyun-erdma"
        ));
        let spec = counter_spec(&crate::profiles::load("mellanox-ib").unwrap());
        assert_eq!(spec.counter_multiplier, 4);
        let d = probe::counters::summed_delta(&spec, &[0], &[100]).unwrap();
        assert_eq!(d.tx_bytes, Some(400));
    }

    #[test]
    fn a_profiles_expectation_takes_its_facts_and_a_measured_write() {
        let e = profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), Some(20.4)).unwrap();
        assert_eq!(e.path, probe::expect::Path::Staged);
        assert_eq!(e.inputs.nic_line_gbps, 190.0);
        assert_eq!(e.inputs.nics_per_node, 2);
        assert!(!e.inputs.gpudirect);
        assert_eq!(e.inputs.pcie_gen, 5);
        assert_eq!(e.inputs.nic_write_gib_s, Some(20.4));
        assert_eq!(e.one_nic_gib_s, 20.4);
        // Without a measured write the NIC is its line rate x 0.9.
        let line = profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), None).unwrap();
        assert!((line.one_nic_gib_s - probe::expect::gbps_to_gib_s(190.0) * 0.9).abs() < 1e-9);
        // What the profile cannot give is named.
        let e = profile_expectation(&erdma(), Some("ecs.nope"), None).unwrap_err();
        assert!(e.contains("ecs.nope") && e.contains("aliyun-erdma"), "{e}");
        let dra = crate::profiles::load("aliyun-erdma-dra").unwrap();
        let e = profile_expectation(&dra, None, None).unwrap_err();
        assert!(e.contains("nic_gbps"), "{e}");
        let e =
            profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), Some(-1.0)).unwrap_err();
        assert!(e.contains("nic_write_gib_s -1"), "{e}");
        assert!(matches!(
            expectation_inputs(&erdma(), Some("ecs.nope")),
            Err(ExpectationError::Facts(_))
        ));
    }
}
