//! Reading the Prometheus text format back: the game-day scraper and the tests both need it.

/// One sample: `name{labels} value`, with the label text as exposed (`status="200",le="0.5"`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: &'a str,
    pub value: f64,
}

impl Sample<'_> {
    /// `name{labels}` as exposed, a stable key for one series.
    pub fn series(&self) -> String {
        if self.labels.is_empty() {
            self.name.to_string()
        } else {
            format!("{}{{{}}}", self.name, self.labels)
        }
    }
}

/// Every sample in `text` (comments and unparsable lines skipped).
pub fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = split_series(series);
            Some(Sample {
                name,
                labels,
                value: value.parse().ok()?,
            })
        })
}

/// `name{labels}` → (`name`, `labels`); a series without labels gives `""`.
pub fn split_series(series: &str) -> (&str, &str) {
    match series.split_once('{') {
        Some((name, rest)) => (name, rest.trim_end_matches('}')),
        None => (series, ""),
    }
}

/// A label's value in exposed label text.
pub fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("{name}=\"");
    let start = labels
        .match_indices(&needle)
        .find(|(i, _)| *i == 0 || labels.as_bytes()[i - 1] == b',')?
        .0
        + needle.len();
    let end = labels[start..].find('"')? + start;
    Some(&labels[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_labels_read_the_text_format() {
        let text = "# HELP x y\nreq_total{status=\"200\",le=\"0.5\"} 3\nup 1\nbad line\n";
        let s: Vec<Sample> = samples(text).collect();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].name, s[0].value), ("req_total", 3.0));
        assert_eq!(s[0].series(), "req_total{status=\"200\",le=\"0.5\"}");
        assert_eq!(label(s[0].labels, "le"), Some("0.5"));
        assert_eq!(label(s[0].labels, "status"), Some("200"));
        assert_eq!(
            label("xle=\"1\"", "le"),
            None,
            "a label name must match whole"
        );
        assert_eq!((s[1].name, s[1].labels), ("up", ""));
    }
}
