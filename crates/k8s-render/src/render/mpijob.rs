//! `mpi-job.yaml`: an MPIJob running nccl-tests `all_reduce_perf` across RDMA workers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{ContainerSpec, spread_by_hostname, strings};
use super::{Ctx, RenderError};
use crate::bundle::Bundle;
use crate::crd::{MpiJob, MpiJobSpec, MpiReplicaSpec};

pub(crate) const FILE: &str = "mpi-job.yaml";
/// Where the nccl-tests images used with mpi-operator keep the binaries.
const ALL_REDUCE_PERF: &str = "/opt/nccl_tests/build/all_reduce_perf";

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    bundle.add_manifests(FILE, &[mpi_job(ctx)])?;
    Ok(())
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The launcher's shell script: wait for workers' sshd, then mpirun all_reduce_perf with NCCL pointed
/// at the RDMA devices. MPI's own traffic stays on TCP over the pod interface.
pub(crate) fn launcher_script(ctx: &Ctx<'_>) -> String {
    let v = ctx.values;
    let n = &ctx.profile.nccl;
    let ifname = n.socket_ifname.clone().unwrap_or_else(|| "eth0".to_owned());
    let ranks = v.mpi_workers.saturating_mul(v.slots_for());
    let mut lines: Vec<String> = vec![
        format!("mpirun -np {ranks}"),
        "  --allow-run-as-root".to_owned(),
        "  -bind-to none".to_owned(),
        "  --mca pml ob1".to_owned(),
        "  --mca btl tcp,self".to_owned(),
        format!("  --mca btl_tcp_if_include {ifname}"),
        "  --mca coll_hcoll_enable 0".to_owned(),
        "  --mca coll_ucc_enable 0".to_owned(),
        "  -x LD_LIBRARY_PATH".to_owned(),
    ];
    let debug = if v.nccl_debug.is_empty() {
        "INFO"
    } else {
        v.nccl_debug.as_str()
    };
    lines.push(format!("  -x NCCL_DEBUG={debug}"));
    lines.push(format!("  -x NCCL_SOCKET_IFNAME={ifname}"));
    lines.push(format!("  -x NCCL_IB_HCA={}", n.ib_hca));
    if let Some(gid) = n.gid_index {
        lines.push(format!("  -x NCCL_IB_GID_INDEX={gid}"));
    }
    for (k, val) in &n.extra_env {
        lines.push(format!("  -x {k}={val}"));
    }
    if v.nccl_shm_disable {
        // Forces intra-node traffic through the NIC too: right for a benchmark, wrong for production.
        lines.push("  -x NCCL_SHM_DISABLE=1".to_owned());
    }
    lines.push(format!(
        "  {ALL_REDUCE_PERF} -b {} -e {} -f 2 -g 1 -c 0",
        v.nccl_tests_min_bytes, v.nccl_tests_max_bytes
    ));
    format!("sleep 10\n{}\n", lines.join(" \\\n"))
}

pub(crate) fn mpi_job(ctx: &Ctx<'_>) -> MpiJob {
    let v = ctx.values;
    let name = v.mpijob_name_for(ctx.profile);
    let launcher = ctx.container(ContainerSpec {
        name: "nccl",
        image: v.nccl_tests_image.clone(),
        command: Some(strings(&["/bin/bash", "-c"])),
        args: Some(vec![launcher_script(ctx)]),
        gpus: 0,
        cpu: None,
        memory: None,
        rdma: false,
        nccl: false,
        requests: false,
        extra_env: Vec::new(),
    });
    let launcher_spec = ctx.pod_spec(vec![launcher], false, true);
    let worker = ctx.container(ContainerSpec {
        name: "nccl",
        image: v.nccl_tests_image.clone(),
        command: None,
        args: None,
        gpus: v.gpus_per_worker,
        cpu: None,
        memory: None,
        rdma: true,
        // mpirun exports the NCCL environment to every rank (-x), as the launcher script shows.
        nccl: false,
        requests: false,
        extra_env: Vec::new(),
    });
    let mut worker_spec = ctx.pod_spec(vec![worker], true, true);
    worker_spec.affinity = Some(spread_by_hostname(&[
        ("training.kubeflow.org/job-name", name.as_str()),
        ("training.kubeflow.org/job-role", "worker"),
    ]));
    worker_spec.automount_service_account_token = Some(false);

    let specs = BTreeMap::from([
        (
            "Launcher".to_owned(),
            MpiReplicaSpec {
                replicas: Some(1),
                template: template(ctx, launcher_spec),
            },
        ),
        (
            "Worker".to_owned(),
            MpiReplicaSpec {
                replicas: Some(to_i32(v.mpi_workers)),
                template: template(ctx, worker_spec),
            },
        ),
    ]);
    MpiJob::new(
        ctx.meta(&name, &[]),
        MpiJobSpec {
            slots_per_worker: Some(to_i32(v.slots_for())),
            mpi_replica_specs: specs,
        },
    )
}

fn template(ctx: &Ctx<'_>, spec: PodSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: ctx.meta("", &[]).labels,
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}
