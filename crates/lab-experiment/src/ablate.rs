//! `labctl ablate`: the fix taken apart on the real trigger. Every cell is the postmortem's
//! morning in small — the calibrated load, the stale plan, the rollback's cold caches ten
//! seconds into it, ANALYZE — run on a fresh lab with one client configuration:
//!
//! - **legacy**, and legacy with one control that exists outside the fixed client (shallow
//!   probes, boot warm-up, one retry layer: the gateway's retries off);
//! - **base**: the fixed client with every `resilience.*` control off — what remains is what
//!   no flag separates (one retry layer, a per-attempt budget, retryable classes, shallow
//!   probes, boot warm-up) — and base plus each control alone;
//! - **all**: the fixed client as shipped, all but each control, and the adaptive limits in
//!   place of the static one.
//!
//! The report ranks the controls by the goodput each buys, and tests the postmortem's claims
//! on the numbers (`ablate.md`, `report.html`, `summary.json`).

use std::fmt::Write as _;

use serde::Serialize;

use crate::cell::{self, CellArgs, CellResult, CellSpec, Variant};
use crate::replay::Calibration;
use crate::{Globals, Mode};

mod claims;
use claims::claims;
use lab_report::doc::{Block, Cell as DocCell, Doc, Table};
use lab_report::html::esc;
use lab_report::verdict::Verdict;
use lab_seed::ApiKeyRecord;

#[derive(Debug, Clone, clap::Args)]
pub struct AblateArgs {
    #[command(flatten)]
    pub cells: CellArgs,
    /// The load as a share of the stale plan's measured capacity (the replay's operating point).
    #[arg(long, default_value_t = crate::replay::STALE_UTILISATION)]
    pub stale_utilisation: f64,
    /// How long the plan stays stale before ANALYZE (default 60 s; --quick 40 s).
    #[arg(long)]
    pub stale_seconds: Option<u64>,
    /// Hold the stale plan alone, without the rollback ten seconds into it.
    #[arg(long)]
    pub no_rollback: bool,
    /// Run only these cells (ids, comma-separated; see --list).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Print the matrix's cells and exit.
    #[arg(long)]
    pub list: bool,
    /// Teams' client policies (files, comma-separated; see load/policies/), each run as one
    /// more cell in resilient mode and scored against the lab's fix (`all`).
    #[arg(long, value_delimiter = ',')]
    pub policies: Vec<std::path::PathBuf>,
}

/// A control of the fixed client that a `resilience.*` flag switches on its own.
struct Control {
    id: &'static str,
    label: &'static str,
    flag: &'static str,
}

const CLIENT_CONTROLS: &[Control] = &[
    Control {
        id: "deadline",
        label: "deadline propagation + cancellation",
        flag: "resilience.deadline_propagation",
    },
    Control {
        id: "retry_budget",
        label: "retry budget",
        flag: "resilience.retry_budget",
    },
    Control {
        id: "jitter",
        label: "full jitter",
        flag: "resilience.jitter",
    },
    Control {
        id: "breaker",
        label: "circuit breaker",
        flag: "resilience.breaker",
    },
    Control {
        id: "concurrency_limit",
        label: "concurrency limit (static, 16 per orchestrator)",
        flag: "resilience.concurrency_limit",
    },
];

/// Which group a cell belongs to (its reference for the ranking).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
enum Group {
    /// Legacy and legacy + one control: reference `legacy`.
    Legacy,
    /// base and base + one control: reference `base`.
    Base,
    /// all and all but one (or all with a variant): reference `all`.
    All,
    /// A team's policy file: reference `all`, the lab's fix.
    Policy,
}

struct Cell {
    id: String,
    policy: Option<std::path::PathBuf>,
    label: String,
    group: Group,
    mode: Mode,
    flags: Vec<(String, String)>,
    /// In the --quick matrix.
    quick: bool,
}

fn flags(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(f, v)| (f.to_string(), v.to_string()))
        .collect()
}

