//! Every metric name the alert rules and dashboards use is exported by a running lab (issue 6):
//! the lab in-process, one real extraction so the per-request series exist, then
//! scripts/metric-names-check.sh against every replica's /metrics.

use std::time::Duration;

use lab_e2e::{KafkaTarget, Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

#[tokio::test]
async fn every_metric_name_in_rules_and_dashboards_is_exported() {
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    // With the asynchronous path too: the enrichment dashboard and alert read its metrics.
    let opts = LabOptions {
        kafka: Some(KafkaTarget::fresh(&testkit::kafka_bootstrap().await).await),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let worker = lab.enrichment_worker().await;
    let resp = lab
        .extract(
            &key.api_key,
            json!({"doc_id": "d", "text": "The payee Vega Labs confirmed."}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    // The worker's per-partition lag exists once it owns partitions and has measured them.
    let mut measured = false;
    for _ in 0..100 {
        let text = reqwest::get(format!("{}/metrics", worker.admin))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("enrichment_consumer_lag{") && text.contains("outcome=\"applied\"") {
            measured = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        measured,
        "the enrichment worker never applied the event and measured its lag"
    );

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut urls = vec![lab.gateway.admin.clone()];
    urls.extend(lab.orchestrators.iter().map(|o| o.admin.clone()));
    urls.extend(lab.entity_services.iter().map(|e| e.admin.clone()));
    urls.push(worker.admin.clone());
    let out = tokio::process::Command::new("bash")
        .arg(root.join("scripts/metric-names-check.sh"))
        .args(&urls)
        .current_dir(&root)
        .output()
        .await
        .expect("run scripts/metric-names-check.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "metric names missing:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(" ok "),
        "the check reported nothing:\n{stdout}"
    );
}
