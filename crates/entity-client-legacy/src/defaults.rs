//! The package defaults — `internal/httpx/defaults.go` of the postmortem.
//!
//! A caller that passes no option inherits these, silently. Only the orchestrator did; the two
//! other services set their timeout explicitly, which is why a reviewer of the one-line diff below
//! could not have seen the blast radius: it was "not visible in the diff, the PR, or any test".

use std::time::Duration;

// LAB-BUG(timeout-inversion): "DefaultTimeout is applied to any client created without an
// explicit timeout. Bumped from 800ms -> 10s to stop entity-service contract tests from flaking
// in CI." — commit b7c3a91, `chore: bump entity-service client timeout to reduce flaky CI`, two
// approvals, green CI, dormant for three weeks. The gateway above gives up after 3 s, so the
// orchestrator → entity-service hop (10 s per attempt, 3 attempts, up to ~31 s with the sleeps)
// outlives its parent by an order of magnitude: `child_total < parent_per_attempt` is violated
// and nothing checks it. The 800 ms it replaced was not patience; it was load shedding.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

// LAB-BUG(pool-exhaustion): "MaxConnsPerHost: 64, // hard cap: callers block here once
// exhausted". Per pod and per entity-service host; every new pod brings another 64 ("Going
// 24 → 60 pods ... added 2,304 more concurrent connections aimed at the bottleneck").
pub const DEFAULT_MAX_CONNS_PER_HOST: usize = 64;

// LAB-BUG(retry-amplification): `maxRetries: 3` — three attempts at this layer, under the
// gateway's three attempts at the layer above: 3 × 3 = 9 requests per user request exactly when
// entity-service is failing ("amplification is 1× exactly when you don't need it, and 9× exactly
// when you can least afford it"). No budget caps the aggregate.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// `MaxIdleConnsPerHost: 64` — idle connections kept per host (as many as may be in use).
pub const DEFAULT_MAX_IDLE_PER_HOST: usize = 64;

/// `IdleConnTimeout: 90 * time.Second`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