/// The matrix, in the report's order.
fn matrix() -> Vec<Cell> {
    let mut cells = vec![Cell {
        policy: None,
        id: "legacy".into(),
        label: "legacy (no control)".into(),
        group: Group::Legacy,
        mode: Mode::Legacy,
        flags: vec![],
        quick: true,
    }];
    for (id, label, f, v) in [
        (
            "legacy+shallow_probes",
            "legacy + shallow probes",
            "readiness.depth",
            "shallow",
        ),
        (
            "legacy+warmup",
            "legacy + boot warm-up",
            "cache.warmup_on_boot",
            "on",
        ),
        (
            "legacy+one_retry_layer",
            "legacy + one retry layer (gateway retries off)",
            "retries.gateway.enabled",
            "off",
        ),
    ] {
        cells.push(Cell {
            policy: None,
            id: id.into(),
            label: label.into(),
            group: Group::Legacy,
            mode: Mode::Legacy,
            flags: flags(&[(f, v)]),
            quick: false,
        });
    }
    let all_off: Vec<(&str, &str)> = CLIENT_CONTROLS.iter().map(|c| (c.flag, "off")).collect();
    cells.push(Cell {
        policy: None,
        id: "base".into(),
        label: "base (fixed client, every resilience.* off)".into(),
        group: Group::Base,
        mode: Mode::Resilient,
        flags: flags(&all_off),
        quick: true,
    });
    for c in CLIENT_CONTROLS {
        let f: Vec<(&str, &str)> = CLIENT_CONTROLS
            .iter()
            .filter(|o| o.id != c.id)
            .map(|o| (o.flag, "off"))
            .collect();
        cells.push(Cell {
            policy: None,
            id: format!("base+{}", c.id),
            label: format!("base + {}", c.label),
            group: Group::Base,
            mode: Mode::Resilient,
            flags: flags(&f),
            quick: true,
        });
    }
    cells.push(Cell {
        policy: None,
        id: "all".into(),
        label: "all (the fixed client as shipped)".into(),
        group: Group::All,
        mode: Mode::Resilient,
        flags: vec![],
        quick: true,
    });
    for c in CLIENT_CONTROLS {
        cells.push(Cell {
            policy: None,
            id: format!("all-{}", c.id),
            label: format!("all but {}", c.label),
            group: Group::All,
            mode: Mode::Resilient,
            flags: flags(&[(c.flag, "off")]),
            quick: false,
        });
    }
    for (id, label, f, v) in [
        (
            "all-shallow_probes",
            "all but shallow probes (deep readiness)",
            "readiness.depth",
            "deep",
        ),
        (
            "all-warmup",
            "all but boot warm-up",
            "cache.warmup_on_boot",
            "off",
        ),
        // entity-service's fair turns act on budgeted requests only, so on `base` (deadline
        // propagation off: no budget is sent) "alone" would be `base` again: removed from
        // `all` only.
        (
            "all-tenant_fairness",
            "all but fair turns between tenants at entity-service's pool",
            "resilience.tenant_fairness",
            "off",
        ),
        // Pushback comes only on refusals of budgeted requests (deadline propagation on):
        // removed from `all` only, as the fair turns.
        (
            "all-pushback",
            "all but the retry's wait for entity-service's pushback",
            "resilience.pushback",
            "off",
        ),
        (
            "all+static",
            "all, the static limit (16 per orchestrator) for the callee's admission",
            "resilience.concurrency_adaptive",
            "off",
        ),
        (
            "all+aimd",
            "all, adaptive limit (AIMD) for the callee's admission",
            "resilience.concurrency_adaptive",
            "on",
        ),
        (
            "all+vegas",
            "all, adaptive limit (Vegas) for the callee's admission",
            "resilience.concurrency_adaptive",
            "vegas",
        ),
    ] {
        cells.push(Cell {
            policy: None,
            id: id.into(),
            label: label.into(),
            group: Group::All,
            mode: Mode::Resilient,
            flags: flags(&[(f, v)]),
            quick: false,
        });
    }
    cells
}

/// One row of the report: a cell's repetitions, summarised.
#[derive(Serialize, serde::Deserialize)]
struct Row {
    id: String,
    label: String,
    group: Group,
    repeats: usize,
    /// Mean over repetitions.
    goodput_pct: Option<f64>,
    error_5xx_pct: Option<f64>,
    /// Goodput share gained over the group's reference (legacy, base) or lost when the control
    /// is removed from `all` (negative: removing it costs).
    delta_goodput_pp: Option<f64>,
    recovery_seconds: Option<f64>,
    stayed_failed: usize,
    metrics: std::collections::BTreeMap<String, (f64, f64, f64)>,
}

/// `summary.json` of an ablation (beside its `run` header): what its report is drawn from
/// ([`doc`]).
#[derive(Serialize, serde::Deserialize)]
pub struct Summary {
    calibration: Calibration,
    rate: f64,
    stale_seconds: u64,
    rollback_after: Option<u64>,
    repeat: u32,
    quick: bool,
    /// Every cell's lab and its warm-up and recovery rule (the report's first paragraph).
    lab: Shape,
    rows: Vec<Row>,
    claims: Vec<Verdict>,
    cells: Vec<CellResult>,
    seconds: f64,
}

