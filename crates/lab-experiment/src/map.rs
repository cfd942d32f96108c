//! `labctl map`: the metastability map (Huang et al., OSDI'22, on this lab's real trigger).
//! Trigger size — how long the stale plan lasts before ANALYZE — × offered load — shares of
//! the calibrated healthy capacity — per client mode, every cell a fresh lab. The vulnerable
//! region of a metastable system is below its healthy capacity (stable until triggered) and
//! above its degraded one, so the axis spans from under the stale plan's capacity (~0.27 of
//! healthy here) towards the healthy capacity. A cell is
//! *recovered* when goodput returns to within the margin of the offered load (5 seconds in a
//! row) before the recovery window ends, counted from the end of ANALYZE; otherwise it *stayed
//! failed*: the trigger is gone and the system is not back — a metastable failure.
//!
//! Output: a heat map per mode (SVG in `report.html`), the table (`map.md`), `summary.json`.

use std::fmt::Write as _;

use serde::Serialize;

use crate::cell::{self, CellArgs, CellResult, CellSpec, Variant};
use crate::replay::{Calibration, Modes};
use crate::{Globals, Mode};
use lab_report::doc::{Block, Cell, Doc, Table};
use lab_report::html::esc;
use lab_seed::ApiKeyRecord;

#[derive(Debug, Clone, clap::Args)]
pub struct MapArgs {
    #[command(flatten)]
    pub cells: CellArgs,
    /// Offered loads, as shares of the healthy lab's measured capacity (default
    /// 0.25,0.5,0.65,0.8; --quick 0.5,0.8).
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<f64>,
    /// Trigger sizes: seconds the plan stays stale before ANALYZE (default 30,90; --quick
    /// 20,60).
    #[arg(long, value_delimiter = ',')]
    pub trigger_seconds: Vec<u64>,
    /// Which mode(s) to map.
    #[arg(long, value_enum, default_value_t = Modes::Both)]
    pub mode: Modes,
    /// Add the postmortem's rollback (cold caches) this many seconds into every trigger.
    #[arg(long)]
    pub rollback_after: Option<u64>,
    /// After the first pass, measure the cells on the border this many times in all: a cell
    /// whose repetitions disagree, or whose outcome (recovered, stayed failed, unhealthy before
    /// the trigger) differs from a neighbour's in its row or column. The border is where one run
    /// is least able to say which side a cell is on; the cells inside a region keep --repeat.
    #[arg(long)]
    pub repeat_border: Option<u32>,
}

#[derive(Clone, Serialize, serde::Deserialize)]
struct MapCell {
    mode: Mode,
    load: f64,
    rate: f64,
    trigger_seconds: u64,
    repeats: usize,
    stayed_failed: usize,
    recovery_seconds: Option<f64>,
    goodput_pct_stale: Option<f64>,
    error_5xx_pct_stale: Option<f64>,
    after_goodput_pct: Option<f64>,
    amplification_peak: Option<f64>,
    /// Goodput share before the trigger: below the recovery margin, the cell was not healthy to
    /// begin with (the load alone overloads the lab) and says nothing about metastability.
    steady_goodput_pct: Option<f64>,
    healthy_before: bool,
    /// Repetitions that proved nothing (`cell::invalid_reasons`), and why, once each: a square
    /// with only those is drawn as invalid, not as not measured.
    #[serde(default)]
    invalid: usize,
    #[serde(default)]
    invalid_why: Vec<String>,
}

/// `summary.json` of a map (beside its `run` header): what its report is drawn from ([`doc`]).
#[derive(Serialize, serde::Deserialize)]
pub struct Summary {
    calibration: Calibration,
    loads: Vec<f64>,
    trigger_seconds: Vec<u64>,
    modes: Vec<Mode>,
    recovery_window_seconds: u64,
    recovery_margin: f64,
    warmup_seconds: u64,
    repeat: u32,
    /// `--repeat-border`: the repetitions of the border cells (absent in maps before it).
    #[serde(default)]
    repeat_border: Option<u32>,
    /// The cells the border pass measured again, by id.
    #[serde(default)]
    border: Vec<String>,
    rollback_after: Option<u64>,
    map: Vec<MapCell>,
    cells: Vec<CellResult>,
    seconds: f64,
}

fn cell_id(mode: Mode, load: f64, trigger: u64) -> String {
    format!("{}-load{load:.2}-stale{trigger}s", mode.variant())
}

