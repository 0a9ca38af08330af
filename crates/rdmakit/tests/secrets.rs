//! Secret parameters (`--set-secret`, `params::secret`) and the credentials a run reads never appear in
//! plan.sh, plan.json, reports, logs or an exec argv, and an exec that prints them back is redacted.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cli::Workflow;
use rdmakit::error::ExecError;
use rdmakit::exec::dry::DryRunExecutor;
use rdmakit::exec::*;
use rdmakit::host::HostConfig;
use rdmakit::secrets::SecretText;
use serde_json::{Value, json};

const PW: &str = "hunter22-s3cret";
/// base64 of PW, as a Secret's data holds it.
const PW_B64: &str = "aHVudGVyMjItczNjcmV0";
const MOUNTED: &str = "mounted-token-9f8e7d";
const REGISTRY_AUTH: &str = "dXNlcjpyZWdpc3RyeS1wYXNz"; // user:registry-pass

/// Every file under `dir`, as text.
fn all_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&all_text(&p));
        } else {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
        }
    }
    out
}

const WORKFLOW: &str = r#"
step("Use the secret");
let pw = params::secret("registry_password");
print(`printing ${pw}`);
report::info("interpolated", `${pw}`);
fs::write("notes.txt", "pw=" + pw);
kube::exec("buildkit-client", ["sh", "-c", "cat > /tmp/pw"], #{ stdin: pw });
kube::apply_secret("registry-login", #{ password: pw, user: "me" });
"#;

#[test]
fn a_dry_run_plans_secrets_through_the_environment_and_writes_them_nowhere() {
    let wf = Workflow::new("s.rhai", WORKFLOW);
    let out = wf.out();
    let o = wf
        .dry_run()
        .arg("--set-secret")
        .arg(format!("registry_password={PW}"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let written = all_text(&out);
    for shown in [&stdout, &stderr, &written.as_str().into()] {
        assert!(!shown.contains(PW), "{shown}");
        assert!(!shown.contains(PW_B64), "{shown}");
    }
    assert!(
        stdout.contains("printing <secret registry_password>"),
        "{stdout}"
    );
    let sh = std::fs::read_to_string(out.join("plan.sh")).unwrap();
    // stdin and the Secret's value come from the environment when plan.sh runs.
    assert!(
        sh.contains("printf '%s' \"${RDMAKIT_SECRET_REGISTRY_PASSWORD:?export RDMAKIT_SECRET_REGISTRY_PASSWORD (a secret parameter) first}\" | kubectl exec buildkit-client -i -- sh -c"),
        "{sh}"
    );
    assert!(
        sh.contains("kubectl create secret generic registry-login --from-file=password=<(printf '%s' \"${RDMAKIT_SECRET_REGISTRY_PASSWORD:?"),
        "{sh}"
    );
    assert!(sh.contains("--from-literal=user=me"), "{sh}");
    // The run's own Secret is deleted in plan.sh's last step.
    assert!(
        sh.contains("delete --ignore-not-found secret/registry-login"),
        "{sh}"
    );
    assert!(
        std::fs::read_to_string(out.join("notes.txt"))
            .unwrap()
            .contains("pw=<secret registry_password>")
    );

    // KEY alone reads RDMAKIT_SECRET_KEY; a dry-run needs no value.
    wf.dry_run()
        .args(["--set-secret", "registry_password"])
        .env_remove("RDMAKIT_SECRET_REGISTRY_PASSWORD")
        .assert()
        .success();
    // A live run does, and an unknown secret key is an error like an unknown --set key.
    wf.live()
        .args(["--set-secret", "registry_password"])
        .env_remove("RDMAKIT_SECRET_REGISTRY_PASSWORD")
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "RDMAKIT_SECRET_REGISTRY_PASSWORD is not set",
        ));
    wf.dry_run()
        .args(["--set-secret", "registry_pasword=x"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("registry_pasword"));
}

#[test]
fn a_secret_cannot_go_into_an_argv_or_an_environment() {
    let out = tempfile::tempdir().unwrap();
    for (script, what) in [
        (
            "let pw = params::secret(\"pw\");\nkube::exec(\"p\", [\"echo\", pw]);",
            "secret pw in the command line",
        ),
        (
            "let pw = params::secret(\"pw\");\nkube::exec(\"p\", [\"true\"], #{ env: #{ PW: pw } });",
            "env PW = secret pw",
        ),
    ] {
        let (o, plan) = common::dry_run("t", script, out.path(), &[("pw", PW)], None);
        let e = o.error.expect("refused");
        assert!(e.message.contains(what), "{}", e.message);
        assert!(!e.message.contains(PW), "{}", e.message);
        assert!(!plan.to_shell().contains(PW));
    }
    // Interpolated, it is only the placeholder.
    let (o, plan) = common::dry_run(
        "t",
        "let pw = params::secret(\"pw\");\nkube::exec(\"p\", [\"echo\", `${pw}`]);",
        out.path(),
        &[("pw", PW)],
        None,
    );
    assert!(o.error.is_none(), "{:?}", o.error);
    assert!(plan.to_shell().contains("echo '<secret pw>'"));
}

/// A live-looking executor: records what exec received and answers with text that holds secrets (a
/// mounted Secret cat'ed, the merged registry credentials), lists a Secret with data.
#[derive(Debug)]
struct Leaky {
    dry: DryRunExecutor,
    stdin_seen: Mutex<Vec<Vec<u8>>>,
    secrets_applied: Mutex<Vec<SecretSpec>>,
}

impl Leaky {
    fn new() -> Self {
        Self {
            dry: DryRunExecutor::new("t.rhai", None, None),
            stdin_seen: Mutex::new(Vec::new()),
            secrets_applied: Mutex::new(Vec::new()),
        }
    }
}

impl Executor for Leaky {
    fn is_dry_run(&self) -> bool {
        false
    }
    fn has_api(&self, a: &str, k: &str, t: Duration) -> Result<bool, ExecError> {
        self.dry.has_api(a, k, t)
    }
    fn apply(&self, m: &Manifest, t: Duration) -> Result<Vec<ObjRef>, ExecError> {
        self.dry.apply(m, t)
    }
    fn delete(&self, m: &Manifest, t: Duration) -> Result<Vec<ObjRef>, ExecError> {
        self.dry.delete(m, t)
    }
    fn wait(&self, s: &WaitSpec) -> Result<Value, ExecError> {
        self.dry.wait(s)
    }
    fn exec(&self, s: &ExecSpec) -> Result<ExecOutput, ExecError> {
        if let Some(b) = &s.stdin {
            self.stdin_seen.lock().unwrap().push(b.clone());
        }
        Ok(ExecOutput {
            stdout: format!(
                "{PW}\n{MOUNTED}\n{{\"auths\":{{\"reg\":{{\"auth\":\"{REGISTRY_AUTH}\"}}}}}}\nuser:registry-pass\n"
            ),
            stderr: format!("also {PW_B64}"),
            code: 0,
            ..ExecOutput::default()
        })
    }
    fn exec_many(&self, s: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        s.iter().map(|x| self.exec(x)).collect()
    }
    fn get_field(&self, s: &FieldSpec) -> Result<String, ExecError> {
        if s.kind == "Secret" && s.path == ".data" && s.name == "app-token" {
            return Ok(json!({"token": "bW91bnRlZC10b2tlbi05ZjhlN2Q="}).to_string());
        }
        if s.path == ".spec" {
            // The pod mounts the app-token Secret.
            return Ok(
                json!({"volumes": [{"name": "t", "secret": {"secretName": "app-token"}}]})
                    .to_string(),
            );
        }
        Ok(format!("field {MOUNTED}"))
    }
    fn copy_to(&self, s: &CopySpec) -> Result<(), ExecError> {
        self.dry.copy_to(s)
    }
    fn logs(&self, _: &LogSpec) -> Result<String, ExecError> {
        Ok(format!("log line with {PW} and user:registry-pass"))
    }
    fn list(&self, s: &ListSpec) -> Result<Vec<Value>, ExecError> {
        if s.kind == "Secret" {
            // data.token is base64 of MOUNTED.
            return Ok(vec![json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "app-token"},
                "data": {"token": "bW91bnRlZC10b2tlbi05ZjhlN2Q="}
            })]);
        }
        self.dry.list(s)
    }
    fn merge_registry_secrets(&self, s: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        Ok(MergeSummary {
            target: s.target.clone(),
            registries: vec!["reg".into()],
            dry_run: false,
            sensitive: vec![SecretText::new(REGISTRY_AUTH)],
        })
    }
    fn apply_secret(&self, s: &SecretSpec) -> Result<ObjRef, ExecError> {
        self.secrets_applied.lock().unwrap().push(s.clone());
        Ok(ObjRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: s.name.clone(),
            namespace: None,
        })
    }
}

