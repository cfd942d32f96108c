//! A trace as a waterfall: one row per span, indented under its parent, a bar from its start to
//! its end on the trace's time axis. The part of a bar after its parent (or any ancestor) ended
//! is drawn apart (`▒`): that is work nobody is waiting for, the postmortem's cover ("The gateway span ends at
//! 3.0 s. Its child span keeps going to 9.8 s."). `┆` marks the moment the root span ended.

use crate::model::{self, SpanRecord};

/// One row of the waterfall.
#[derive(Debug, Clone)]
pub struct Row {
    pub depth: usize,
    pub span: SpanRecord,
    /// From the trace's first start, in ms.
    pub start_ms: f64,
    pub end_ms: f64,
    /// When its parent ended (ms from the trace's start), if the parent is in the trace.
    pub parent_end_ms: Option<f64>,
    /// How long after its parent it ended (0 if it did not outlive it).
    pub outlived_ms: f64,
    /// When the first of its ancestors ended (ms from the trace's start): from then on, whoever
    /// asked for this span's work had stopped waiting for it.
    pub caller_gone_ms: Option<f64>,
}

impl Row {
    /// The span's outcome in a few characters: its HTTP status, or `ERR`.
    pub fn outcome(&self) -> String {
        match self.span.attribute("http.response.status_code") {
            Some(code) => code.to_string(),
            None if self.span.error => "ERR".into(),
            None => String::new(),
        }
    }

    pub fn orphan(&self) -> bool {
        self.outlived_ms * 1e6 > model::ORPHAN_SLACK_NANOS as f64
    }

    /// The span went on (more than the slack) after one of its ancestors had ended.
    pub fn for_nobody(&self) -> bool {
        self.caller_gone_ms
            .is_some_and(|g| (self.end_ms - g) * 1e6 > model::ORPHAN_SLACK_NANOS as f64)
    }
}

/// The rows in tree order: each span followed by its children by start time. Spans whose parent
/// never arrived are roots of their own, after the first root.
pub fn layout(spans: &[SpanRecord]) -> Vec<Row> {
    let Some(t0) = spans.iter().map(|s| s.start_unix_nano).min() else {
        return Vec::new();
    };
    let ms = |n: u64| model::ms_between(t0, n);
    let known = |id: &str| spans.iter().any(|s| s.span_id == id);
    let mut roots: Vec<&SpanRecord> = spans
        .iter()
        .filter(|s| s.parent_span_id.as_deref().is_none_or(|p| !known(p)))
        .collect();
    roots.sort_by_key(|s| (s.start_unix_nano, std::cmp::Reverse(s.end_unix_nano)));
    let mut rows = Vec::with_capacity(spans.len());
    // (span, depth, parent, earliest end among its ancestors)
    type Item<'a> = (&'a SpanRecord, usize, Option<&'a SpanRecord>, Option<u64>);
    let mut stack: Vec<Item> = roots
        .into_iter()
        .rev()
        .map(|r| (r, 0, None, None))
        .collect();
    let mut seen = std::collections::HashSet::new();
    while let Some((span, depth, parent, gone)) = stack.pop() {
        if !seen.insert(span.span_id.as_str()) {
            continue; // a span id twice, or a cycle: draw it once
        }
        // A consumer starts work nobody waits for (model::asynchronous): its own clock, not its
        // producer's.
        let consumer = span.kind == "consumer";
        let gone = if consumer { None } else { gone };
        rows.push(Row {
            depth,
            span: span.clone(),
            start_ms: ms(span.start_unix_nano),
            end_ms: ms(span.end_unix_nano),
            parent_end_ms: parent.map(|p| ms(p.end_unix_nano)),
            outlived_ms: parent.filter(|_| !consumer).map_or(0.0, |p| {
                model::ms_between(p.end_unix_nano, span.end_unix_nano)
            }),
            caller_gone_ms: gone.map(ms),
        });
        let gone_below = Some(gone.map_or(span.end_unix_nano, |g| g.min(span.end_unix_nano)));
        let mut children: Vec<&SpanRecord> = spans
            .iter()
            .filter(|c| c.parent_span_id.as_deref() == Some(span.span_id.as_str()))
            .collect();
        children.sort_by_key(|c| (c.start_unix_nano, c.end_unix_nano));
        for c in children.into_iter().rev() {
            stack.push((c, depth + 1, Some(span), gone_below));
        }
    }
    rows
}