pub async fn run(args: &MapArgs, g: &Globals, keys: Vec<ApiKeyRecord>) -> anyhow::Result<()> {
    args.cells.validate()?;
    let (loads, triggers, modes) = grid(args)?;
    let recovery = args.cells.recovery();
    let Some((out, cal)) = cell::prepare(&args.cells, g, &keys, "map").await? else {
        return Ok(());
    };
    anyhow::ensure!(
        cal.healthy_capacity_rps.is_finite()
            && cal.healthy_capacity_rps > 0.0
            && cal.stale_capacity_rps.is_finite(),
        "the calibration has no capacities: measure one (omit --calibration)"
    );
    let specs = specs(args, &cal, &loads, &triggers, &modes)?;
    println!(
        "metastability map: {} loads × {} trigger sizes × {} mode(s) = {} cells × {}; out {}",
        loads.len(),
        triggers.len(),
        modes.len(),
        specs.len(),
        args.cells.repeat,
        out.display()
    );
    let mut all = cell::run_all(&specs, &args.cells, &cal, g, &keys, &out).await?;
    let mut border_ids = Vec::new();
    if let Some(n) = args.repeat_border {
        let first = squares(&specs, &all, &cal, args.cells.recovery_margin);
        let ids = border(&first, &loads, &triggers);
        let edge: Vec<CellSpec> = specs
            .iter()
            .filter(|s| ids.contains(&s.id))
            .cloned()
            .collect();
        if edge.is_empty() {
            println!("\nno border: every cell agrees with its neighbours");
        } else {
            println!(
                "\nthe border: {} of {} cells, each measured {n} times in all ({})",
                edge.len(),
                specs.len(),
                ids.join(", ")
            );
        }
        let mut more = args.cells.clone();
        more.repeat = n;
        // The first pass's repetitions are read back from --out, not measured again.
        more.rerun = false;
        let again = cell::run_all(&edge, &more, &cal, g, &keys, &out).await?;
        all.retain(|r| !ids.contains(&r.spec.id));
        all.extend(again);
        border_ids = ids;
    }
    // Only repetitions that proved their trigger are mapped (a square with none is drawn as
    // invalid, with the reasons); they fail the command below.
    let map = squares(&specs, &all, &cal, args.cells.recovery_margin);
    // What the measurement cost: every cell as measured (a resumed run reads most back) and
    // the calibration.
    let seconds = all.iter().map(|r| r.seconds).sum::<f64>() + cal.seconds;
    lab_report::run::write(
        &out,
        &lab_report::run::Header::new(lab_report::run::RunKind::Map, "metastability map"),
        &Summary {
            calibration: cal,
            loads,
            trigger_seconds: triggers,
            modes,
            recovery_window_seconds: recovery,
            recovery_margin: args.cells.recovery_margin,
            warmup_seconds: args.cells.warmup_seconds,
            repeat: args.cells.repeat,
            repeat_border: args.repeat_border,
            border: border_ids,
            rollback_after: args.rollback_after,
            map,
            cells: all.clone(),
            seconds,
        },
    )?;
    let md = crate::report::draw(&out)?;
    println!("\n{md}");
    println!(
        "map done in {:.1} min: {} ({})",
        seconds / 60.0,
        out.join("map.md").display(),
        out.join("report.html").display()
    );
    cell::ensure_valid(&all)
}

/// The map's axes — loads (shares of the healthy capacity), trigger sizes, modes — as asked
/// (or the defaults, smaller with `--quick`), checked.
fn grid(args: &MapArgs) -> anyhow::Result<(Vec<f64>, Vec<u64>, Vec<Mode>)> {
    let q = args.cells.quick;
    let loads: Vec<f64> = if args.loads.is_empty() {
        if q {
            vec![0.5, 0.8]
        } else {
            vec![0.25, 0.5, 0.65, 0.8]
        }
    } else {
        args.loads.clone()
    };
    let triggers: Vec<u64> = if args.trigger_seconds.is_empty() {
        if q {
            vec![20, 60]
        } else {
            vec![30, 90]
        }
    } else {
        args.trigger_seconds.clone()
    };
    anyhow::ensure!(
        loads.iter().all(|l| *l > 0.0 && *l <= 1.5),
        "--loads: every share of the healthy capacity must be in (0, 1.5]"
    );
    anyhow::ensure!(
        triggers.iter().all(|t| *t >= 5 && *t <= 900),
        "--trigger-seconds: every trigger must last 5..900 s"
    );
    if let Some(n) = args.repeat_border {
        anyhow::ensure!(
            n > args.cells.repeat,
            "--repeat-border {n}: must be more than --repeat ({}), or there is nothing to add",
            args.cells.repeat
        );
    }
    if let Some(r) = args.rollback_after {
        anyhow::ensure!(
            triggers.iter().all(|t| r < *t),
            "--rollback-after {r}: must come before the shortest trigger ends"
        );
    }
    let mut ids: Vec<String> = loads.iter().map(|l| format!("{l:.2}")).collect();
    ids.sort();
    ids.dedup();
    anyhow::ensure!(
        ids.len() == loads.len(),
        "--loads: two loads are the same to two decimals (cells are named by them)"
    );
    let modes = match args.mode {
        Modes::Both => vec![Mode::Legacy, Mode::Resilient],
        Modes::Legacy => vec![Mode::Legacy],
        Modes::Resilient => vec![Mode::Resilient],
    };
    Ok((loads, triggers, modes))
}

