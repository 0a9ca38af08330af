//! k8s-render — typed Kubernetes manifests for RDMA GPU workloads: rendered from a vendor profile, and
//! checked wherever they come from. No I/O beyond reading and writing files.
//!
//! # Render from a profile
//!
//! A [`Profile`] ([`profile`]) holds what differs between RDMA vendors (how a pod gets the device, NCCL
//! settings, userspace packages, known-bad NCCL versions, counters); [`Values`] ([`values`]) hold the
//! per-deployment names and sizes. [`render`] turns both into a [`Bundle`] ([`bundle`]) for one
//! [`System`] ([`system`]: Dockerfile, BuildKit, RayCluster, RDT demo, NCCL check, DRA objects, MPIJob,
//! RDMA test pod); [`Bundle::write_to`] writes it atomically and [`Bundle::to_stream`] prints it for
//! `kubectl apply -f -`. [`crd`] holds the typed RayCluster and MPIJob objects, [`yaml`] the
//! deterministic emitter.
//!
//! # Check any manifest
//!
//! [`manifest`] reads any YAML stream a user hands us into [`manifest::Document`]s that remember every
//! field's line; [`validate`] checks them against the vendored CRD schemas and the Kubernetes API types;
//! [`lint`] finds the RDMA pitfalls (and lints Dockerfiles and scripts); [`sarif`] writes either as a
//! SARIF log. A lint [`Finding`](lint::Finding) and a validation [`Violation`](validate::Violation) say
//! where they are with the same [`Location`] and how bad with the same [`Severity`].
//!
//! The two halves meet in [`DevicePattern`], the profile's device-name glob, which the linter compares
//! `NCCL_IB_HCA` with ([`lint::LintOptions::for_profile`]).
//!
//! ```
//! use std::collections::BTreeMap;
//! use k8s_render::{render, Profile, System, Values};
//! use k8s_render::profile::{DeviceSpec, NcclSettings, PodSettings, RdmaAttachment};
//!
//! let profile = Profile {
//!     name: "my-roce".into(),
//!     description: "mlx5 RoCE through the shared device plugin".into(),
//!     fabric: "RoCE".into(),
//!     short_name: "roce".into(),
//!     rdma: RdmaAttachment::DevicePlugin {
//!         resources: BTreeMap::from([("rdma/hca_shared_devices_a".to_string(), 1)]),
//!     },
//!     gpu_resource: "nvidia.com/gpu".into(),
//!     pod: PodSettings { capabilities: vec!["IPC_LOCK".into()], ..PodSettings::default() },
//!     nccl: NcclSettings {
//!         transport: Default::default(),
//!         ib_hca: Some("mlx5".into()),
//!         socket_ifname: Some("eth0".into()),
//!         gid_index: Some(3),
//!         extra_env: BTreeMap::new(),
//!         pip_package: "nvidia-nccl-cu13".into(),
//!         pin: None,
//!         known_bad: vec![],
//!         bad_reason: None,
//!         known_good: vec![],
//!     },
//!     node_selector: BTreeMap::new(),
//!     node_labels: BTreeMap::new(),
//!     node_label_values: BTreeMap::new(),
//!     node_label_exceptions: vec![],
//!     tolerations: vec![],
//!     userspace: Default::default(),
//!     devices: DeviceSpec {
//!         name_pattern: "mlx5_*".into(),
//!         exclude: vec![],
//!         driver: Some("mlx5_ib".into()),
//!         tx_counter: "ports/1/counters/port_xmit_data".into(),
//!         rx_counter: None,
//!         counter_multiplier: 4,
//!     },
//!     storage_class: None,
//!     notes: vec![],
//!     values: BTreeMap::new(),
//!     instance_types: BTreeMap::new(),
//! };
//! let mut values = Values::default();
//! values.set("worker_replicas", "4")?;
//!
//! let bundle = render(System::RayCluster, &profile, &values)?;
//! let yaml = &bundle.get("ray-cluster-roce.yaml").expect("rendered").contents;
//! assert!(yaml.contains("num-gpus: '0'") || yaml.contains("num-gpus: \"0\""));
//! assert!(yaml.contains("rdma/hca_shared_devices_a"));
//! assert!(yaml.contains("NCCL_IB_GID_INDEX"));
//! assert!(bundle.to_stream().contains("kind: RayCluster"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

// Render from a profile.
pub mod bundle;
pub mod crd;
pub mod profile;
pub mod quote;
mod render;
pub mod system;
pub mod values;
pub mod yaml;

// Check any manifest.
pub mod lint;
pub mod manifest;
mod pods;
pub mod sarif;
pub mod validate;

// Shared by both halves.
pub mod device_pattern;

pub use bundle::{Bundle, BundleError, BundleFile, FileKind};
pub use device_pattern::DevicePattern;
pub use manifest::{Location, Severity};
pub use profile::{ExpectationFacts, Profile, ProfileInvalid, RdmaAttachment};
pub use render::{RenderError, render, render_all, render_systems};
pub use system::{System, UnknownSystem};
pub use values::{Values, ValuesError};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
