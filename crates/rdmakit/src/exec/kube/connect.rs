//! Connect: find the kubeconfig the way kubectl does (or the in-cluster service account) and build the
//! client, with kube's own retries off (the executor's [`super::RetryPolicy`] is the one retry policy).

use std::path::PathBuf;

use kube::{Client, Config};

use crate::error::ConfigError;

/// How to reach the cluster (kubectl-like flags).
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Kubeconfig file (`--kubeconfig`); otherwise `$KUBECONFIG`, `~/.kube/config`, or in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    /// Context name (`--context`).
    pub context: Option<String>,
    /// Namespace (`-n`); otherwise the context's namespace or `default`.
    pub namespace: Option<String>,
}

/// A client and where it points; cluster errors name both (`server https://10.0.0.1:6443, context ack`).
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: Client,
    /// The API server URL.
    pub server: String,
    /// The kubeconfig context in use (`None` inside a pod, with the service account).
    pub context: Option<String>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.context {
            Some(c) => write!(f, "server {}, context {c}", self.server),
            None => write!(f, "server {} (in-cluster service account)", self.server),
        }
    }
}

/// Builds a kube client the way kubectl finds its config: `--kubeconfig`, else `$KUBECONFIG` (a list of
/// files is merged), else `~/.kube/config`, else the in-cluster service account. Everything here is
/// local: a missing or unreadable kubeconfig or an unknown context is a [`ConfigError`] (the user's input),
/// never a cluster error; nothing is sent to the server yet.
pub async fn connect(opts: &ClusterOptions) -> Result<Connection, ConfigError> {
    use kube::config::Kubeconfig;
    let env = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    let (kc, source) = match (&opts.kubeconfig, &env) {
        (Some(path), _) => (
            Kubeconfig::read_from(path).map_err(|e| ConfigError::Kubeconfig {
                source_name: format!("--kubeconfig {}", path.display()),
                message: e.to_string(),
            })?,
            format!("--kubeconfig {}", path.display()),
        ),
        (None, Some(v)) => {
            let source = format!("$KUBECONFIG ({})", v.to_string_lossy());
            let kc = Kubeconfig::read().map_err(|e| ConfigError::Kubeconfig {
                source_name: source.clone(),
                message: e.to_string(),
            })?;
            (kc, source)
        }
        (None, None) => {
            let home = std::env::home_dir().map(|h| h.join(".kube").join("config"));
            match home.filter(|p| p.exists()) {
                Some(p) => (
                    Kubeconfig::read_from(&p).map_err(|e| ConfigError::Kubeconfig {
                        source_name: p.display().to_string(),
                        message: e.to_string(),
                    })?,
                    p.display().to_string(),
                ),
                None => return in_cluster(opts),
            }
        }
    };
    let known: Vec<String> = kc.contexts.iter().map(|c| c.name.clone()).collect();
    let context = match opts.context.clone().or_else(|| kc.current_context.clone()) {
        Some(c) if known.contains(&c) => c,
        Some(c) => {
            return Err(ConfigError::UnknownContext {
                context: c,
                source_name: source,
                known,
            });
        }
        None => {
            return Err(ConfigError::NoContext {
                source_name: source,
                known,
            });
        }
    };
    let kc_opts = kube::config::KubeConfigOptions {
        context: Some(context.clone()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kc, &kc_opts)
        .await
        .map_err(|e| ConfigError::Kubeconfig {
            source_name: format!("{source}, context {context}"),
            message: e.to_string(),
        })?;
    connection(config, opts, Some(context))
}

/// The client for `config`, with `-n` applied.
fn connection(
    mut config: Config,
    opts: &ClusterOptions,
    context: Option<String>,
) -> Result<Connection, ConfigError> {
    if let Some(ns) = &opts.namespace {
        config.default_namespace = ns.clone();
    }
    // One retry policy: the executor's (RetryPolicy, cancellable, logged). kube's own RetryLayer on top
    // of it made one 503 into 13 requests.
    config.default_retry = false;
    // Named in the API server's audit log and metrics (the scale benchmark tells its requests from the
    // cluster's own by it); an explicit User-Agent from the kubeconfig's headers stays.
    if !config
        .headers
        .iter()
        .any(|(k, _)| k == http::header::USER_AGENT)
    {
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("rdmakit/", env!("CARGO_PKG_VERSION"))),
        ));
    }
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| ConfigError::Client {
        server: server.clone(),
        message: e.to_string(),
    })?;
    Ok(Connection {
        client,
        server,
        context,
    })
}

/// No kubeconfig anywhere: the pod's service account, or a [`ConfigError::NotFound`].
fn in_cluster(opts: &ClusterOptions) -> Result<Connection, ConfigError> {
    if let Some(c) = &opts.context {
        return Err(ConfigError::UnknownContext {
            context: c.clone(),
            source_name: "no kubeconfig ($KUBECONFIG unset, no ~/.kube/config)".into(),
            known: Vec::new(),
        });
    }
    let config = Config::incluster().map_err(|e| ConfigError::NotFound {
        in_cluster: e.to_string(),
    })?;
    connection(config, opts, None)
}
