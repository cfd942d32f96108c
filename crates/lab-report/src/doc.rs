//! One report model, two renderers: every experiment describes its report once, as a [`Doc`]
//! (headings, paragraphs, lists, tables, verdict cells, figures), and [`Doc::markdown`] and
//! [`Doc::html`] draw it. No experiment writes Markdown or HTML of its own, so the `.md` a
//! reviewer diffs and the page a game day watches cannot say different things.
//!
//! Text is a small subset of Markdown inline syntax — `` `code` ``, `**bold**` and
//! `[text](link)` — written as such into the `.md` and translated for the page.

use std::fmt::Write as _;

use crate::verdict::{Outcome, Verdict};

/// A report: its title and what follows it, in order.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub title: String,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone)]
pub enum Block {
    /// A section heading, level 2 or deeper (the title is the only level 1).
    Heading(u8, String),
    Para(String),
    /// A short explanation under a heading or a figure (small type on the page).
    Why(String),
    List(Vec<String>),
    /// A numbered list.
    Ordered(Vec<String>),
    Table(Table),
    /// Inline SVG figures side by side, one per column (the page only: a Markdown file has
    /// the tables the figures are drawn from). Each: its element id and the SVG.
    Figures(Vec<(String, String)>),
}

/// How a cell reads: as measured, or as a verdict (coloured on the page, bold in Markdown
/// when it is not the outcome hoped for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Good,
    Bad,
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Cell {
    /// One or more lines (a check per line).
    pub lines: Vec<String>,
    pub tone: Tone,
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell {
            lines: vec![s.into()],
            tone: Tone::Plain,
        }
    }

    pub fn lines(lines: Vec<String>) -> Cell {
        Cell {
            lines,
            tone: Tone::Plain,
        }
    }

    /// A verdict's outcome in its words (`fix`: judged for the fixed client).
    pub fn outcome(v: &Verdict, fix: bool) -> Cell {
        Cell {
            lines: vec![v.words(fix).to_string()],
            tone: tone(v.outcome),
        }
    }

    /// The verdict on a postmortem's step in the words of one (reproduced, or for the fixed
    /// client the fix held), whether or not the verdict quotes the step's line.
    pub fn step(v: &Verdict, fix: bool) -> Cell {
        Cell {
            lines: vec![v.outcome.words(fix).to_string()],
            tone: tone(v.outcome),
        }
    }

    /// A verdict's checks, one per line.
    pub fn checks(v: &Verdict) -> Cell {
        Cell::lines(v.checks.iter().map(|c| c.markdown()).collect())
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::text(s)
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::text(s)
    }
}

pub fn tone(o: Outcome) -> Tone {
    match o {
        Outcome::Reproduced => Tone::Good,
        Outcome::NotReproduced => Tone::Bad,
        Outcome::NotMeasured => Tone::Unknown,
    }
}

