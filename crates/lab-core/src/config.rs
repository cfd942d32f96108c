//! Layered configuration.
//!
//! Order, later wins:
//! 1. the service's defaults (`config/<service>.toml`, compiled into the binary so it runs from
//!    any directory and in any container; every number there carries a one-line why);
//! 2. the file named by `LAB_CONFIG_FILE`, if set (must exist);
//! 3. environment variables `LAB_<SECTION>__<KEY>` (e.g. `LAB_HTTP__PORT=8080`,
//!    `LAB_DATABASE__URL=postgres://...`). Only sections the service's defaults declare are read,
//!    so the scripts' own `LAB_*` variables (`LAB_TOOLS_DIR`, ...) never collide with it; inside a
//!    section, unknown keys are an error (structs use `deny_unknown_fields`), so a typo in an
//!    environment variable fails loudly at startup instead of being ignored.

use std::collections::HashSet;

use anyhow::Context;
use config::{Config, Environment, File, FileFormat};
use serde::de::DeserializeOwned;

/// Load `T` from `defaults` (TOML text), `LAB_CONFIG_FILE` and the `LAB_*` environment.
pub fn load<T: DeserializeOwned>(service: &str, defaults: &str) -> anyhow::Result<T> {
    load_from(service, defaults, std::env::vars())
}

/// As [`load`], with an explicit environment (tests).
pub fn load_from<T: DeserializeOwned>(
    service: &str,
    defaults: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<T> {
    let sections: HashSet<String> = defaults
        .parse::<toml_like::Table>()
        .map(|t| t.sections)
        .unwrap_or_default();
    let env: Vec<(String, String)> = env.into_iter().collect();
    let config_file = env
        .iter()
        .find(|(k, _)| k == "LAB_CONFIG_FILE")
        .map(|(_, v)| v.clone());
    let mut builder = Config::builder().add_source(File::from_str(defaults, FileFormat::Toml));
    if let Some(path) = &config_file {
        builder = builder.add_source(File::with_name(path).required(true));
    }
    let selected: config::Map<String, String> = env
        .into_iter()
        .filter(|(k, _)| {
            k.strip_prefix("LAB_")
                .and_then(|rest| rest.split_once("__"))
                .is_some_and(|(section, _)| sections.contains(&section.to_ascii_lowercase()))
        })
        .collect();
    builder = builder.add_source(
        Environment::with_prefix("LAB")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(selected)),
    );
    let cfg = builder
        .build()
        .with_context(|| format!("{service}: reading configuration"))?;
    cfg.try_deserialize::<T>().with_context(|| {
        format!(
            "{service}: invalid configuration (check LAB_CONFIG_FILE{} and LAB_<SECTION>__<KEY> variables)",
            config_file.map(|p| format!(" = {p}")).unwrap_or_default()
        )
    })
}

/// A comma-separated list of base URLs (`LAB_ENTITY__URLS`, `LAB_UPSTREAM__ORCHESTRATORS`):
/// trimmed, trailing slashes removed, empty items dropped.
pub fn url_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty())
        .collect()
}

/// The top-level keys of a TOML text — its tables and any root-level value, dotted keys and
/// inline tables included (`cache.capacity = 1` is `cache`) — or why it does not parse.
pub fn top_level_keys(text: &str) -> anyhow::Result<Vec<String>> {
    let map: config::Map<String, config::Value> = Config::builder()
        .add_source(File::from_str(text, FileFormat::Toml))
        .build()?
        .try_deserialize()?;
    let mut keys: Vec<String> = map.into_keys().map(|k| k.to_ascii_lowercase()).collect();
    keys.sort();
    Ok(keys)
}

/// The few facts we need from a TOML defaults file without pulling a TOML parser of our own:
/// its `[section]` names.
mod toml_like {
    use std::collections::HashSet;
    use std::str::FromStr;

    pub struct Table {
        pub sections: HashSet<String>,
    }

    impl FromStr for Table {
        type Err = std::convert::Infallible;
        fn from_str(s: &str) -> Result<Self, Self::Err> {
            let sections = s
                .lines()
                .map(str::trim)
                .filter_map(|l| l.strip_prefix('[')?.strip_suffix(']'))
                .filter_map(|name| name.split('.').next())
                .map(|name| name.trim().to_ascii_lowercase())
                .collect();
            Ok(Table { sections })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Http {
        port: u16,
        host: String,
    }
    #[derive(Debug, Deserialize)]
    struct Settings {
        http: Http,
    }

    const DEFAULTS: &str = "[http]\n# why\nport = 8080\nhost = \"127.0.0.1\"\n";

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn url_list_trims_and_drops_empty_items() {
        assert_eq!(
            url_list(" http://a:1/, ,http://b:2 ,"),
            vec!["http://a:1", "http://b:2"]
        );
        assert!(url_list("").is_empty());
    }

    #[test]
    fn load_from_env_overrides_defaults() {
        let s: Settings = load_from("t", DEFAULTS, env(&[("LAB_HTTP__PORT", "9000")])).unwrap();
        assert_eq!(s.http.port, 9000);
        assert_eq!(s.http.host, "127.0.0.1");
    }

    #[test]
    fn load_from_ignores_other_tools_variables() {
        let s: Settings = load_from(
            "t",
            DEFAULTS,
            env(&[("LAB_TOOLS_DIR", "/x"), ("LAB_STATE__X", "1")]),
        )
        .unwrap();
        assert_eq!(s.http.port, 8080);
    }

    #[test]
    fn load_from_rejects_a_typo_inside_a_known_section() {
        let err =
            load_from::<Settings>("t", DEFAULTS, env(&[("LAB_HTTP__PROT", "1")])).unwrap_err();
        assert!(format!("{err:#}").contains("prot"), "{err:#}");
    }

    #[test]
    fn load_from_rejects_a_non_number() {
        assert!(
            load_from::<Settings>("t", DEFAULTS, env(&[("LAB_HTTP__PORT", "eighty")])).is_err()
        );
    }
}
