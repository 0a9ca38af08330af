//! k8s-render — typed Kubernetes manifests for RDMA GPU workloads, rendered from a vendor profile.
//!
//! A [`Profile`] holds what differs between RDMA vendors (how a pod gets the device, NCCL settings,
//! userspace packages, known-bad NCCL versions, counters); [`Values`] hold the per-deployment names and
//! sizes. [`render`] turns both into a [`Bundle`] for one [`System`] (Dockerfile, BuildKit, RayCluster,
//! RDT demo, NCCL check, DRA objects, MPIJob, RDMA test pod); [`Bundle::write_to`] writes it atomically and
//! [`Bundle::to_stream`] prints it for `kubectl apply -f -`.
//!
//! Module ownership while the crate is being built: `manifest`, `validate` and `lint` read and check
//! manifests (any YAML a user hands us); everything else renders them from a vendor `Profile`.
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

pub mod bundle;
pub mod crd;
mod crossref;
pub mod lint;
pub mod manifest;
mod pods;
pub mod profile;
mod render;
pub mod sarif;
pub mod system;
pub mod validate;
pub mod values;
pub mod yaml;

pub use bundle::{Bundle, BundleError, BundleFile, FileKind};
pub use profile::{ExpectationFacts, Profile, ProfileInvalid, RdmaAttachment};
pub use render::{RenderError, render, render_all, render_systems};
pub use system::{System, UnknownSystem};
pub use values::{Values, ValuesError};