/// One cell per mode × trigger size × load.
fn specs(
    args: &MapArgs,
    cal: &Calibration,
    loads: &[f64],
    triggers: &[u64],
    modes: &[Mode],
) -> anyhow::Result<Vec<CellSpec>> {
    let setup = cell::setup_fingerprint(&args.cells, cal, args.cells.lab.policy.as_deref())?;
    let mut specs = Vec::new();
    for mode in modes {
        for t in triggers {
            for l in loads {
                let v = Variant {
                    id: cell_id(*mode, *l, *t),
                    label: format!(
                        "{} at {l:.2} × healthy capacity, stale {t} s",
                        mode.variant()
                    ),
                    mode: *mode,
                    flags: vec![],
                    policy: args.cells.lab.policy.clone(),
                };
                let rate = (l * cal.healthy_capacity_rps).max(1.0);
                let trigger = (*t, args.rollback_after);
                specs.push(args.cells.spec(v, rate, trigger, setup.clone()));
            }
        }
    }
    Ok(specs)
}

/// Each cell's repetitions as one square of the map: the valid ones measure it, the invalid
/// ones are counted with their reasons.
fn squares(
    specs: &[CellSpec],
    results: &[CellResult],
    cal: &Calibration,
    recovery_margin: f64,
) -> Vec<MapCell> {
    specs
        .iter()
        .map(|s| {
            let all: Vec<&CellResult> = results.iter().filter(|r| r.spec.id == s.id).collect();
            let reps: Vec<&CellResult> = all
                .iter()
                .copied()
                .filter(|r| r.invalid.is_empty())
                .collect();
            let mut invalid_why: Vec<String> =
                all.iter().flat_map(|r| r.invalid.iter().cloned()).collect();
            invalid_why.sort();
            invalid_why.dedup();
            let (recovery_seconds, stayed_failed) = cell::recovery_summary(&reps);
            let mean = |k: &str| cell::spread(&reps, k).map(|x| x.0);
            MapCell {
                mode: s.mode,
                load: s.rate / cal.healthy_capacity_rps,
                rate: s.rate,
                trigger_seconds: s.stale_seconds,
                repeats: reps.len(),
                stayed_failed,
                recovery_seconds,
                goodput_pct_stale: mean("goodput_pct"),
                error_5xx_pct_stale: mean("error_5xx_pct"),
                after_goodput_pct: mean("after_goodput_pct"),
                amplification_peak: mean("amplification_peak"),
                steady_goodput_pct: mean("steady_goodput_pct"),
                healthy_before: mean("steady_goodput_pct")
                    .is_none_or(|g| g >= 100.0 * recovery_margin),
                invalid: all.len() - reps.len(),
                invalid_why,
            }
        })
        .collect()
}

/// A square's outcome, as the border compares them: `None` not measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    UnhealthyBefore,
    Recovered,
    StayedFailed,
    /// Its repetitions disagree: a border cell by itself.
    Mixed,
}

fn outcome(c: &MapCell) -> Option<Outcome> {
    if c.repeats == 0 {
        return None;
    }
    Some(if !c.healthy_before {
        Outcome::UnhealthyBefore
    } else if c.stayed_failed == 0 {
        Outcome::Recovered
    } else if c.stayed_failed == c.repeats {
        Outcome::StayedFailed
    } else {
        Outcome::Mixed
    })
}

