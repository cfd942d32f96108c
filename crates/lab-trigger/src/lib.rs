//! The incident's real trigger, and what the DBA ran to end it, against the lab's PostgreSQL
//! (../shared/design/stale-stats-trigger.md).
//!
//! - [`backfill`]: the postmortem's 03:00 job — autovacuum off, `locale` populated in committed
//!   batches (real dead tuples), then the column widened (its statistics dropped, every cached
//!   plan invalidated: the hot lookup re-plans to a bitmap heap scan).
//! - [`remediate`]: the 11:31 `ANALYZE` that cures the plan, and the `VACUUM` that does not.
//!
//! Nothing here stands in for the database: each step is the SQL an operator would run.

pub mod backfill;
pub mod remediate;

#[cfg(test)]
mod owner_test;
#[cfg(test)]
mod trigger_test;
