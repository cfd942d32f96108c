//! OTLP over gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export`, the call every
//! OpenTelemetry SDK's OTLP exporter makes (the services' included: `crates/lab-core/src/telemetry.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode};

use crate::model::SpanRecord;
use crate::store::Store;

/// An OTLP export larger than this is refused (tonic's default is 4 MiB; the SDK's batches of
/// 512 spans are well under 1 MiB, and a collector forwarding bigger batches would be told).
const MAX_MESSAGE_BYTES: usize = 16 << 20;

struct Receiver {
    store: Arc<Store>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.store.insert(flatten(request.into_inner()));
        // Every span accepted (or counted as dropped by the store): no partial success to report.
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The spans of one export, flattened: each with its process's `service.name`.
pub fn flatten(request: ExportTraceServiceRequest) -> Vec<SpanRecord> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .and_then(|kv| kv.value.as_ref())
            .map(text)
            .unwrap_or_else(|| "unknown_service".into());
        for ss in rs.scope_spans {
            for s in ss.spans {
                let parent = hex(&s.parent_span_id);
                out.push(SpanRecord {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: (!parent.is_empty()).then_some(parent),
                    name: s.name,
                    service: service.clone(),
                    kind: kind(s.kind).into(),
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano.max(s.start_time_unix_nano),
                    error: s
                        .status
                        .as_ref()
                        .is_some_and(|st| st.code == StatusCode::Error as i32),
                    attributes: attributes(&s.attributes),
                });
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn kind(k: i32) -> &'static str {
    match SpanKind::try_from(k) {
        Ok(SpanKind::Server) => "server",
        Ok(SpanKind::Client) => "client",
        Ok(SpanKind::Producer) => "producer",
        Ok(SpanKind::Consumer) => "consumer",
        _ => "internal",
    }
}

fn attributes(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(v: &AnyValue) -> String {
    match &v.value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => hex(b),
        Some(Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(text).collect();
            format!("[{}]", items.join(", "))
        }
        Some(Value::KvlistValue(l)) => {
            let items: Vec<String> = l
                .values
                .iter()
                .map(|kv| {
                    format!(
                        "{}={}",
                        kv.key,
                        kv.value.as_ref().map(text).unwrap_or_default()
                    )
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        _ => String::new(),
    }
}

/// The OTLP receiver and the query API on listeners of their own, serving for as long as the
/// runtime runs (the supervisor's: the receiver goes with the lab; traces are a window, not a
/// store of record, so there is nothing to flush).
pub struct Running {
    pub otlp: SocketAddr,
    pub api: SocketAddr,
    pub store: Arc<Store>,
}

/// Bind both listeners (so a port in use is an error here, not in a task), then serve them on
/// the current runtime.
pub async fn start(
    otlp: SocketAddr,
    api: SocketAddr,
    store: Arc<Store>,
) -> anyhow::Result<Running> {
    use anyhow::Context as _;
    let otlp_listener = tokio::net::TcpListener::bind(otlp)
        .await
        .with_context(|| format!("binding the OTLP receiver on {otlp}"))?;
    let api_listener = tokio::net::TcpListener::bind(api)
        .await
        .with_context(|| format!("binding the trace API on {api}"))?;
    let running = Running {
        otlp: otlp_listener.local_addr()?,
        api: api_listener.local_addr()?,
        store: store.clone(),
    };
    let service = TraceServiceServer::new(Receiver {
        store: store.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES);
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(otlp_listener);
        let result = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "the OTLP receiver stopped");
        }
    });
    let app = crate::api::router(store);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(api_listener, app).await {
            tracing::warn!(error = %e, "the trace API stopped");
        }
    });
    Ok(running)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

    #[test]
    fn an_export_is_flattened_with_its_service_ids_in_hex_and_the_error_status() {
        let span = Span {
            trace_id: vec![0xab; 16],
            span_id: vec![0x01; 8],
            parent_span_id: vec![],
            name: "edge-gateway.HandleExtract".into(),
            kind: SpanKind::Server as i32,
            start_time_unix_nano: 10,
            end_time_unix_nano: 20,
            attributes: vec![KeyValue {
                key: "http.response.status_code".into(),
                value: Some(AnyValue {
                    value: Some(Value::IntValue(504)),
                }),
                ..Default::default()
            }],
            status: Some(Status {
                message: String::new(),
                code: StatusCode::Error as i32,
            }),
            ..Default::default()
        };
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(Value::StringValue("edge-gateway".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![span],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let spans = flatten(request);
        assert_eq!(spans.len(), 1);
        let s = &spans[0];
        assert_eq!(s.trace_id, "ab".repeat(16));
        assert_eq!(s.span_id, "0101010101010101");
        assert_eq!(s.parent_span_id, None);
        assert_eq!(s.service, "edge-gateway");
        assert_eq!(s.kind, "server");
        assert!(s.error);
        assert_eq!(s.attribute("http.response.status_code"), Some("504"));
    }
}