/// The cells on the border (`--repeat-border`), by id: mixed ones, and every measured one whose
/// outcome differs from a measured neighbour's — the next load in its row, the next trigger size
/// in its column, the same mode.
fn border(map: &[MapCell], loads: &[f64], triggers: &[u64]) -> Vec<String> {
    let mut loads = loads.to_vec();
    loads.sort_by(f64::total_cmp);
    let mut triggers = triggers.to_vec();
    triggers.sort_unstable();
    let mut ids = Vec::new();
    for c in map {
        let Some(me) = outcome(c) else { continue };
        let li = loads.iter().position(|l| (l - c.load).abs() < 1e-6);
        let ti = triggers.iter().position(|t| *t == c.trigger_seconds);
        let (Some(li), Some(ti)) = (li, ti) else {
            continue;
        };
        let mut near = Vec::new();
        for (dl, dt) in [(-1i64, 0i64), (1, 0), (0, -1), (0, 1)] {
            let (l, t) = (li as i64 + dl, ti as i64 + dt);
            if l < 0 || t < 0 || l as usize >= loads.len() || t as usize >= triggers.len() {
                continue;
            }
            near.extend(
                find(map, c.mode, loads[l as usize], triggers[t as usize]).and_then(outcome),
            );
        }
        if me == Outcome::Mixed || near.iter().any(|o| *o != me) {
            // Named by the grid's load, as the cell's spec is (its measured share of the
            // capacity can differ in the last bit).
            ids.push(cell_id(c.mode, loads[li], c.trigger_seconds));
        }
    }
    ids
}

fn find(map: &[MapCell], mode: Mode, load: f64, trigger: u64) -> Option<&MapCell> {
    map.iter()
        .find(|c| c.mode == mode && c.trigger_seconds == trigger && (c.load - load).abs() < 1e-6)
}

fn verdict(c: &MapCell) -> String {
    if c.repeats == 0 && c.invalid > 0 {
        format!(
            "**invalid** ({} repetition(s)): {}",
            c.invalid,
            c.invalid_why.join("; ")
        )
    } else if c.repeats == 0 {
        "—".into()
    } else if !c.healthy_before {
        format!(
            "**not healthy before the trigger** (goodput {}% in steady state)",
            c.steady_goodput_pct
                .map_or("—".into(), |v| format!("{v:.0}"))
        )
    } else if c.stayed_failed > 0 {
        format!("**stayed failed** ({}/{})", c.stayed_failed, c.repeats)
    } else {
        c.recovery_seconds
            .map_or("—".into(), |s| format!("recovered in {s:.0} s"))
    }
}