#[derive(Serialize, serde::Deserialize)]
struct Shape {
    orchestrators: u16,
    entity_services: u16,
    warmup_seconds: u64,
    recovery_margin: f64,
}

/// The metrics of the table, with their units (aggregates over the stale window; see
/// [`cell::aggregate`]).
const COLUMNS: &[(&str, &str, usize)] = &[
    ("error_5xx_pct", "5xx %", 1),
    ("goodput_pct", "goodput % of offered", 1),
    ("amplification", "amplification (mean)", 2),
    (
        "retry_amplification_peak_1s",
        "retries' amplification, 1-s peak",
        2,
    ),
    (
        "gateway_attempts_per_first_peak",
        "attempts/first gateway→orch (peak)",
        2,
    ),
    (
        "orchestrator_attempts_per_first_peak",
        "attempts/first orch→entity (peak)",
        2,
    ),
    (
        "retry_amplified_seconds_longest",
        "longest run of retries amplifying > 1.2× (s)",
        0,
    ),
    ("abandoned_pct", "abandoned work %", 1),
    (
        "orchestrator_tasks_max_peak",
        "orchestrator tasks (peak)",
        0,
    ),
    (
        "orchestrator_rss_mb_max_peak",
        "orchestrator RSS MB (peak)",
        0,
    ),
    (
        "db_connections_max_peak",
        "PostgreSQL connections (peak)",
        0,
    ),
    ("oom_kills", "OOM kills", 0),
    ("entity_calls_total", "entity-service calls (whole cell)", 0),
    ("after_goodput_pct", "goodput % after ANALYZE", 1),
];

/// `labctl ablate --list`: the matrix, and which cells --quick runs.
pub fn list() {
    for c in matrix() {
        println!(
            "{:<24} {:<9} {}{}",
            c.id,
            c.mode.variant(),
            c.label,
            if c.quick { "  [quick]" } else { "" }
        );
    }
}

/// Refuse what the ablation cannot run: a load past 3× the stale capacity, an `--only` cell
/// the matrix lacks, a lab-wide `--policy` (policies are cells of their own here).
fn check_args(args: &AblateArgs, all: &[Cell]) -> anyhow::Result<()> {
    args.cells.validate()?;
    anyhow::ensure!(
        args.stale_utilisation > 0.0 && args.stale_utilisation <= 3.0,
        "--stale-utilisation must be in (0, 3]"
    );
    for id in &args.only {
        anyhow::ensure!(
            all.iter().any(|c| &c.id == id),
            "--only {id}: no such cell (labctl ablate --list)"
        );
    }
    anyhow::ensure!(
        args.cells.lab.policy.is_none(),
        "labctl ablate: name policies with --policies A.toml,B.toml (each becomes a cell scored \
         against the lab's fix; the other cells keep the lab's own client)"
    );
    Ok(())
}

/// A cell per `--policies` file: the team's policy in resilient mode, every control on.
fn policy_cells(args: &AblateArgs) -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for path in &args.policies {
        let p = lab_native::policy::load(path)?;
        println!("policy {}: {}", p.name, p.summary);
        cells.push(Cell {
            policy: Some(p.path.clone()),
            id: format!("policy-{}", p.name),
            label: format!("policy {} (resilient mode, every control on)", p.name),
            group: Group::Policy,
            mode: Mode::Resilient,
            flags: vec![],
            quick: true,
        });
    }
    Ok(cells)
}

/// The cells to run: `--only`'s, else the matrix (its quick subset with `--quick`); then the
/// policies'.
fn chosen<'a>(args: &AblateArgs, all: &'a [Cell], policy_cells: &'a [Cell]) -> Vec<&'a Cell> {
    all.iter()
        .filter(|c| {
            if args.only.is_empty() {
                c.quick || !args.cells.quick
            } else {
                args.only.contains(&c.id)
            }
        })
        .chain(policy_cells.iter())
        .collect()
}

/// Every chosen cell at `rate`, with the trigger (stale seconds, rollback after).
fn specs(
    args: &AblateArgs,
    cal: &Calibration,
    chosen: &[&Cell],
    rate: f64,
    trigger: (u64, Option<u64>),
) -> anyhow::Result<Vec<CellSpec>> {
    chosen
        .iter()
        .map(|c| {
            let v = Variant {
                id: c.id.clone(),
                label: c.label.clone(),
                mode: c.mode,
                flags: c.flags.clone(),
                policy: c.policy.clone(),
            };
            let setup = cell::setup_fingerprint(&args.cells, cal, c.policy.as_deref())?;
            Ok(args.cells.spec(v, rate, trigger, setup))
        })
        .collect::<anyhow::Result<_>>()
}

