"""Section 11, NetworkPolicies evaluated: who may open a TCP connection to which pod and port, and the
table (k8s/README.md) it must give."""


# --- NetworkPolicy, evaluated: who may open a TCP connection to which pod and port.
class Pod:
    def __init__(self, ident, ns, labels, ns_labels, ports=None):
        self.ident, self.ns, self.labels, self.ns_labels, self.ports = ident, ns, labels, ns_labels, ports or {}


def selects(sel, labels):
    for k, v in ((sel or {}).get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in (sel or {}).get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        if (op == "In" and labels.get(k) not in vals) or (op == "NotIn" and labels.get(k) in vals) \
                or (op == "Exists" and k not in labels) or (op == "DoesNotExist" and k in labels):
            return False
    return True


def peer_is(peer, pol_ns, pod):
    if "ipBlock" in peer:
        return False   # the lab's rules name pods; an ipBlock would need real addresses
    ns_ok = selects(peer["namespaceSelector"], pod.ns_labels) if "namespaceSelector" in peer else pod.ns == pol_ns
    return ns_ok and ("podSelector" not in peer or selects(peer["podSelector"], pod.labels))


def port_in(rule_ports, port, proto, dst):
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != proto:
            continue
        n = p.get("port")
        if n is None:
            return True
        n = dst.ports.get(n) if isinstance(n, str) else n
        if n is not None and n <= port <= p.get("endPort", n):
            return True
    return False


def policy_types(pol):
    spec = pol["spec"]
    return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))


def connects(policies, src, dst, port, proto="TCP", egress=True):
    """Egress of src (if isolated) AND ingress of dst (if isolated) both allow it. egress=False: what
    the ingress rules alone admit (each layer must hold the line by itself)."""
    def side(direction, pod, peer_pod, key):
        pols = [p for p in policies if p["ns"] == pod.ns and direction in policy_types(p)
                and selects(p["spec"].get("podSelector") or {}, pod.labels)]
        if not pols:
            return True
        for p in pols:
            for rule in p["spec"].get(direction.lower()) or []:
                peers = rule.get(key)
                if (not peers or any(peer_is(x, p["ns"], peer_pod) for x in peers)) and port_in(rule.get("ports"), port, proto, dst):
                    return True
        return False
    return (not egress or side("Egress", src, dst, "to")) and side("Ingress", dst, src, "from")


NS = "retry-storm-lab"
ANY = "anywhere"
# ...except the inner services: their egress allows only their own next hops and dependencies.
INNER = {"orchestrator", "entity-service", "enrichment"}
# Who may connect to what (k8s/README.md, "Admin port, roles, policies"), with k8s/jobs/gameday.yaml applied.
# labctl pods are labctl/<component>; "outside" is a pod of another namespace.
EXPECT = {
    ("edge-gateway", 8080): ANY,
    ("edge-gateway", 9901): {"prometheus", "labctl/gameday"},
    ("orchestrator", 8080): {"edge-gateway", "labctl/toolbox", "labctl/gameday"},
    ("orchestrator", 9901): {"edge-gateway", "prometheus", "labctl/toolbox", "labctl/gameday"},
    ("entity-service", 8080): {"orchestrator"},
    ("entity-service", 9901): {"prometheus", "labctl/gameday"},
    ("enrichment", 8080): set(),
    ("enrichment", 9901): {"prometheus", "labctl/gameday"},
    ("postgres", 5432): {"edge-gateway", "entity-service", "enrichment", "labctl/seed", "labctl/toolbox", "labctl/gameday"},
    # Not the seed Job: db prepare and seed never use Redis, and it holds no Redis password.
    ("redis", 6379): {"edge-gateway", "orchestrator", "entity-service", "enrichment", "labctl/toolbox",
                      "labctl/gameday", "labctl/flags"},
    ("kafka", 9092): {"orchestrator", "enrichment", "kafka-init", "labctl/toolbox", "labctl/gameday"},
    ("otel-collector", 4317): {"edge-gateway", "orchestrator", "entity-service", "enrichment", "labctl/toolbox", "labctl/gameday"},
    ("jaeger", 4317): {"otel-collector"},
    ("jaeger", 16686): {"grafana"},
    ("prometheus", 9090): {"grafana"},
    ("grafana", 3000): set(),
    ("labctl/toolbox", 9901): {"prometheus"},
    ("labctl/toolbox", 8080): set(),
    ("labctl/gameday", 9901): {"prometheus"},
}


def lab_pods(docs):
    ns_doc = [d for d in docs if d.get("kind") == "Namespace" and d["metadata"]["name"] == NS]
    ns_labels = dict((ns_doc[0]["metadata"].get("labels") or {}) if ns_doc else {}, **{"kubernetes.io/metadata.name": NS})
    pods = {}
    for d in docs:
        if d.get("kind") not in ("Deployment", "StatefulSet", "Job"):
            continue
        tpl = d["spec"]["template"]
        labels = tpl["metadata"].get("labels") or {}
        name = labels.get("app.kubernetes.io/name", d["metadata"]["name"])
        ident = f"{name}/{labels.get('app.kubernetes.io/component')}" if name == "labctl" else name
        ports = {p["name"]: p["containerPort"] for c in tpl["spec"].get("initContainers", []) + tpl["spec"]["containers"]
                 for p in c.get("ports", []) if "name" in p}
        pods[ident] = Pod(ident, NS, labels, ns_labels, ports)
    others = [Pod("outside", "elsewhere", {"app": "anything"}, {"kubernetes.io/metadata.name": "elsewhere"}),
              Pod("argo-rollouts", "argo-rollouts", {"app.kubernetes.io/name": "argo-rollouts"},
                  {"kubernetes.io/metadata.name": "argo-rollouts"})]
    return pods, others


def policies_of(docs):
    return [dict(d, ns=d["metadata"].get("namespace", NS)) for d in docs if d.get("kind") == "NetworkPolicy"]