/// The map's report, from its summary alone: a heat map and a table per mode.
pub fn doc(s: &Summary) -> Doc {
    let (cal, loads, triggers, map) = (&s.calibration, &s.loads, &s.trigger_seconds, &s.map);
    let recovery = s.recovery_window_seconds;
    let mut d = Doc::new("Metastability map — the stale plan × offered load");
    d.para(format!(
        "Rows: how long the plan stayed stale before ANALYZE (the trigger's size). Columns: the offered load as a share of the healthy lab's measured capacity ({:.0} rps; the stale plan's is {:.0} rps, {:.2} of it). A cell not serving its load before the trigger is marked so: it says nothing about metastability. A cell recovered when goodput held ≥ {:.0}% of the offered load for 5 s in a row within {recovery} s after ANALYZE; otherwise it stayed failed — its trigger gone, the system not back. Every cell a fresh lab, a {} s closed-loop warm-up, {} repetition(s){}{}; the map took {:.0} min.",
        cal.healthy_capacity_rps,
        cal.stale_capacity_rps,
        cal.stale_capacity_rps / cal.healthy_capacity_rps,
        100.0 * s.recovery_margin,
        s.warmup_seconds,
        s.repeat,
        s.repeat_border
            .map(|n| if s.border.is_empty() {
                format!(" (and {n} for a cell on the border, but no cell's outcome differed from a neighbour's)")
            } else {
                format!(
                    " ({n} for each cell on the border — repetitions that disagree, or an outcome unlike a neighbour's: {})",
                    s.border.join(", ")
                )
            })
            .unwrap_or_default(),
        s.rollback_after
            .map(|r| format!(", the rollback {r} s into every trigger"))
            .unwrap_or_default(),
        s.seconds / 60.0
    ));
    d.why(format!(
        "The heat maps: green, recovered within {recovery} s (the number: seconds after ANALYZE), fading to amber as it takes longer; red: stayed failed; brown: not healthy even before the trigger; grey: no valid repetition (why: in the table). Small print: goodput while stale."
    ));
    d.push(Block::Figures(
        s.modes
            .iter()
            .map(|m| {
                (
                    format!("map-{}", m.variant()),
                    heat_svg(
                        map,
                        *m,
                        loads,
                        triggers,
                        recovery,
                        cal.healthy_capacity_rps / cal.stale_capacity_rps,
                    ),
                )
            })
            .collect(),
    ));
    for m in &s.modes {
        let mut head = vec!["stale for \\ load".to_string()];
        head.extend(
            loads
                .iter()
                .map(|l| format!("{l:.2}× healthy ({:.0} rps)", l * cal.healthy_capacity_rps)),
        );
        let mut t = Table::new(&head);
        for tr in triggers {
            let mut row = vec![Cell::text(format!("{tr} s"))];
            for l in loads {
                row.push(find(map, *m, *l, *tr).map_or(Cell::text("—"), |c| {
                    if c.repeats == 0 {
                        return Cell::text(verdict(c));
                    }
                    Cell::lines(vec![
                        verdict(c),
                        format!(
                            "goodput while stale {}%, after {}%",
                            c.goodput_pct_stale
                                .map_or("—".into(), |v| format!("{v:.0}")),
                            c.after_goodput_pct
                                .map_or("—".into(), |v| format!("{v:.0}"))
                        ),
                    ])
                }));
            }
            t.row(row);
        }
        let failed = map
            .iter()
            .filter(|c| c.mode == *m && c.healthy_before && c.stayed_failed > 0)
            .count();
        let n = map
            .iter()
            .filter(|c| c.mode == *m && c.healthy_before && c.repeats > 0)
            .count();
        let invalid = map
            .iter()
            .filter(|c| c.mode == *m && c.repeats == 0 && c.invalid > 0)
            .count();
        d.h2(format!("{} mode", m.variant())).table(t).para(format!(
            "{failed} of {n} cells healthy before their trigger stayed failed after it ended.{}",
            if invalid > 0 {
                format!(
                    " {invalid} cell(s) measured nothing valid (the reasons are in their squares)."
                )
            } else {
                String::new()
            }
        ));
    }
    let cost = cell::cost_line(&s.cells);
    if !cost.is_empty() {
        d.para(cost.trim_end());
    }
    d
}

