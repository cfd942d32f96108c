//! `labctl seed --force` refuses to run under a lab that is up in its state directory: a reseed
//! empties enrichment's tables while its workers would write the old data set's events into them
//! again. The refusal comes before any connection (the database URL here leads nowhere).

use std::process::Command;

#[test]
fn a_forced_reseed_is_refused_while_a_lab_is_up() {
    let state = std::env::temp_dir().join(format!("labctl-seed-test-{}", std::process::id()));
    std::fs::create_dir_all(state.join("run")).unwrap();
    // A supervisor that is alive: this test's own process.
    std::fs::write(
        state.join("run").join("lab.json"),
        format!(
            r#"{{"supervisor_pid": {}, "procs": []}}"#,
            std::process::id()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_labctl"))
        .arg("--state-dir")
        .arg(&state)
        .arg("--data-dir")
        .arg(state.join("data"))
        .args(["--database-url", "postgres://nobody@127.0.0.1:1/none"])
        .args(["seed", "--force"])
        .output()
        .expect("labctl runs");
    std::fs::remove_dir_all(&state).ok();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "seed ran under a live lab: {err}");
    assert!(
        err.contains("needs the lab down") && err.contains("already up"),
        "{err}"
    );
}
