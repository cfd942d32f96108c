//! The shared metric families: registered once per registry, whoever asks first.

use entity_client::metrics::{outcome, ClientMetrics};
use entity_client::test_support::{has_series, metric};
use lab_core::metrics::Metrics;
use std::time::Duration;

#[test]
fn client_metrics_get_or_register_returns_the_same_families_for_one_registry() {
    let metrics = Metrics::new();
    let first = ClientMetrics::get_or_register(&metrics).expect("first registration");
    // A clone of `Metrics` shares its registry: still the same families, no double registration.
    let second = ClientMetrics::get_or_register(&metrics.clone()).expect("found again");
    first.record_attempt(outcome::OK, Duration::from_millis(5));
    second.record_attempt(outcome::OK, Duration::from_millis(5));
    assert_eq!(
        metric(&metrics, "entity_requests_total", &[("outcome", "ok")]),
        2.0
    );
    let text = metrics.render();
    assert_eq!(text.matches("# TYPE entity_requests_total").count(), 1);
    assert!(
        !text.contains("entity_client_families_tag"),
        "the tag never shows"
    );
}

#[test]
fn client_metrics_keep_registries_apart() {
    let a = Metrics::new();
    let b = Metrics::new();
    ClientMetrics::get_or_register(&a)
        .unwrap()
        .record_abandoned();
    ClientMetrics::get_or_register(&b).unwrap();
    assert_eq!(metric(&a, "entity_abandoned_total", &[]), 1.0);
    assert_eq!(metric(&b, "entity_abandoned_total", &[]), 0.0);
}

#[test]
fn client_metrics_refuse_a_name_another_component_registered() {
    let metrics = Metrics::new();
    // What the orchestrator's plain EntityClient registers.
    metrics.counter_vec("entity_requests_total", "plain client", &["outcome"]);
    let err = ClientMetrics::get_or_register(&metrics)
        .err()
        .expect("conflict");
    assert!(err.to_string().contains("entity_requests_total"), "{err}");
    assert!(
        !has_series(&metrics, "entity_shed_total"),
        "nothing of ours stays registered after a refusal"
    );
}

#[test]
fn client_metrics_fixed_only_gauges_have_no_series_until_a_fixed_client_sets_them() {
    let metrics = Metrics::new();
    let m = ClientMetrics::get_or_register(&metrics).unwrap();
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
    let m = ClientMetrics::get_or_register(&metrics).unwrap();
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
