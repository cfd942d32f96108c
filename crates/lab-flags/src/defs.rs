//! Flag definitions in flagd's JSON shape (`{"flags": {name: {state, variants, defaultVariant,
//! metadata: {description}}}}`), so the same file can feed a flagd sidecar if a team prefers one.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde::Deserialize;

/// The lab's definitions, compiled in.
pub const EMBEDDED: &str = include_str!("../../../deploy/flags/flags.json");

#[derive(Debug, Clone, PartialEq)]
pub struct Definitions {
    pub flags: BTreeMap<String, FlagDef>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlagDef {
    pub description: String,
    pub variants: BTreeMap<String, serde_json::Value>,
    pub default_variant: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    flags: BTreeMap<String, RawFlag>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFlag {
    state: String,
    variants: BTreeMap<String, serde_json::Value>,
    default_variant: String,
    #[serde(default)]
    metadata: BTreeMap<String, serde_json::Value>,
}

impl Definitions {
    pub fn embedded() -> Self {
        Self::parse(EMBEDDED).expect("deploy/flags/flags.json is valid (a test checks it)")
    }

    pub fn parse(json: &str) -> anyhow::Result<Self> {
        let file: File = serde_json::from_str(json).context("parsing flag definitions")?;
        let mut flags = BTreeMap::new();
        for (name, raw) in file.flags {
            if raw.state != "ENABLED" {
                bail!(
                    "flag {name}: state {:?} is not supported (use ENABLED)",
                    raw.state
                );
            }
            if !raw.variants.contains_key(&raw.default_variant) {
                bail!(
                    "flag {name}: defaultVariant {:?} is not one of its variants",
                    raw.default_variant
                );
            }
            let description = raw
                .metadata
                .get("description")
                .and_then(|d| d.as_str())
                .with_context(|| format!("flag {name}: metadata.description is required"))?
                .to_string();
            flags.insert(
                name,
                FlagDef {
                    description,
                    variants: raw.variants,
                    default_variant: raw.default_variant,
                },
            );
        }
        Ok(Self { flags })
    }

    /// Check that `variant` is valid for `flag`, with an error that lists the choices.
    pub fn check(&self, flag: &str, variant: &str) -> anyhow::Result<()> {
        let Some(def) = self.flags.get(flag) else {
            bail!(
                "unknown flag {flag:?}; defined: {}",
                self.flags.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        };
        if !def.variants.contains_key(variant) {
            bail!(
                "flag {flag}: unknown variant {variant:?}; choose one of {}",
                def.variants.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_definitions_parse_and_name_the_postmortem_kill_switches() {
        let d = Definitions::embedded();
        for f in [
            "client.mode",
            "retries.entity.enabled",
            "retries.gateway.enabled",
        ] {
            assert!(d.flags.contains_key(f), "{f}");
        }
        assert!(d.check("client.mode", "legacy").is_ok());
        assert!(d.check("client.mode", "broken").is_err());
        assert!(d.check("nope", "x").is_err());
    }

    #[test]
    fn parse_rejects_a_default_that_is_not_a_variant() {
        let bad = r#"{"flags":{"x":{"state":"ENABLED","variants":{"a":1},"defaultVariant":"b","metadata":{"description":"d"}}}}"#;
        assert!(Definitions::parse(bad).is_err());
    }
}