#[test]
fn what_comes_back_from_the_cluster_is_redacted_and_secrets_reach_only_stdin_and_secret_data() {
    let out = tempfile::tempdir().unwrap();
    let exec = Arc::new(Leaky::new());
    let mut cfg = HostConfig::new(out.path());
    cfg.secrets
        .insert("registry_password".into(), SecretText::new(PW));
    let o = common::run_t(
        exec.clone(),
        cfg,
        r#"
        step("Secrets");
        kube::list("Secret");
        kube::merge_registry_secrets(["pull", "push"], "buildkit-push-creds");
        let pw = params::get("registry_password", "");
        let r = kube::exec("buildkit-client", ["cat", "/root/.docker/config.json"], #{ stdin: pw });
        report::info("exec stdout", r.stdout);
        report::info("exec stderr", r.stderr);
        report::info("log", kube::logs("buildkit-client"));
        report::info("field", kube::get_field("Pod", "buildkit-client", ".status.message"));
        kube::apply_secret("registry-login", #{ password: pw });
        throw "failed with " + r.stdout;
        "#,
    );
    let e = o.error.expect("throws");
    assert!(
        !e.message.contains(PW) && !e.message.contains(MOUNTED),
        "{}",
        e.message
    );
    let written = all_text(out.path());
    for secret in [PW, PW_B64, MOUNTED, REGISTRY_AUTH, "user:registry-pass"] {
        assert!(!written.contains(secret), "{secret} in {written}");
    }
    assert!(
        written.contains("<redacted registry_password>"),
        "{written}"
    );
    assert!(
        written.contains("<redacted secret/app-token token>"),
        "{written}"
    );
    assert!(
        written.contains("<redacted secret/buildkit-push-creds (registry credentials)>"),
        "{written}"
    );
    // The secret went where it was meant to, as itself.
    assert_eq!(
        exec.stdin_seen.lock().unwrap().as_slice(),
        &[PW.as_bytes().to_vec()]
    );
    let applied = exec.secrets_applied.lock().unwrap();
    assert_eq!(applied[0].data["password"].expose(), PW);
    assert!(!format!("{:?}", applied[0]).contains(PW));
}

#[test]
fn an_exec_cannot_print_a_secret_its_pod_mounts() {
    let out = tempfile::tempdir().unwrap();
    let exec = Arc::new(Leaky::new());
    // The script never lists the Secret: the pod's spec says it is mounted, so its value is redacted.
    let o = common::run_t(
        exec,
        HostConfig::new(out.path()),
        "let r = kube::exec(\"app-0\", [\"cat\", \"/var/run/secrets/app/token\"]);\nreport::info(\"token\", r.stdout);\n",
    );
    assert!(o.error.is_none(), "{:?}", o.error);
    let written = all_text(out.path());
    assert!(!written.contains(MOUNTED), "{written}");
    assert!(
        written.contains("<redacted secret/app-token token>"),
        "{written}"
    );
}
