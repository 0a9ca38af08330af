//! `mpi-job.yaml`: an MPIJob running nccl-tests `all_reduce_perf` across RDMA workers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{ContainerSpec, spread_by_hostname, strings};
use super::{Ctx, RenderError};
use crate::bundle::Bundle;
use crate::crd::{MpiJob, MpiJobSpec, MpiReplicaSpec, RunPolicy};
use crate::quote::Unsafe;
use crate::quote::shell::{self, word};
use crate::values::ValuesError;

pub(crate) const FILE: &str = "mpi-job.yaml";

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    // An empty `image:` is accepted by the API server and fails only at pull time on every node.
    if ctx.values.nccl_tests_image.trim().is_empty() {
        return Err(ValuesError::Missing {
            key: "nccl_tests_image".to_owned(),
            system: "mpijob".to_owned(),
            fix: "pass `--set nccl_tests_image=IMAGE`, an image with nccl-tests' all_reduce_perf, \
                  mpirun and sshd built for this fabric (no vendor's registry is a default)"
                .to_owned(),
        }
        .into());
    }
    bundle.add_manifests(FILE, &[mpi_job(ctx)?])?;
    Ok(())
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The launcher's shell script: wait for workers' sshd, then mpirun all_reduce_perf with NCCL pointed
/// at the RDMA devices. MPI's own traffic stays on TCP over the pod interface.
///
/// Every value is one shell word ([`quote::shell::word`]): a `--set` or a profile field can change an
/// argument, never the script. An environment name that is not a shell name is refused.
pub(crate) fn launcher_script(ctx: &Ctx<'_>) -> Result<String, RenderError> {
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
    ];
    // An exclusion list (`^docker,lo,veth`) is NCCL syntax, not Open MPI's: MPI keeps the
    // image's own interface choice then (OMPI_MCA_btl_tcp_if_exclude in the EFA images).
    if !ifname.starts_with('^') {
        lines.push(format!("  --mca btl_tcp_if_include {}", word(&ifname)));
    }
    let transport = ctx.transport_env();
    // The plugin's own LD_LIBRARY_PATH (gIB: /usr/local/nvidia/lib64) replaces the launcher's.
    let ld_path = match transport.iter().find(|(k, _)| k == "LD_LIBRARY_PATH") {
        Some((_, v)) => format!("  -x {}", export(ctx, "LD_LIBRARY_PATH", v)?),
        None => "  -x LD_LIBRARY_PATH".to_owned(),
    };
    lines.extend([
        "  --mca coll_hcoll_enable 0".to_owned(),
        "  --mca coll_ucc_enable 0".to_owned(),
        ld_path,
    ]);
    let debug = if v.nccl_debug.is_empty() {
        "INFO"
    } else {
        v.nccl_debug.as_str()
    };
    lines.push(format!("  -x {}", export(ctx, "NCCL_DEBUG", debug)?));
    lines.push(format!(
        "  -x {}",
        export(ctx, "NCCL_SOCKET_IFNAME", &ifname)?
    ));
    for (k, val) in transport {
        // LD_LIBRARY_PATH is exported as the launcher sees it (above); the socket interface too.
        if k == "NCCL_SOCKET_IFNAME" || k == "LD_LIBRARY_PATH" || k == "NCCL_IB_DISABLE" {
            continue;
        }
        lines.push(format!("  -x {}", export(ctx, &k, &val)?));
    }
    if v.nccl_shm_disable {
        // Forces intra-node traffic through the NIC too: right for a benchmark, wrong for production.
        lines.push("  -x NCCL_SHM_DISABLE=1".to_owned());
    }
    lines.push(format!(
        "  {} -b {} -e {} -f 2 -g 1 -c 0",
        word(&v.all_reduce_perf),
        word(&v.nccl_tests_min_bytes.to_string()),
        word(&v.nccl_tests_max_bytes.to_string())
    ));
    Ok(format!("sleep 10\n{}\n", lines.join(" \\\n")))
}

/// `NAME=value` for `mpirun -x`, or an error naming the profile's bad variable name.
fn export(ctx: &Ctx<'_>, name: &str, value: &str) -> Result<String, RenderError> {
    shell::assignment(name, value).ok_or_else(|| RenderError::Unsafe {
        profile: ctx.profile.name.clone(),
        problem: Unsafe {
            field: format!("nccl environment variable `{name}`"),
            value: name.to_owned(),
            reason: "it is not a shell variable name".to_owned(),
            fix: "use letters, digits and `_`, not starting with a digit".to_owned(),
        },
    })
}

pub(crate) fn mpi_job(ctx: &Ctx<'_>) -> Result<MpiJob, RenderError> {
    let v = ctx.values;
    let name = v.mpijob_name_for(ctx.profile);
    let launcher = ctx.container(ContainerSpec {
        name: "nccl",
        image: v.nccl_tests_image.clone(),
        command: Some(strings(&["/bin/bash", "-c"])),
        args: Some(vec![launcher_script(ctx)?]),
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
                // A failed benchmark is not run again: with OnFailure the kubelet restarts the launcher
                // until the Job gives up and deletes it, and its log (the failure's evidence) goes with it.
                restart_policy: Some("Never".to_owned()),
                template: template(ctx, launcher_spec, false),
            },
        ),
        (
            "Worker".to_owned(),
            MpiReplicaSpec {
                replicas: Some(to_i32(v.mpi_workers)),
                restart_policy: None,
                template: template(ctx, worker_spec, true),
            },
        ),
    ]);
    Ok(MpiJob::new(
        ctx.meta(&name, &[]),
        MpiJobSpec {
            slots_per_worker: Some(to_i32(v.slots_for())),
            run_policy: Some(RunPolicy {
                backoff_limit: Some(0),
            }),
            mpi_replica_specs: specs,
        },
    ))
}

fn template(ctx: &Ctx<'_>, spec: PodSpec, rdma: bool) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: ctx.meta("", &[]).labels,
            annotations: if rdma { ctx.pod_annotations() } else { None },
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}