pub async fn run(args: &AblateArgs, g: &Globals, keys: Vec<ApiKeyRecord>) -> anyhow::Result<()> {
    let all = matrix();
    check_args(args, &all)?;
    let policy_cells = policy_cells(args)?;
    let chosen = chosen(args, &all, &policy_cells);
    let q = args.cells.quick;
    let stale_seconds = args.stale_seconds.unwrap_or(if q { 40 } else { 60 });
    let rollback_after = (!args.no_rollback).then_some(10);
    anyhow::ensure!(
        stale_seconds >= 5 && rollback_after.is_none_or(|r| r < stale_seconds),
        "--stale-seconds must be at least 5 and longer than the 10 s before the rollback"
    );

    let Some((out, cal)) = cell::prepare(&args.cells, g, &keys, "ablate").await? else {
        return Ok(());
    };
    let rate = (args.stale_utilisation * cal.stale_capacity_rps).max(1.0);
    anyhow::ensure!(
        rate.is_finite(),
        "the calibration has no stale capacity: measure one (omit --calibration)"
    );
    println!(
        "ablation: {} cells × {} at {rate:.0} rps ({:.2} × stale capacity {:.0} rps), stale {stale_seconds} s{}; out {}",
        chosen.len(),
        args.cells.repeat,
        args.stale_utilisation,
        cal.stale_capacity_rps,
        rollback_after.map(|r| format!(", rollback at +{r} s")).unwrap_or_default(),
        out.display()
    );
    let specs = specs(args, &cal, &chosen, rate, (stale_seconds, rollback_after))?;
    let all = cell::run_all(&specs, &args.cells, &cal, g, &keys, &out).await?;
    // Only cells that proved their trigger are ranked; the others fail the command below.
    let results = cell::valid(&all);
    let rows = rows(&chosen, &results);
    let mut claims = claims(&rows);
    if args.cells.repeat == 1 {
        for c in &mut claims {
            c.evidence
                .push_str(" (one repetition per cell: no spread measured; --repeat 3 to see one)");
        }
    }
    // What the measurement cost: every cell as measured (a resumed run reads most back) and
    // the calibration.
    let seconds = all.iter().map(|r| r.seconds).sum::<f64>() + cal.seconds;
    let header = lab_report::run::Header::new(lab_report::run::RunKind::Ablation, "ablation")
        // The postmortem's claims, reproduced or not (as ablate.md and the page word them).
        .judged("claims", false, &claims);
    let lab = Shape {
        orchestrators: args.cells.lab.orchestrators,
        entity_services: args.cells.lab.entity_services,
        warmup_seconds: args.cells.warmup_seconds,
        recovery_margin: args.cells.recovery_margin,
    };
    lab_report::run::write(
        &out,
        &header,
        &Summary {
            calibration: cal,
            rate,
            stale_seconds,
            rollback_after,
            repeat: args.cells.repeat,
            quick: q,
            lab,
            rows,
            claims,
            cells: all.clone(),
            seconds,
        },
    )?;
    let md = crate::report::draw(&out)?;
    println!("\n{md}");
    println!(
        "ablation done in {:.1} min: {} ({})",
        seconds / 60.0,
        out.join("ablate.md").display(),
        out.join("report.html").display()
    );
    cell::ensure_valid(&all)
}

fn rows(cells: &[&Cell], results: &[CellResult]) -> Vec<Row> {
    let of =
        |id: &str| -> Vec<&CellResult> { results.iter().filter(|r| r.spec.id == id).collect() };
    let mean = |id: &str, key: &str| cell::spread(&of(id), key).map(|s| s.0);
    cells
        .iter()
        .map(|c| {
            let reps = of(&c.id);
            let (recovery_seconds, stayed_failed) = cell::recovery_summary(&reps);
            let reference = match c.group {
                Group::Legacy => "legacy",
                Group::Base => "base",
                Group::All | Group::Policy => "all",
            };
            let g = mean(&c.id, "goodput_pct");
            let delta = if c.id == reference {
                None
            } else {
                match (g, mean(reference, "goodput_pct")) {
                    (Some(a), Some(b)) => Some(a - b),
                    _ => None,
                }
            };
            let metrics = COLUMNS
                .iter()
                .filter_map(|(k, _, _)| cell::spread(&reps, k).map(|s| (k.to_string(), s)))
                .collect();
            Row {
                id: c.id.clone(),
                label: c.label.clone(),
                group: c.group,
                repeats: reps.len(),
                goodput_pct: g,
                error_5xx_pct: mean(&c.id, "error_5xx_pct"),
                delta_goodput_pp: delta,
                recovery_seconds,
                stayed_failed,
                metrics,
            }
        })
        .collect()
}

