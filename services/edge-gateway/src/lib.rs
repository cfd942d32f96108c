//! edge-gateway: the public door of the document-intelligence API.
//!
//! Authenticates API keys, validates hostile input, enforces the 3 s request budget (and cancels
//! the upstream call when it ends), and spreads requests over the orchestrator replicas that pass
//! their readiness probe.
//!
//! `gateway_request_duration_seconds` is recorded exactly as the postmortem's gateway recorded it:
//! what the gateway observed, so it can never exceed the budget. During the incident its p99 was a
//! flat line at 3.0 s — a clamp, not a measurement. It is kept that way on purpose (the lab must
//! show the blindfold); the callee's view lives in entity-service's own histogram.
//!
//! # Layout
//! - [`configuration`]: settings and their defaults.
//! - [`startup`]: `Application::build` / `port` / `run_until_stopped`.
//! - [`auth`]: API keys (hashes only, constant-time comparison, short-TTL cache).
//! - [`upstream`]: orchestrator replicas in and out of rotation by `/readyz`.
//! - [`ratelimit`]: per-tenant GCRA in Redis, shared by replicas, failing open (counted).
//! - [`extract`]: `POST /v1/extract`.
//! - [`openapi`]: the OpenAPI document, served at `GET /openapi.json`.

pub mod auth;
pub mod configuration;
pub mod extract;
pub mod openapi;
pub mod ratelimit;
pub mod startup;
pub mod upstream;

pub use configuration::Settings;
pub use startup::Application;
