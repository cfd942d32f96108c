//! Scraping every replica's `/metrics` each second. What a scrape holds and how a run's series
//! become numbers is lab-report's ([`lab_report::series`], re-exported here).

use std::time::Duration;

pub use lab_report::series::*;

pub async fn scrape_all(client: &reqwest::Client, targets: &[Target]) -> Vec<Scrape> {
    let futs = targets.iter().map(|t| async move {
        let resp = client.get(format!("{}/metrics", t.url)).send().await.ok()?;
        let text = resp.text().await.ok()?;
        Some(parse(&text))
    });
    futures::future::join_all(futs).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        // A replica that cannot answer /metrics within a second is counted as down for that tick.
        .timeout(Duration::from_secs(1))
        .build()
        .expect("HTTP client")
}
