//! `--policy FILE`: a team's retry policy for the fixed client, loaded by every orchestrator.
//!
//! A policy file (its shape: `lab_contract::policy`, next to the hop table it overlays) is an
//! overlay of the orchestrator's own configuration limited to the sections a client policy is
//! made of — `[budget]` (attempts, per-attempt and total budgets, guard band:
//! the entity hop of the hop table), `[resilient]` (the concurrency limit) and `[policy]`
//! (backoff and jitter, retry budget, breaker) — and it is validated by the orchestrator's own
//! types before the lab starts: an inverted budget is refused naming both budgets, exactly as
//! an orchestrator would refuse to start on it. Examples with their sources: `load/policies/`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use entity_client::policy as client;
pub use lab_contract::policy::SECTIONS;
use orchestrator::configuration::{Settings, DEFAULTS};

#[derive(Debug, Clone)]
pub struct Policy {
    /// Absolute (the replicas run in their own directory).
    pub path: PathBuf,
    /// `[policy] name`, else the file's stem.
    pub name: String,
    /// Every value the client will run with, in one line.
    pub summary: String,
}

/// Read and validate `path` (see the module's docs).
pub fn load(path: &Path) -> anyhow::Result<Policy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the policy {}", path.display()))?;
    let bad: Vec<String> = lab_core::config::top_level_keys(&text)
        .with_context(|| format!("policy {} is not valid TOML", path.display()))?
        .into_iter()
        .filter(|s| !SECTIONS.contains(&s.as_str()))
        .collect();
    anyhow::ensure!(
        bad.is_empty(),
        "policy {}: section(s) [{}] are not part of a client policy (a policy sets only [{}])",
        path.display(),
        bad.join("], ["),
        SECTIONS.join("], [")
    );
    let abs = std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))?;
    let settings: Settings = lab_core::config::load_from(
        "orchestrator",
        DEFAULTS,
        [(
            "LAB_CONFIG_FILE".to_string(),
            abs.to_string_lossy().into_owned(),
        )],
    )
    .with_context(|| format!("policy {}", path.display()))?;
    settings
        .validate()
        .with_context(|| format!("policy {} is refused", path.display()))?;
    let hop = settings.hop_table()?.entity;
    let p = &settings.policy;
    let (backoff, budget, breaker) = (
        client::backoff(p)?,
        client::retry_budget(p)?,
        client::breaker(p)?,
    );
    let name = p.name.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "policy".into())
    });
    let summary = format!(
        "{} attempts of ≤ {} ms within {} ms (guard band {} ms); backoff {}-{} ms, {:?} jitter; retry \
         budget {} tokens, {} per retry, +{} per success; breaker at {:.0}% of ≥ {} calls in {} \
         ms, shed {} ms, {} probes; concurrency limit {} (adaptive ceiling {})",
        hop.max_attempts,
        hop.per_attempt.as_millis(),
        hop.total.as_millis(),
        hop.guard_band.as_millis(),
        backoff.base().as_millis(),
        backoff.cap().as_millis(),
        backoff.jitter(),
        budget.max_tokens,
        budget.retry_cost,
        budget.success_credit,
        100.0 * breaker.failure_ratio,
        breaker.min_requests,
        breaker.window.as_millis(),
        breaker.shedding_for.as_millis(),
        breaker.probes,
        settings.resilient.max_concurrency,
        settings.resilient.max_concurrency_adaptive
    );
    Ok(Policy {
        path: abs,
        name,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile_path::TempPath {
        tempfile_path::write(text)
    }

    /// A file under the system's temp dir, removed when dropped (no crate for so little).
    mod tempfile_path {
        use std::path::{Path, PathBuf};
        use std::sync::atomic::{AtomicU32, Ordering};

        pub struct TempPath(PathBuf);
        impl TempPath {
            pub fn path(&self) -> &Path {
                &self.0
            }
        }
        impl Drop for TempPath {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        pub fn write(text: &str) -> TempPath {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "labctl-policy-{}-{}.toml",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&p, text).unwrap();
            TempPath(p)
        }
    }

    #[test]
    fn the_shipped_policies_load_and_differ_from_the_lab_fix() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../load/policies");
        // An empty policy is the lab's own fix.
        let empty = file("");
        let lab = load(empty.path()).unwrap().summary;
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                let p = load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                assert_ne!(p.summary, lab, "{} changes nothing", path.display());
                n += 1;
            }
        }
        assert!(n >= 2, "load/policies/ ships two literature policies");
        let grpc = load(&dir.join("grpc-retry-throttling.toml")).unwrap();
        assert!(grpc.summary.contains("4 attempts"), "{}", grpc.summary);
    }

    #[test]
    fn an_inverted_budget_is_refused_with_both_names() {
        // The postmortem's one-line bump: the entity hop's total above the orchestrator's.
        let f = file("[budget]\nentity_total_ms = 10000\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("entity") && e.contains("orchestrator"), "{e}");
    }

    #[test]
    fn a_policy_may_not_touch_the_lab_and_typos_are_refused() {
        let f = file("[http]\nport = 1\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("[http]"), "{e}");
        // Nor by a dotted key at the root, or a comment after the header.
        let f = file("cache.capacity = 1\n[policy] # mine\nname = \"x\"\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("[cache]"), "{e}");
        let f = file("[policy]\nbackof_base_ms = 10\n");
        assert!(load(f.path()).is_err());
        let f = file("[policy]\njitter = \"sometimes\"\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("policy.jitter"), "{e}");
        let f = file("[policy]\nbackoff_base_ms = 500\nbackoff_cap_ms = 100\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("backoff"), "{e}");
        let f = file("[resilient]\nmax_concurrency = 100\nmax_concurrency_adaptive = 50\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("max_concurrency_adaptive"), "{e}");
    }
}