fn row<'a>(rows: &'a [Row], id: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.id == id)
}

fn metric(rows: &[Row], id: &str, key: &str) -> Option<f64> {
    row(rows, id)?.metrics.get(key).map(|s| s.0)
}

/// Goodput below half the offered load while the plan is stale: a collapse; above: a partial
/// degradation. The postmortem's 34% 5xx was a collapse in its own words.
const COLLAPSE_BELOW_PCT: f64 = 50.0;

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |v| format!("{v:.digits$}"))
}

/// The ablation's report, from its summary alone.
pub fn doc(s: &Summary) -> Doc {
    let (cal, rate, rows) = (&s.calibration, s.rate, &s.rows[..]);
    let mut d = Doc::new(format!(
        "Ablation of the fix on the real trigger — {rate:.0} rps ({:.2} × the stale capacity of {:.0} rps)",
        rate / cal.stale_capacity_rps,
        cal.stale_capacity_rps
    ));
    d.para(format!(
        "Every cell: a fresh lab ({} orchestrators, {} entity-services, memory limit {}), a {} s closed-loop warm-up, then at {rate:.0} rps open loop: steady, the plan flip (`backfill --only invalidate`) held {} s{}, `ANALYZE`, and the recovery window. Figures are over the stale window (plan flip → ANALYZE) unless named otherwise; recovery = the first of 5 seconds in a row with goodput ≥ {:.0}% of offered, counted from the end of ANALYZE. Healthy capacity {:.0} rps, stale {:.0} rps. {} cell(s) × {} repetition(s){}; the matrix took {:.0} min.",
        s.lab.orchestrators,
        s.lab.entity_services,
        cal.memory_limit_bytes.map_or("none".into(), |b| format!("{} MiB", b >> 20)),
        s.lab.warmup_seconds,
        s.stale_seconds,
        s.rollback_after
            .map(|r| format!(" with the postmortem's rollback (`rollout restart orchestrator`: cold caches) {r} s into it"))
            .unwrap_or_default(),
        100.0 * s.lab.recovery_margin,
        cal.healthy_capacity_rps,
        cal.stale_capacity_rps,
        rows.len(),
        s.repeat,
        if s.repeat > 1 { " (mean, and min–max in brackets)" } else { " (one each: no spread measured)" },
        s.seconds / 60.0
    ));
    d.h2("Goodput while the plan is stale, per cell")
        .why("Bars: goodput as a share of the offered load (red: legacy and legacy + one control; orange: base + one control; green: the full fix and all but one; blue: your policies). The thin dark bar under each is the 5xx share.")
        .push(Block::Figures(vec![("bars".into(), bars_svg(rows))]));
    rankings_doc(&mut d, rows);
    // The postmortem's claim reproduced or not: a claim, not a mode's fix.
    let mut t = Table::new(&["claim", "verdict", "checks", "evidence"]);
    for c in &s.claims {
        t.row(vec![
            c.postmortem.as_deref().unwrap_or("").into(),
            DocCell::outcome(c, false),
            DocCell::checks(c),
            c.evidence.as_str().into(),
        ]);
    }
    d.h2("The postmortem's claims").table(t);
    cells_doc(&mut d, rows);
    d.para("What the cells cannot separate: the retryable classes and the per-attempt budget are the fixed client's code, not flags — they are in `base`; one retry layer is tested on legacy (`legacy+one_retry_layer`), since the fixed gateway always makes one attempt.");
    let cost = cell::cost_line(&s.cells);
    if !cost.is_empty() {
        d.para(cost.trim_end());
    }
    d
}

