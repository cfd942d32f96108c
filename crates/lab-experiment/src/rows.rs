//! The `database` pseudo-target: what the run's own documents left in the database, read each
//! second beside the replicas' scrapes — `lab_run_enrichment_rows` (rows in
//! `enrichment_documents`) and `lab_run_enrichment_documents` (distinct documents among them).
//! Counted against the run's 200s, they say whether the enrichment worker lost or doubled an
//! event (a killed worker, a rebalance, a redelivery). Scraped only for a scenario whose
//! verdicts read them: the count scans the table.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use crate::scrape::{Scrape, Target, DATABASE};

const ROWS: &str = "lab_run_enrichment_rows";
const DOCUMENTS: &str = "lab_run_enrichment_documents";

/// A count that does not come back within this is a tick without the database (a scrape's
/// one second: the table is small in a fault run).
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

pub struct RunRows {
    url: String,
    docs: Range<u64>,
    conn: Option<lab_db::PgConnection>,
}

impl RunRows {
    /// The rows of the documents a load run with `seed` sends, in the database at `url`.
    pub fn new(url: &str, seed: u64) -> Self {
        RunRows {
            url: url.to_string(),
            docs: lab_load::stream_documents(seed),
            conn: None,
        }
    }

    /// Refuse a run whose documents have rows before it starts (`baseline`: the first scrape):
    /// an earlier run sent the same documents (the same `--seed`), and its rows would count as
    /// this run's.
    pub fn check_fresh(
        &self,
        targets: &[Target],
        baseline: &[Scrape],
        seed: u64,
    ) -> anyhow::Result<()> {
        let i = targets.iter().position(|t| t.service == DATABASE);
        let Some(Some(first)) = i.and_then(|i| baseline.get(i)) else {
            anyhow::bail!(
                "the database's rows of the run's documents could not be read at its start \
                 ({}): check the database URL and that the lab's schema is migrated",
                self.url
            );
        };
        let rows = first.get(ROWS).copied().unwrap_or(0.0);
        anyhow::ensure!(
            rows == 0.0,
            "the run's documents (--seed {seed}) already have {rows} enrichment rows: an earlier \
             run sent the same documents; give this run a --seed of its own"
        );
        Ok(())
    }

    /// One reading; `None` (the tick did not read the database) when it fails or is late. The
    /// connection is opened again on the next tick after a failure (a restarted server).
    pub async fn scrape(&mut self) -> Scrape {
        let read = async {
            if self.conn.is_none() {
                self.conn = Some(lab_db::connect(&self.url).await?);
            }
            let conn = self.conn.as_mut().expect("just opened");
            lab_db::enrichment_rows(conn, self.docs.clone()).await
        };
        match tokio::time::timeout(QUERY_TIMEOUT, read).await {
            Ok(Ok((rows, docs))) => Some(HashMap::from([
                (ROWS.to_string(), rows as f64),
                (DOCUMENTS.to_string(), docs as f64),
            ])),
            _ => {
                self.conn = None;
                None
            }
        }
    }
}
