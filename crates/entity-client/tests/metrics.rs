//! The shared metric families: registered once per process, handed to both clients.

use entity_client::metrics::{outcome, ClientMetrics};
use entity_client::test_support::{has_series, metric};
use lab_core::metrics::Metrics;
use std::time::Duration;

#[test]
fn client_metrics_register_once_and_clones_write_the_same_series() {
    let metrics = Metrics::new();
    let first = ClientMetrics::register(&metrics).expect("first registration");
    let second = first.clone();
    first.record_attempt(outcome::OK, Duration::from_millis(5));
    second.record_attempt(outcome::OK, Duration::from_millis(5));
    assert_eq!(
        metric(&metrics, "entity_requests_total", &[("outcome", "ok")]),
        2.0
    );
    let text = metrics.render();
    assert_eq!(text.matches("# TYPE entity_requests_total").count(), 1);
    // A second registration on the same registry is refused, naming the way to do it.
    let err = ClientMetrics::register(&metrics)
        .err()
        .expect("registered twice");
    assert!(err.to_string().contains("once per"), "{err}");
}

#[test]
fn client_metrics_keep_registries_apart() {
    let a = Metrics::new();
    let b = Metrics::new();
    ClientMetrics::register(&a).unwrap().record_abandoned();
    ClientMetrics::register(&b).unwrap();
    assert_eq!(metric(&a, "entity_abandoned_total", &[]), 1.0);
    assert_eq!(metric(&b, "entity_abandoned_total", &[]), 0.0);
}

#[test]
fn client_metrics_refuse_a_name_another_component_registered() {
    let metrics = Metrics::new();
    metrics.counter_vec("entity_requests_total", "someone else's", &["outcome"]);
    let err = ClientMetrics::register(&metrics).err().expect("conflict");
    assert!(err.to_string().contains("once per"), "{err}");
    assert!(
        !has_series(&metrics, "entity_shed_total"),
        "nothing of ours stays registered after a refusal"
    );
}

#[test]
fn client_metrics_probe_families_never_touch_the_user_series() {
    let metrics = Metrics::new();
    let user = ClientMetrics::register(&metrics).unwrap();
    let probe = ClientMetrics::register_probe(&metrics).unwrap();
    probe.record_attempt(outcome::TIMEOUT, Duration::from_secs(1));
    probe.record_retry("timeout");
    probe.record_abandoned();
    let (parent, child) = probe.span_pair();
    drop(parent);
    drop(child);
    for (name, labels) in [
        ("entity_requests_total", &[][..]),
        ("entity_retries_total", &[]),
        ("entity_abandoned_total", &[]),
        ("otel_span_orphaned_total", &[]),
    ] {
        assert_eq!(metric(&metrics, name, labels), 0.0, "{name}");
    }
    assert_eq!(
        metric(
            &metrics,
            "entity_probe_requests_total",
            &[("outcome", "timeout")]
        ),
        1.0
    );
    assert_eq!(metric(&metrics, "entity_probe_retries_total", &[]), 1.0);
    assert_eq!(metric(&metrics, "entity_probe_abandoned_total", &[]), 1.0);
    assert_eq!(
        metric(&metrics, "entity_probe_span_orphaned_total", &[]),
        1.0
    );
    // The probe families export no gauges of their own (the pool is the users' pool).
    assert!(!has_series(&metrics, "entity_probe_pool_slots"));
    drop(user);
}

#[test]
fn client_metrics_fixed_only_gauges_have_no_series_until_a_fixed_client_sets_them() {
    let metrics = Metrics::new();
    let m = ClientMetrics::register(&metrics).unwrap();
    // A legacy-only process exports no retry-budget 0 that would fire `min(...) < 20`.
    assert!(!has_series(&metrics, "entity_retry_budget_tokens"));
    assert!(!has_series(&metrics, "entity_breaker_state"));
    // Counters every dashboard rates over exist at 0 from the start.
    assert!(has_series(&metrics, "entity_shed_total"));
    assert!(has_series(&metrics, "entity_pool_slots"));
    m.retry_budget_tokens().set(100.0);
    assert_eq!(metric(&metrics, "entity_retry_budget_tokens", &[]), 100.0);
}

#[test]
fn span_pair_counts_an_orphan_only_when_the_child_ends_after_the_parent() {
    let metrics = Metrics::new();
    let m = ClientMetrics::register(&metrics).unwrap();
    let (parent, child) = m.span_pair();
    drop(child);
    drop(parent);
    assert_eq!(metric(&metrics, "otel_span_orphaned_total", &[]), 0.0);
    let (parent, child) = m.span_pair();
    drop(parent);
    assert!(child.parent_ended());
    drop(child);
    assert_eq!(
        metric(
            &metrics,
            "otel_span_orphaned_total",
            &[("span", "entity.Resolve")]
        ),
        1.0
    );
    drop(m.span_scope());
    assert_eq!(metric(&metrics, "otel_span_orphaned_total", &[]), 1.0);
}