/// The rankings: each control alone, each removed from the fix, the fix's variants, and the
/// teams' policies against the lab's fix.
fn rankings_doc(d: &mut Doc, rows: &[Row]) {
    d.h2("Which single control buys the most goodput");
    let with_delta = |f: &dyn Fn(&Row) -> bool| -> Vec<&Row> {
        rows.iter()
            .filter(|r| r.delta_goodput_pp.is_some() && f(r))
            .collect()
    };
    ranking_table(
        d,
        "Each control alone",
        "Goodput gained over the cell's reference: legacy for the controls outside the client, base (the fixed client with every `resilience.*` off) for the client's own.",
        with_delta(&|r| matches!(r.group, Group::Legacy | Group::Base)),
        1.0,
    );
    ranking_table(
        d,
        "Each control removed from the full fix",
        "Goodput lost when only this control is taken out of `all` (the most negative: the control the fix leans on most).",
        with_delta(&|r| r.group == Group::All && r.id.starts_with("all-")),
        -1.0,
    );
    ranking_table(
        d,
        "Variants of the full fix",
        "The adaptive limits in place of the static one, against `all`.",
        with_delta(&|r| r.group == Group::All && r.id.starts_with("all+")),
        1.0,
    );

    let policies: Vec<&Row> = rows.iter().filter(|r| r.group == Group::Policy).collect();
    if !policies.is_empty() {
        let mut t = Table::new(&[
            "policy",
            ">goodput % while stale",
            ">Δ vs the lab's fix (pp)",
            ">5xx %",
            ">recovery after ANALYZE",
        ]);
        if let Some(all) = rows.iter().find(|r| r.id == "all") {
            t.row(vec![
                "the lab's fix (`all`)".into(),
                fmt(all.goodput_pct, 1).into(),
                "—".into(),
                fmt(all.error_5xx_pct, 1).into(),
                recovery_text(all).into(),
            ]);
        }
        for r in policies {
            t.row(vec![
                r.label.as_str().into(),
                fmt(r.goodput_pct, 1).into(),
                r.delta_goodput_pp
                    .map_or("—".into(), |d| format!("{d:+.1}"))
                    .into(),
                fmt(r.error_5xx_pct, 1).into(),
                recovery_text(r).into(),
            ]);
        }
        d.h2("Your policies against the lab's fix").table(t);
    }
}

/// One ranking table: `list` by its goodput gain (`sign` -1: by its loss).
fn ranking_table(d: &mut Doc, title: &str, what: &str, mut list: Vec<&Row>, sign: f64) {
    if list.is_empty() {
        return;
    }
    list.sort_by(|a, b| {
        let k = |r: &Row| sign * r.delta_goodput_pp.unwrap_or(0.0);
        k(b).total_cmp(&k(a))
    });
    let mut t = Table::new(&[
        ">rank",
        "cell",
        ">goodput % while stale",
        ">Δ vs reference (pp)",
        ">5xx %",
        ">recovery after ANALYZE",
    ]);
    for (i, r) in list.iter().enumerate() {
        t.row(vec![
            (i + 1).to_string().into(),
            r.label.as_str().into(),
            fmt(r.goodput_pct, 1).into(),
            format!("{:+.1}", r.delta_goodput_pp.unwrap_or(f64::NAN)).into(),
            fmt(r.error_5xx_pct, 1).into(),
            recovery_text(r).into(),
        ]);
    }
    d.h3(title).para(what).table(t);
}

/// Every cell's figures (mean, with the spread over repetitions).
fn cells_doc(d: &mut Doc, rows: &[Row]) {
    let mut head = vec!["cell".to_string()];
    head.extend(COLUMNS.iter().map(|c| format!(">{}", c.1)));
    head.push(">recovery after ANALYZE".into());
    let mut t = Table::new(&head);
    for r in rows {
        let mut row = vec![DocCell::text(format!("{} `{}`", r.label, r.id))];
        for (k, _, digits) in COLUMNS {
            row.push(cell::fmt_spread(r.metrics.get(*k).copied(), r.repeats, *digits).into());
        }
        row.push(recovery_text(r).into());
        t.row(row);
    }
    d.h2("Every cell").table(t);
}

fn recovery_text(r: &Row) -> String {
    if r.stayed_failed > 0 {
        format!("stayed failed ({}/{})", r.stayed_failed, r.repeats)
    } else {
        r.recovery_seconds
            .map_or("—".into(), |s| format!("{s:.0} s"))
    }
}

