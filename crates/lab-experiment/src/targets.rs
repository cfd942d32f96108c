//! `--targets` / `LAB_GAMEDAY_TARGETS`: which replicas a game day scrapes.
//!
//! Each item is `service=url`. A plain URL is one replica. A `dns+` URL
//! (`orchestrator=dns+http://orchestrator-headless:8080`) is every replica behind a name: it is
//! resolved once, at the start of the game day, and becomes one target per A/AAAA record. That is
//! what a Kubernetes headless Service (`clusterIP: None`) returns — one record per pod — where a
//! ClusterIP Service would return one virtual IP and hide the replicas (k8s/README.md, "Game day
//! on kind"). Replicas are named `<service>-1..n` in IP order, so the same pods get the same
//! names on every run of the same cluster.
//!
//! The name is resolved once: a pod that the Deployment *replaces* during the run (new pod, new
//! IP) is not followed, while a container the kubelet *restarts* in place (the OOMKill) keeps its
//! IP and is scraped again when it comes back.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::scrape::Target;

/// Services a game day needs at least one replica of: the request path.
const REQUIRED: [&str; 3] = ["edge-gateway", "orchestrator", "entity-service"];
/// Services it scrapes when named, but does not need (the Kafka enrichment worker).
const OPTIONAL: [&str; 1] = ["enrichment"];
/// Resolving a name is bounded: a resolver that hangs must not hang the game day before it starts.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// `edge-gateway=http://127.0.0.1:8080,orchestrator=dns+http://orchestrator-headless:8080,...`.
pub async fn parse_targets(list: &str) -> anyhow::Result<Vec<Target>> {
    let mut out: Vec<Target> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (service, url) = item
            .split_once('=')
            .with_context(|| format!("--targets {item:?}: use service=url"))?;
        if !REQUIRED.contains(&service) && !OPTIONAL.contains(&service) {
            bail!(
                "--targets {item:?}: service must be one of {}",
                REQUIRED
                    .iter()
                    .chain(&OPTIONAL)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let urls = match url.strip_prefix("dns+") {
            Some(template) => {
                let (base, host, port) =
                    split_template(template).with_context(|| format!("--targets {item:?}"))?;
                let addrs = resolve(&host, port)
                    .await
                    .with_context(|| format!("--targets {item:?}"))?;
                expand(&base, addrs)
            }
            None => vec![url.trim_end_matches('/').to_string()],
        };
        for url in urls {
            let n = out.iter().filter(|t| t.service == service).count() + 1;
            out.push(Target {
                service: service.to_string(),
                replica: format!("{service}-{n}"),
                url,
            });
        }
    }
    for service in REQUIRED {
        if !out.iter().any(|t| t.service == service) {
            bail!("--targets names no {service} replica");
        }
    }
    Ok(out)
}

/// `http://name:8080/prefix` → (the parsed URL, `name`, 8080).
fn split_template(template: &str) -> anyhow::Result<(url::Url, String, u16)> {
    let base = url::Url::parse(template)
        .with_context(|| format!("dns+{template}: not a URL (use dns+http://name:port)"))?;
    let host = match base.host() {
        Some(url::Host::Domain(d)) => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => bail!("dns+{template}: no host name to resolve"),
    };
    let port = base
        .port_or_known_default()
        .with_context(|| format!("dns+{template}: no port (use dns+http://name:port)"))?;
    Ok((base, host, port))
}

/// Every address `host` resolves to (A and AAAA), or an error that names the host.
async fn resolve(host: &str, port: u16) -> anyhow::Result<Vec<IpAddr>> {
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| anyhow::anyhow!("resolving {host} took more than {RESOLVE_TIMEOUT:?}"))?
        .with_context(|| {
            format!(
                "{host} does not resolve (in Kubernetes: is the headless Service applied, in \
                 this namespace, with ready or publishNotReadyAddresses pods?)"
            )
        })?;
    let addrs: Vec<IpAddr> = found.map(|a| a.ip()).collect();
    if addrs.is_empty() {
        bail!("{host} resolves to no address: no replica to scrape");
    }
    Ok(addrs)
}

