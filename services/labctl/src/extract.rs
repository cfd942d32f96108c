//! `labctl extract`: send a few real documents from the seeded corpus through the gateway and
//! print what came back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lab_load::ensure_loopback;
use lab_seed::{ApiKeyRecord, CorpusDoc};

use crate::Globals;

#[derive(clap::Args)]
pub struct ExtractArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    gateway: String,
    #[arg(long, default_value_t = 3)]
    count: usize,
}

pub async fn run(a: ExtractArgs, g: &Globals) -> anyhow::Result<()> {
    let keys = lab_seed::read_api_keys(&g.data_dir)?;
    let corpus = lab_seed::read_corpus(&g.data_dir)?;
    let ok = extract(&a.gateway, a.count, &keys, &corpus).await?;
    anyhow::ensure!(ok > 0, "no extraction succeeded");
    Ok(())
}

async fn extract(
    gateway: &str,
    count: usize,
    keys: &[ApiKeyRecord],
    corpus: &[CorpusDoc],
) -> anyhow::Result<usize> {
    ensure_loopback(gateway)?;
    let key_of: BTreeMap<i64, &str> = keys
        .iter()
        .map(|k| (k.tenant_id, k.api_key.as_str()))
        .collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut ok = 0;
    // One document per tenant, the first `count` distinct tenants in corpus order.
    let mut seen = std::collections::BTreeSet::new();
    for doc in corpus
        .iter()
        .filter(|d| seen.insert(d.tenant_id))
        .take(count)
    {
        let Some(key) = key_of.get(&doc.tenant_id) else {
            continue;
        };
        let started = Instant::now();
        let resp = client
            .post(format!("{}/v1/extract", gateway.trim_end_matches('/')))
            .bearer_auth(key)
            .json(&serde_json::json!({
                "doc_id": doc.doc_id, "text": doc.text, "locale": doc.locale, "doc_type": doc.doc_type,
            }))
            .send()
            .await?;
        let status = resp.status();
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        println!(
            "{} tenant {} ({} chars): HTTP {} in {:.1} ms",
            doc.doc_id,
            doc.tenant_id,
            doc.text.chars().count(),
            status.as_u16(),
            ms
        );
        if !status.is_success() {
            println!("  error: {}", body["error"]);
            continue;
        }
        ok += 1;
        let entities = body["entities"].as_array().cloned().unwrap_or_default();
        let expected: BTreeMap<(usize, usize), i64> = doc
            .mentions
            .iter()
            .map(|m| ((m.start, m.end), m.entity_id))
            .collect();
        let correct = entities
            .iter()
            .filter(|e| {
                let key = (
                    e["start"].as_u64().unwrap_or(0) as usize,
                    e["end"].as_u64().unwrap_or(0) as usize,
                );
                expected.get(&key) == e["entity"]["id"].as_i64().as_ref()
            })
            .count();
        println!(
            "  {} entities resolved ({} match the corpus's ground truth of {} mentions), {} spans unresolved",
            entities.len(),
            correct,
            doc.mentions.len(),
            body["unresolved"]
        );
        for e in entities.iter().take(4) {
            println!(
                "    [{:>4}..{:<4}] {:<32} -> #{} {} ({}, confidence {:.2})",
                e["start"],
                e["end"],
                format!("{:?}", e["mention"].as_str().unwrap_or("")),
                e["entity"]["id"],
                e["entity"]["name"].as_str().unwrap_or(""),
                e["entity"]["kind"].as_str().unwrap_or(""),
                e["confidence"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(ok)
}