#[derive(Debug, Clone)]
pub struct Table {
    pub head: Vec<String>,
    /// Per column: numbers, right-aligned.
    pub numeric: Vec<bool>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with `head`; a column whose name starts with `>` is numeric (the `>` dropped).
    pub fn new<S: AsRef<str>>(head: &[S]) -> Table {
        let (head, numeric) = head
            .iter()
            .map(|h| match h.as_ref().strip_prefix('>') {
                Some(n) => (n.to_string(), true),
                None => (h.as_ref().to_string(), false),
            })
            .unzip();
        Table {
            head,
            numeric,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) -> &mut Table {
        self.rows.push(cells);
        self
    }
}

impl Doc {
    pub fn new(title: impl Into<String>) -> Doc {
        Doc {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    pub fn h2(&mut self, s: impl Into<String>) -> &mut Doc {
        self.push(Block::Heading(2, s.into()))
    }

    pub fn h3(&mut self, s: impl Into<String>) -> &mut Doc {
        self.push(Block::Heading(3, s.into()))
    }

    pub fn para(&mut self, s: impl Into<String>) -> &mut Doc {
        self.push(Block::Para(s.into()))
    }

    pub fn why(&mut self, s: impl Into<String>) -> &mut Doc {
        self.push(Block::Why(s.into()))
    }

    pub fn list(&mut self, items: Vec<String>) -> &mut Doc {
        if !items.is_empty() {
            self.push(Block::List(items));
        }
        self
    }

    pub fn table(&mut self, t: Table) -> &mut Doc {
        self.push(Block::Table(t))
    }

    pub fn push(&mut self, b: Block) -> &mut Doc {
        self.blocks.push(b);
        self
    }

    pub fn extend(&mut self, other: Doc) -> &mut Doc {
        self.blocks.extend(other.blocks);
        self
    }

    /// The report as GitHub-flavoured Markdown.
    pub fn markdown(&self) -> String {
        let mut md = format!("# {}\n", self.title);
        for b in &self.blocks {
            if matches!(b, Block::Figures(_)) {
                continue;
            }
            md.push('\n');
            match b {
                Block::Heading(level, s) => {
                    let _ = writeln!(md, "{} {s}", "#".repeat((*level).max(2) as usize));
                }
                Block::Para(s) | Block::Why(s) => {
                    let _ = writeln!(md, "{s}");
                }
                Block::List(items) => {
                    for i in items {
                        let _ = writeln!(md, "- {i}");
                    }
                }
                Block::Ordered(items) => {
                    for (n, i) in items.iter().enumerate() {
                        let _ = writeln!(md, "{}. {i}", n + 1);
                    }
                }
                Block::Table(t) => table_md(&mut md, t),
                Block::Figures(_) => {}
            }
        }
        md
    }

    /// The report as one self-contained page (no network at view time).
    pub fn html(&self) -> String {
        let mut h = String::new();
        crate::html::head(&mut h, &self.title);
        for b in &self.blocks {
            match b {
                Block::Heading(level, s) => {
                    let l = (*level).clamp(2, 4);
                    let _ = writeln!(h, "<h{l}>{}</h{l}>", inline(s));
                }
                Block::Para(s) => {
                    let _ = writeln!(h, "<p>{}</p>", inline(s));
                }
                Block::Why(s) => {
                    let _ = writeln!(h, "<p class=why>{}</p>", inline(s));
                }
                Block::List(items) | Block::Ordered(items) => {
                    let tag = if matches!(b, Block::List(_)) {
                        "ul"
                    } else {
                        "ol"
                    };
                    let _ = write!(h, "<{tag}>");
                    for i in items {
                        let _ = write!(h, "<li>{}</li>", inline(i));
                    }
                    let _ = writeln!(h, "</{tag}>");
                }
                Block::Table(t) => table_html(&mut h, t),
                Block::Figures(figs) => {
                    let _ = write!(
                        h,
                        "<div class=grid style='grid-template-columns:repeat({},1fr)'>",
                        figs.len().max(1)
                    );
                    for (id, svg) in figs {
                        let _ = write!(h, "<div id='{}'>{svg}</div>", crate::html::esc(id));
                    }
                    h.push_str("</div>\n");
                }
            }
        }
        h.push_str("</body></html>\n");
        h
    }
}

fn table_md(md: &mut String, t: &Table) {
    let cell = |c: &Cell| {
        let s = c.lines.join("<br>").replace('|', "\\|");
        match c.tone {
            Tone::Bad | Tone::Unknown if !s.is_empty() => format!("**{s}**"),
            _ => s,
        }
    };
    row_md(md, t.head.iter().cloned());
    let _ = writeln!(
        md,
        "|{}",
        t.numeric
            .iter()
            .map(|n| if *n { "---:|" } else { "---|" })
            .collect::<String>()
    );
    for r in &t.rows {
        row_md(md, r.iter().map(cell));
    }
}

/// `| a | b |`, an empty cell as `| |`.
fn row_md(md: &mut String, cells: impl Iterator<Item = String>) {
    md.push('|');
    for c in cells {
        if c.is_empty() {
            md.push_str(" |");
        } else {
            let _ = write!(md, " {c} |");
        }
    }
    md.push('\n');
}

fn table_html(h: &mut String, t: &Table) {
    h.push_str("<table><tr>");
    for c in &t.head {
        let _ = write!(h, "<th>{}</th>", inline(c));
    }
    h.push_str("</tr>\n");
    for r in &t.rows {
        h.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let text = c.lines.iter().map(|l| inline(l)).collect::<Vec<_>>();
            let text = text.join("<br>");
            let text = match c.tone {
                Tone::Plain => text,
                Tone::Good => format!("<span class=ok>{text}</span>"),
                Tone::Bad => format!("<span class=no>{text}</span>"),
                Tone::Unknown => format!("<span class=na>{text}</span>"),
            };
            let align = if t.numeric.get(i).copied().unwrap_or(false) {
                " class=n"
            } else {
                ""
            };
            let _ = write!(h, "<td{align}>{text}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// The inline subset of Markdown (`` `code` ``, `**bold**`, `[text](link)`) as HTML, every
/// other character escaped.
pub fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    let mut bold = false;
    while let Some(i) = rest.find(['`', '*', '[']) {
        out.push_str(&crate::html::esc(&rest[..i]));
        let tail = &rest[i..];
        if let Some(code) = tail.strip_prefix('`') {
            if let Some(end) = code.find('`') {
                let _ = write!(out, "<code>{}</code>", crate::html::esc(&code[..end]));
                rest = &code[end + 1..];
                continue;
            }
        } else if let Some(after) = tail.strip_prefix("**") {
            if bold || after.contains("**") {
                out.push_str(if bold { "</b>" } else { "<b>" });
                bold = !bold;
                rest = after;
                continue;
            }
        } else if let Some(link) = tail.strip_prefix('[') {
            if let Some((text, after)) = link.split_once("](") {
                if let Some((href, after)) = after.split_once(')') {
                    if !text.contains('[') {
                        let _ = write!(
                            out,
                            "<a href=\"{}\">{}</a>",
                            crate::html::esc(href),
                            inline(text)
                        );
                        rest = after;
                        continue;
                    }
                }
            }
        }
        out.push_str(&crate::html::esc(&tail[..1]));
        rest = &tail[1..];
    }
    out.push_str(&crate::html::esc(rest));
    if bold {
        out.push_str("</b>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::Check;

    fn sample() -> Doc {
        let mut d = Doc::new("Replay: <x>");
        d.h2("Calibration").why("How the rate was **chosen**.");
        let mut t = Table::new(&["step", ">goodput %", "verdict"]);
        let v = Verdict::of(
            "storm",
            vec![Check::measured(
                "error_5xx_pct ≥ 10",
                Some(3.0),
                None,
                |x| x >= 10.0,
            )],
        )
        .about("10:07 the storm");
        t.row(vec![
            "a | b".into(),
            "61.2".into(),
            Cell::outcome(&v, false),
        ]);
        t.row(vec![
            "`labctl backfill`".into(),
            Cell::checks(&v),
            Cell::outcome(&Verdict::of("ok", vec![]), true),
        ]);
        d.table(t);
        d.list(vec!["see [the runbook](runbooks/x.md)".into()]);
        d.push(Block::Figures(vec![("p-legacy".into(), "<svg/>".into())]));
        d
    }

    #[test]
    fn markdown_is_github_flavoured_with_verdicts_bold_when_not_hoped_for() {
        let md = sample().markdown();
        assert!(
            md.starts_with("# Replay: <x>\n\n## Calibration\n\nHow the rate"),
            "{md}"
        );
        assert!(
            md.contains("| step | goodput % | verdict |\n|---|---:|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| a \\| b | 61.2 | **not reproduced** |"),
            "{md}"
        );
        assert!(md.contains("✘ `error_5xx_pct ≥ 10`: 3"), "{md}");
        assert!(md.contains("- see [the runbook](runbooks/x.md)\n"), "{md}");
        assert!(!md.contains("svg"), "figures are the page's only: {md}");
    }

    #[test]
    fn html_escapes_text_and_translates_the_inline_subset() {
        let h = sample().html();
        assert!(h.contains("<h1>Replay: &lt;x&gt;</h1>"), "{h}");
        assert!(
            h.contains("<p class=why>How the rate was <b>chosen</b>.</p>"),
            "{h}"
        );
        assert!(h.contains("<td class=n>61.2</td>"), "{h}");
        assert!(h.contains("<span class=no>not reproduced</span>"), "{h}");
        assert!(h.contains("<code>labctl backfill</code>"), "{h}");
        assert!(
            h.contains("<a href=\"runbooks/x.md\">the runbook</a>"),
            "{h}"
        );
        assert!(h.contains("<div id='p-legacy'><svg/></div>"), "{h}");
        assert!(h.ends_with("</body></html>\n"));
    }

    #[test]
    fn inline_leaves_unpaired_marks_as_text() {
        assert_eq!(inline("2 * 3 < 7"), "2 * 3 &lt; 7");
        assert_eq!(inline("a `b"), "a `b");
        assert_eq!(inline("[x] y"), "[x] y");
        assert_eq!(inline("**b** `<c>`"), "<b>b</b> <code>&lt;c&gt;</code>");
    }
}