/// One URL per distinct address, in IP order (numeric, IPv4 before IPv6), keeping the template's
/// scheme, port and path.
fn expand(base: &url::Url, mut addrs: Vec<IpAddr>) -> Vec<String> {
    addrs.sort();
    addrs.dedup();
    addrs
        .into_iter()
        .map(|ip| {
            let mut u = base.clone();
            u.set_ip_host(ip)
                .expect("an http(s) URL with a host accepts an IP host");
            u.as_str().trim_end_matches('/').to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(t: &[Target]) -> Vec<&str> {
        t.iter().map(|t| t.replica.as_str()).collect()
    }

    #[tokio::test]
    async fn parse_targets_names_replicas_and_requires_every_tier() {
        let t = parse_targets(
            "edge-gateway=http://127.0.0.1:8080, orchestrator=http://o1:8080,orchestrator=http://o2:8080/,entity-service=http://e1:8080",
        )
        .await
        .unwrap();
        assert_eq!(
            replicas(&t),
            [
                "edge-gateway-1",
                "orchestrator-1",
                "orchestrator-2",
                "entity-service-1"
            ]
        );
        assert_eq!(t[2].url, "http://o2:8080");
        assert!(parse_targets("edge-gateway=http://a,orchestrator=http://b")
            .await
            .is_err());
        assert!(parse_targets("gateway=http://a").await.is_err());
        assert!(parse_targets("edge-gateway").await.is_err());
    }

    #[tokio::test]
    async fn parse_targets_enrichment_is_accepted_but_not_required() {
        let path =
            "edge-gateway=http://g:8080,orchestrator=http://o:8080,entity-service=http://e:8080";
        assert!(parse_targets(path).await.is_ok());
        let t = parse_targets(&format!(
            "{path},enrichment=http://w1:8080,enrichment=http://w2:8080"
        ))
        .await
        .unwrap();
        let workers: Vec<_> = t.iter().filter(|t| t.service == "enrichment").collect();
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[1].replica, "enrichment-2");
        assert_eq!(workers[1].url, "http://w2:8080");
    }

    #[tokio::test]
    async fn parse_targets_dns_ip_literal_is_one_replica() {
        let t = parse_targets(
            "edge-gateway=http://127.0.0.1:8080,orchestrator=dns+http://127.0.0.1:8101,entity-service=dns+http://127.0.0.1:8201/",
        )
        .await
        .unwrap();
        assert_eq!(
            replicas(&t),
            ["edge-gateway-1", "orchestrator-1", "entity-service-1"]
        );
        assert_eq!(t[1].url, "http://127.0.0.1:8101");
        assert_eq!(t[2].url, "http://127.0.0.1:8201");
    }

    #[tokio::test]
    async fn parse_targets_dns_localhost_expands_to_every_loopback_address() {
        // localhost is 127.0.0.1 and, on most hosts, ::1 too: one replica per address, each URL
        // an IP (bracketed for IPv6) with the template's port, numbered after explicit replicas.
        let t = parse_targets(
            "edge-gateway=http://127.0.0.1:8080,orchestrator=http://127.0.0.1:8101,orchestrator=dns+http://localhost:8102,entity-service=http://127.0.0.1:8201",
        )
        .await
        .unwrap();
        let orch: Vec<&Target> = t.iter().filter(|t| t.service == "orchestrator").collect();
        assert!(orch.len() >= 2, "localhost resolved to nothing: {t:?}");
        assert_eq!(orch[0].url, "http://127.0.0.1:8101");
        assert_eq!(orch[1].url, "http://127.0.0.1:8102");
        for (i, o) in orch.iter().enumerate() {
            assert_eq!(o.replica, format!("orchestrator-{}", i + 1));
        }
        for o in &orch[1..] {
            assert!(
                o.url == "http://127.0.0.1:8102" || o.url == "http://[::1]:8102",
                "not a loopback address URL: {}",
                o.url
            );
        }
    }

    #[tokio::test]
    async fn parse_targets_dns_name_without_records_fails_naming_it() {
        // .invalid never resolves (RFC 6761), with or without a network.
        let err = parse_targets(
            "edge-gateway=http://127.0.0.1:8080,orchestrator=dns+http://orchestrator-headless.invalid:8080,entity-service=http://e:8080",
        )
        .await
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("orchestrator-headless.invalid"), "{msg}");
        assert!(
            msg.contains("does not resolve") || msg.contains("no address"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn parse_targets_dns_without_port_or_host_is_refused() {
        let path = "edge-gateway=http://g:8080,entity-service=http://e:8080";
        assert!(
            parse_targets(&format!("{path},orchestrator=dns+orchestrator-headless"))
                .await
                .is_err()
        );
        assert!(
            parse_targets(&format!("{path},orchestrator=dns+unix:/run/x"))
                .await
                .is_err()
        );
    }

    #[test]
    fn expand_sorts_by_ip_numerically_and_drops_duplicates() {
        let (base, _, _) = split_template("http://orchestrator-headless:8080/").unwrap();
        let ips: Vec<IpAddr> = ["10.244.0.10", "::1", "10.244.0.9", "10.244.0.10"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        // Text order would put .10 before .9; the replica names must follow the addresses.
        assert_eq!(
            expand(&base, ips),
            [
                "http://10.244.0.9:8080",
                "http://10.244.0.10:8080",
                "http://[::1]:8080"
            ]
        );
    }

    #[test]
    fn split_template_keeps_scheme_port_and_path() {
        let (base, host, port) =
            split_template("https://entity-service-headless/metrics-root").unwrap();
        assert_eq!((host.as_str(), port), ("entity-service-headless", 443));
        assert_eq!(
            expand(&base, vec!["10.0.0.1".parse().unwrap()]),
            ["https://10.0.0.1/metrics-root"]
        );
    }
}