/// Goodput while stale per cell, as horizontal bars (the 5xx share as a red bar beside it).
fn bars_svg(rows: &[Row]) -> String {
    let (w, row_h, left) = (900.0, 22.0, 330.0);
    let h = 40.0 + row_h * rows.len() as f64;
    // Room right of a full bar for its label.
    let x = |pct: f64| left + (w - left - 170.0) * pct.clamp(0.0, 100.0) / 100.0;
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\
         <rect width='100%' height='100%' fill='white'/>"
    );
    for pct in [0.0, 25.0, 50.0, 75.0, 100.0] {
        let _ = write!(
            s,
            "<line x1='{0}' x2='{0}' y1='20' y2='{1}' stroke='#ddd'/><text x='{0}' y='14' text-anchor='middle'>{pct:.0}%</text>",
            x(pct),
            h - 10.0
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = 24.0 + row_h * i as f64;
        let colour = match r.group {
            Group::Legacy => "#d62728",
            Group::Base => "#ff7f0e",
            Group::All => "#2ca02c",
            Group::Policy => "#1f77b4",
        };
        let g = r.goodput_pct.unwrap_or(0.0);
        let e = r.error_5xx_pct.unwrap_or(0.0);
        let _ = write!(
            s,
            "<text x='{}' y='{}' text-anchor='end'>{}</text>\
             <rect x='{left}' y='{}' width='{}' height='9' fill='{colour}'/>\
             <rect x='{left}' y='{}' width='{}' height='5' fill='#7f0000'/>\
             <text x='{}' y='{}' font-size='10'>{g:.1}% good · {e:.1}% 5xx</text>",
            left - 8.0,
            y + 10.0,
            esc(&r.id),
            y + 1.0,
            x(g) - left,
            y + 11.0,
            x(e) - left,
            x(g) + 4.0,
            y + 10.0
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, group: Group, goodput: f64, calls: f64, run: f64) -> Row {
        let mut metrics = std::collections::BTreeMap::new();
        metrics.insert("entity_calls_total".to_string(), (calls, calls, calls));
        metrics.insert(
            "retry_amplified_seconds_longest".to_string(),
            (run, run, run),
        );
        Row {
            id: id.into(),
            label: id.into(),
            group,
            repeats: 1,
            goodput_pct: Some(goodput),
            error_5xx_pct: Some(100.0 - goodput),
            delta_goodput_pp: None,
            recovery_seconds: Some(3.0),
            stayed_failed: 0,
            metrics,
        }
    }

    #[test]
    fn the_matrix_has_every_control_alone_and_removed_and_a_quick_subset() {
        let m = matrix();
        for c in CLIENT_CONTROLS {
            let alone = m.iter().find(|x| x.id == format!("base+{}", c.id)).unwrap();
            // Alone: every other client control off, this one left at its default (on).
            assert_eq!(alone.flags.len(), CLIENT_CONTROLS.len() - 1);
            assert!(!alone.flags.iter().any(|(f, _)| f == c.flag));
            let removed = m.iter().find(|x| x.id == format!("all-{}", c.id)).unwrap();
            assert_eq!(removed.flags, vec![(c.flag.to_string(), "off".to_string())]);
        }
        let ids: Vec<&str> = m.iter().map(|c| c.id.as_str()).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "cell ids must be unique: {ids:?}");
        let quick = m.iter().filter(|c| c.quick).count();
        assert_eq!(quick, 8, "legacy, base, five alone, all");
        // Every flag named is a real flag with a real variant.
        let defs = lab_flags::Definitions::embedded();
        for c in &m {
            for (f, v) in &c.flags {
                defs.check(f, v).unwrap();
            }
        }
    }

    #[test]
    fn claims_follow_the_numbers_both_ways() {
        use lab_report::verdict::Outcome::*;
        let mut rows = vec![
            row("legacy", Group::Legacy, 20.0, 9000.0, 30.0),
            row("base", Group::Base, 30.0, 8000.0, 20.0),
            row("base+retry_budget", Group::Base, 80.0, 5000.0, 0.0),
            row("base+jitter", Group::Base, 35.0, 7000.0, 15.0),
            row("base+concurrency_limit", Group::Base, 60.0, 6000.0, 4.0),
            row("base+deadline", Group::Base, 50.0, 6500.0, 6.0),
            row("base+breaker", Group::Base, 45.0, 6600.0, 7.0),
        ];
        // Four of five controls measured: the ranking claim cannot be decided.
        let partial: Vec<Row> = rows
            .iter()
            .filter(|r| r.id != "base+breaker")
            .map(|r| row(&r.id, r.group, r.goodput_pct.unwrap(), 0.0, 0.0))
            .collect();
        assert_eq!(
            claims(&partial)[0].outcome,
            NotMeasured,
            "{:?}",
            claims(&partial)[0]
        );
        let c = claims(&rows);
        assert_eq!(c[0].outcome, Reproduced, "{:?}", c[0]);
        assert_eq!(c[1].outcome, Reproduced, "{:?}", c[1]);
        assert_eq!(c[2].outcome, Reproduced, "{:?}", c[2]);
        assert_eq!(c[3].outcome, Reproduced, "{:?}", c[3]);
        // Flip the numbers: the same claims fail.
        rows[2].goodput_pct = Some(40.0);
        rows[2]
            .metrics
            .insert("retry_amplified_seconds_longest".into(), (9.0, 9.0, 9.0));
        rows[4].goodput_pct = Some(45.0);
        rows[3]
            .metrics
            .insert("entity_calls_total".into(), (8500.0, 8500.0, 8500.0));
        let c = claims(&rows);
        assert_eq!(c[0].outcome, NotReproduced, "{:?}", c[0]);
        assert_eq!(c[1].outcome, NotReproduced, "{:?}", c[1]);
        assert_eq!(c[2].outcome, NotReproduced, "{:?}", c[2]);
        assert_eq!(c[3].outcome, NotReproduced, "{:?}", c[3]);
        // Nothing collapsed and nothing amplified: those claims are untested, not "supported".
        for r in rows.iter_mut() {
            r.goodput_pct = Some(90.0);
            r.metrics
                .insert("retry_amplified_seconds_longest".into(), (0.0, 0.0, 0.0));
        }
        let c = claims(&rows);
        assert_eq!(c[1].outcome, NotMeasured, "{:?}", c[1]);
        assert_eq!(c[2].outcome, NotMeasured, "{:?}", c[2]);
    }

    #[test]
    fn the_jitter_claim_shows_each_pair_and_holds_only_when_every_pair_has_fewer_calls() {
        use lab_report::verdict::Outcome::*;
        let with_calls = |pairs: &[(&str, f64)]| -> Vec<Row> {
            pairs
                .iter()
                .map(|(id, calls)| {
                    let mut r = row(id, Group::Base, 50.0, 0.0, 0.0);
                    r.metrics
                        .insert("entity_calls_total".into(), (*calls, *calls, *calls));
                    r
                })
                .collect()
        };
        let jitter = |pairs: &[(&str, f64)]| claims(&with_calls(pairs))[3].clone();
        // +3.8% and +0.3% (issue 24: once labelled "no difference beyond 2%"): each pair shown.
        let mixed = jitter(&[
            ("base", 1000.0),
            ("base+jitter", 1038.0),
            ("all-jitter", 1000.0),
            ("all", 1003.0),
        ]);
        assert_eq!(mixed.outcome, NotReproduced);
        let shown = mixed.checks_markdown();
        assert!(
            shown.contains(": 3.8") && shown.contains(": 0.3"),
            "{shown}"
        );
        let fewer = jitter(&[
            ("base", 1000.0),
            ("base+jitter", 950.0),
            ("all-jitter", 1000.0),
            ("all", 970.0),
        ]);
        assert_eq!(fewer.outcome, Reproduced, "{fewer:?}");
        // One pair only measured: it decides; none: not measured.
        let one = jitter(&[("base", 1000.0), ("base+jitter", 990.0)]);
        assert_eq!((one.checks.len(), one.outcome), (1, NotReproduced));
        assert_eq!(jitter(&[("base", 1000.0)]).outcome, NotMeasured);
    }

    #[test]
    fn the_report_is_drawn_from_the_summary_as_written_bars_claims_and_every_cell() {
        let replay: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../docs/reports/data/replay-incident-summary.json"),
            )
            .unwrap(),
        )
        .unwrap();
        let mut rows = vec![
            row("legacy", Group::Legacy, 20.0, 9000.0, 30.0),
            row("base", Group::Base, 30.0, 8000.0, 20.0),
            row("base+retry_budget", Group::Base, 80.0, 5000.0, 0.0),
            row("all", Group::All, 85.0, 4000.0, 0.0),
        ];
        rows[2].delta_goodput_pp = Some(50.0);
        let claims = claims(&rows);
        let written = Summary {
            calibration: serde_json::from_value(replay["calibration"].clone()).unwrap(),
            rate: 150.0,
            stale_seconds: 60,
            rollback_after: Some(20),
            repeat: 1,
            quick: true,
            lab: Shape {
                orchestrators: 2,
                entity_services: 2,
                warmup_seconds: 30,
                recovery_margin: 0.9,
            },
            rows,
            claims,
            cells: Vec::new(),
            seconds: 600.0,
        };
        let json = serde_json::to_vec(&written).unwrap();
        let read: Summary = serde_json::from_slice(&json).unwrap();
        let d = doc(&read);
        let (md, html) = (d.markdown(), d.html());
        assert_eq!(
            md,
            doc(&written).markdown(),
            "what was written is what is drawn"
        );
        assert!(
            md.contains("| 1 | base+retry_budget | 80.0 | +50.0 |"),
            "{md}"
        );
        assert!(md.contains("| legacy `legacy` |"), "{md}");
        assert!(md.contains("## The postmortem's claims"), "{md}");
        assert!(
            html.contains("<div id='bars'><svg"),
            "the bars, on the page only"
        );
        assert!(!md.contains("<svg"));
        // A claim's verdict in the claim's words, coloured on the page.
        let first = &read.claims[0];
        assert!(html.contains(&format!(
            "<span class={}>{}</span>",
            match first.outcome {
                lab_report::verdict::Outcome::Reproduced => "ok",
                lab_report::verdict::Outcome::NotReproduced => "no",
                lab_report::verdict::Outcome::NotMeasured => "na",
            },
            first.words(false)
        )));
    }
}