/// One mode's map: rows = trigger sizes (longest on top), columns = loads.
fn heat_svg(
    map: &[MapCell],
    mode: Mode,
    loads: &[f64],
    triggers: &[u64],
    recovery: u64,
    healthy_over_stale: f64,
) -> String {
    let (cw, ch, left, top) = (120.0, 70.0, 80.0, 20.0);
    let w = left + cw * loads.len() as f64 + 10.0;
    let h = top + ch * triggers.len() as f64 + 50.0;
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'><rect width='100%' height='100%' fill='white'/>"
    );
    // Which mode's map this is: the page draws the modes side by side.
    let _ = write!(
        s,
        "<text x='{left}' y='14' font-weight='bold'>{} mode</text>",
        mode.variant()
    );
    let mut rows: Vec<u64> = triggers.to_vec();
    rows.sort_unstable_by(|a, b| b.cmp(a));
    for (ri, t) in rows.iter().enumerate() {
        let y = top + ch * ri as f64;
        let _ = write!(
            s,
            "<text x='{}' y='{}' text-anchor='end'>stale {t} s</text>",
            left - 6.0,
            y + ch / 2.0 + 4.0
        );
        for (ci, l) in loads.iter().enumerate() {
            let x = left + cw * ci as f64;
            let (fill, big, small) = match find(map, mode, *l, *t) {
                None => ("#eeeeee".to_string(), "—".to_string(), String::new()),
                Some(c) if c.repeats == 0 => (
                    "#757575".into(),
                    if c.invalid > 0 { "invalid" } else { "—" }.into(),
                    if c.invalid > 0 { "see the table" } else { "" }.into(),
                ),
                Some(c) if !c.healthy_before => (
                    "#6d4c41".into(),
                    "unhealthy before".into(),
                    format!(
                        "good {}% in steady state",
                        c.steady_goodput_pct
                            .map_or("—".into(), |v| format!("{v:.0}"))
                    ),
                ),
                Some(c) if c.stayed_failed > 0 => (
                    "#c62828".into(),
                    "stayed failed".into(),
                    format!(
                        "good {}% → {}%",
                        c.goodput_pct_stale
                            .map_or("—".into(), |v| format!("{v:.0}")),
                        c.after_goodput_pct
                            .map_or("—".into(), |v| format!("{v:.0}"))
                    ),
                ),
                Some(c) => {
                    let r = c.recovery_seconds.unwrap_or(0.0);
                    // Green fading to amber as recovery takes longer.
                    let f = (r / recovery as f64).clamp(0.0, 1.0);
                    let (r0, g0, b0) = (46.0, 160.0, 67.0);
                    let (r1, g1, b1) = (240.0, 170.0, 0.0);
                    let mix = |a: f64, b: f64| (a + (b - a) * f) as u8;
                    (
                        format!("rgb({},{},{})", mix(r0, r1), mix(g0, g1), mix(b0, b1)),
                        format!("{r:.0} s"),
                        format!(
                            "good {}% while stale",
                            c.goodput_pct_stale
                                .map_or("—".into(), |v| format!("{v:.0}"))
                        ),
                    )
                }
            };
            let _ = write!(
                s,
                "<rect x='{x}' y='{y}' width='{}' height='{}' fill='{fill}' stroke='white' stroke-width='2'/>\
                 <text x='{}' y='{}' text-anchor='middle' fill='white' font-weight='bold'>{}</text>\
                 <text x='{}' y='{}' text-anchor='middle' fill='white' font-size='10'>{}</text>",
                cw,
                ch,
                x + cw / 2.0,
                y + ch / 2.0,
                esc(&big),
                x + cw / 2.0,
                y + ch / 2.0 + 16.0,
                esc(&small)
            );
        }
    }
    let base = top + ch * rows.len() as f64;
    for (ci, l) in loads.iter().enumerate() {
        let x = left + cw * ci as f64 + cw / 2.0;
        let _ = write!(
            s,
            "<text x='{x}' y='{}' text-anchor='middle'>{:.0}% of healthy</text><text x='{x}' y='{}' text-anchor='middle' font-size='10' fill='#555'>{:.1}× the stale capacity</text>",
            base + 16.0,
            100.0 * l,
            base + 30.0,
            l * healthy_over_stale
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mc(mode: Mode, load: f64, t: u64, failed: bool, rec: f64) -> MapCell {
        MapCell {
            mode,
            load,
            rate: load * 100.0,
            trigger_seconds: t,
            repeats: 1,
            stayed_failed: usize::from(failed),
            recovery_seconds: (!failed).then_some(rec),
            goodput_pct_stale: Some(40.0),
            error_5xx_pct_stale: Some(60.0),
            after_goodput_pct: Some(if failed { 10.0 } else { 99.0 }),
            amplification_peak: Some(2.0),
            steady_goodput_pct: Some(99.5),
            healthy_before: true,
            invalid: 0,
            invalid_why: vec![],
        }
    }

    #[test]
    fn the_heat_map_paints_every_cell_by_its_outcome() {
        let mut unhealthy = mc(Mode::Legacy, 1.2, 20, true, 0.0);
        unhealthy.healthy_before = false;
        unhealthy.steady_goodput_pct = Some(60.0);
        let map = vec![
            mc(Mode::Legacy, 0.5, 20, false, 3.0),
            mc(Mode::Legacy, 0.8, 20, true, 0.0),
            mc(Mode::Legacy, 0.5, 60, false, 30.0),
            unhealthy,
        ];
        let svg = heat_svg(&map, Mode::Legacy, &[0.5, 0.8, 1.2], &[20, 60], 45, 4.0);
        assert_eq!(svg.matches("stayed failed").count(), 1, "{svg}");
        assert!(svg.contains(">legacy mode<"), "{svg}");
        assert_eq!(svg.matches("unhealthy before").count(), 1, "{svg}");
        assert!(svg.contains(">3 s<") && svg.contains(">30 s<"), "{svg}");
        // The missing cells are drawn as not measured.
        assert!(svg.contains("#eeeeee"));
        // Half the healthy capacity, where the stale plan serves a quarter, is 2x the stale one.
        assert!(
            svg.contains("50% of healthy") && svg.contains("2.0× the stale"),
            "{svg}"
        );
        let invalid = MapCell {
            repeats: 0,
            invalid: 1,
            invalid_why: vec!["the counts do not add up: load: every request got an HTTP answer (no client timeout or error): expected 10, got 9".into()],
            ..mc(Mode::Legacy, 0.8, 60, false, 0.0)
        };
        let v = verdict(&invalid);
        assert!(v.contains("invalid") && v.contains("client timeout"), "{v}");
        let map2 = [invalid];
        let svg2 = heat_svg(&map2, Mode::Legacy, &[0.8], &[60], 45, 4.0);
        assert!(svg2.contains(">invalid<"), "{svg2}");
        // A square stored by a labctl before `invalid` was kept: no repetition, so not
        // measured — not a recovery in 0 s.
        let old: MapCell = serde_json::from_value(serde_json::json!({
            "mode": "Legacy", "load": 0.8, "rate": 80.0, "trigger_seconds": 60, "repeats": 0,
            "stayed_failed": 0, "recovery_seconds": null, "goodput_pct_stale": null,
            "error_5xx_pct_stale": null, "after_goodput_pct": null, "amplification_peak": null,
            "steady_goodput_pct": null, "healthy_before": true
        }))
        .unwrap();
        assert_eq!(verdict(&old), "—");
        let svg3 = heat_svg(&[old], Mode::Legacy, &[0.8], &[60], 45, 4.0);
        assert!(svg3.contains(">—<") && !svg3.contains(">0 s<"), "{svg3}");
        let md_cell = find(&map, Mode::Legacy, 0.8, 20).unwrap();
        assert!(verdict(md_cell).contains("stayed failed"));
        assert!(verdict(find(&map, Mode::Legacy, 1.2, 20).unwrap()).contains("not healthy"));
        assert_eq!(
            cell_id(Mode::Resilient, 0.65, 90),
            "resilient-load0.65-stale90s"
        );
    }

    #[test]
    fn the_border_is_where_a_cell_differs_from_its_neighbours() {
        let (loads, triggers) = ([0.5, 0.65, 0.8, 0.95], [30, 90]);
        // Legacy: recovered left of 0.8, stayed failed from 0.8 on, in both rows.
        let mut map: Vec<MapCell> = triggers
            .iter()
            .flat_map(|t| {
                loads
                    .iter()
                    .map(move |l| mc(Mode::Legacy, *l, *t, *l >= 0.8, 2.0))
            })
            .collect();
        // Resilient: all recovered, but one cell's two repetitions disagree.
        map.extend(triggers.iter().flat_map(|t| {
            loads
                .iter()
                .map(move |l| mc(Mode::Resilient, *l, *t, false, 1.0))
        }));
        let mixed = map
            .iter_mut()
            .find(|c| c.mode == Mode::Resilient && c.load == 0.5 && c.trigger_seconds == 90)
            .unwrap();
        mixed.repeats = 2;
        mixed.stayed_failed = 1;
        let mut got = border(&map, &loads, &triggers);
        got.sort();
        assert_eq!(
            got,
            [
                "legacy-load0.65-stale30s",
                "legacy-load0.65-stale90s",
                "legacy-load0.80-stale30s",
                "legacy-load0.80-stale90s",
                // The mixed cell, and the neighbours that differ from it.
                "resilient-load0.50-stale30s",
                "resilient-load0.50-stale90s",
                "resilient-load0.65-stale90s",
            ]
        );
        // The axes as typed (unsorted), and a cell whose measured share of the capacity is a
        // bit off its grid load: named by the grid's load all the same.
        let mut off = map.clone();
        for c in off.iter_mut() {
            c.load += 1e-9;
        }
        let mut again = border(&off, &[0.95, 0.5, 0.8, 0.65], &[90, 30]);
        again.sort();
        assert_eq!(again, got);
        // A uniform map has no border; an unmeasured cell is nobody's neighbour.
        let uniform: Vec<MapCell> = loads
            .iter()
            .map(|l| mc(Mode::Legacy, *l, 30, false, 1.0))
            .chain([MapCell {
                repeats: 0,
                ..mc(Mode::Legacy, 0.5, 90, true, 0.0)
            }])
            .collect();
        assert!(border(&uniform, &loads, &triggers).is_empty());
        // Unhealthy before the trigger is an outcome of its own.
        let mut edge = uniform.clone();
        edge[3].healthy_before = false;
        assert_eq!(
            border(&edge, &loads, &triggers),
            ["legacy-load0.80-stale30s", "legacy-load0.95-stale30s"]
        );
    }
}