/// A duration for people: `640 ms`, `9.8 s`.
pub fn seconds(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// The waterfall as text, `width` columns wide (at least 60).
pub fn text(trace_id: &str, spans: &[SpanRecord], width: usize) -> String {
    let width = width.max(60);
    let rows = layout(spans);
    let Some(summary) = model::summarise(trace_id, spans) else {
        return format!("trace {trace_id}: no spans\n");
    };
    let total = rows.iter().map(|r| r.end_ms).fold(1.0f64, f64::max);
    let root_end = rows.first().map(|r| r.end_ms);
    let name_w = (width / 3).clamp(24, 44);
    let dur_w = 8;
    let out_w = 4;
    let bar_w = width - name_w - dur_w - out_w - 3;
    let per_col = total / bar_w as f64;

    let mut out = String::new();
    out.push_str(&format!(
        "trace {trace_id} · {} {} · {} spans, {} errors\n",
        summary.root,
        seconds(summary.root_ms),
        summary.spans,
        summary.error_spans
    ));
    match &summary.worst_orphan {
        Some(w) => out.push_str(&format!(
            "{} span(s) outlived their parent; the worst: {w} by {}; work went on {} after the \
             root ended\n",
            summary.orphans,
            seconds(summary.worst_orphan_ms),
            seconds(summary.past_root_ms)
        )),
        None => out.push_str("no span outlived its parent\n"),
    }
    // The time axis: 0 and the end, with the root's end marked.
    let mut axis = vec![' '; bar_w];
    let mut labels = String::new();
    if let Some(e) = root_end {
        let col = ((e / per_col) as usize).min(bar_w - 1);
        axis[col] = '┆';
        labels = format!("┆ = {} ended at {}", summary.root, seconds(e));
    }
    let head = format!(
        "{:<name_w$} {:>dur_w$} {:>out_w$} 0{}{}\n",
        "span",
        "took",
        "",
        " ".repeat(bar_w.saturating_sub(1 + seconds(total).len())),
        seconds(total)
    );
    out.push_str(&head);
    for r in &rows {
        let indent = "  ".repeat(r.depth.min(8));
        let mut name: String = format!("{indent}{}", r.span.name);
        if name.chars().count() > name_w {
            name = name.chars().take(name_w - 1).collect::<String>() + "…";
        }
        let mut bar = String::with_capacity(bar_w * 3);
        for (col, mark) in axis.iter().enumerate() {
            let (a, b) = (col as f64 * per_col, (col + 1) as f64 * per_col);
            let covered = r.start_ms < b && r.end_ms >= a;
            let past_parent = r.for_nobody() && r.caller_gone_ms.is_some_and(|g| a >= g);
            bar.push(match (covered, past_parent) {
                (true, true) => '▒',
                (true, false) => '█',
                (false, _) => *mark,
            });
        }
        let took = seconds(r.end_ms - r.start_ms);
        let flag = if r.orphan() { "!" } else { "" };
        out.push_str(&format!(
            "{name:<name_w$} {took:>dur_w$} {:>out_w$} {bar}{flag}\n",
            r.outcome()
        ));
    }
    out.push_str(&format!(
        "{labels}\n▒ = still running after its caller ended (work for nobody); ! = outlived its parent\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{legacy_hangup, span};

    #[test]
    fn rows_follow_the_tree_and_the_orphan_is_marked() {
        let rows = layout(&legacy_hangup());
        let names: Vec<(usize, &str)> = rows
            .iter()
            .map(|r| (r.depth, r.span.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (0, "edge-gateway.HandleExtract"),
                (1, "orchestrator.Extract"),
                (2, "entity.Resolve"),
                (3, "entity.Resolve.attempt.0"),
                (3, "entity.Resolve.attempt.1"),
                (3, "entity.Resolve.attempt.2"),
            ]
        );
        let orphans: Vec<&str> = rows
            .iter()
            .filter(|r| r.orphan())
            .map(|r| r.span.name.as_str())
            .collect();
        // The attempts end within entity.Resolve; entity.Resolve outlives its parent.
        assert_eq!(orphans, ["entity.Resolve"]);
    }

    #[test]
    fn the_text_waterfall_draws_the_outliving_part_apart_and_fits_its_width() {
        let text = text("t", &legacy_hangup(), 100);
        eprintln!("{text}");
        assert!(text.contains("entity.Resolve > orchestrator.Extract by 6.8 s"));
        let resolve = text
            .lines()
            .find(|l| l.trim_start().starts_with("entity.Resolve "))
            .unwrap();
        assert!(resolve.contains('█') && resolve.contains('▒'), "{resolve}");
        assert!(resolve.ends_with('!'));
        let gateway = text
            .lines()
            .find(|l| l.starts_with("edge-gateway.HandleExtract"))
            .unwrap();
        assert!(!gateway.contains('▒'), "{gateway}");
        for l in text.lines().skip(2).take(7) {
            assert!(l.chars().count() <= 101, "{l}");
        }
    }

    #[test]
    fn a_trace_that_ends_together_has_no_orphan_mark() {
        let spans = vec![
            span("a", None, "edge-gateway.HandleExtract", 0, 600),
            span("b", Some("a"), "orchestrator.Extract", 5, 640),
            span("c", Some("b"), "entity.Resolve", 10, 630),
        ];
        let text = text("t", &spans, 80);
        let rows: Vec<&str> = text.lines().skip(3).take(3).collect();
        assert!(
            rows.iter().all(|r| !r.contains('▒') && !r.ends_with('!')),
            "{text}"
        );
        assert!(rows.iter().all(|r| r.contains('█')), "{text}");
        assert!(text.contains("no span outlived its parent"));
    }
}
