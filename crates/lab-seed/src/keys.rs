//! API keys: one per tenant, `rsl_<key_id>_<secret>`. The database keeps only the SHA-256 of the
//! whole key; the keys themselves go to `api-keys.json` (mode 0600), the lab's "customers" side.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rand::TryRngCore;
use sha2::{Digest, Sha256};

use super::plan::Plan;
use super::rng::{Rng, Stream};
use super::ApiKeyRecord;

/// Secret bytes per key: 256 bits, so a fast hash is as strong as a slow one (the schema's note).
const SECRET_BYTES: usize = 32;
/// `key_id` is 12 lowercase hex characters: 48 bits.
const KEY_ID_BITS: u32 = 48;

/// A key as issued: what the customer gets and what the database stores.
#[derive(Debug, Clone)]
pub(crate) struct IssuedKey {
    pub(crate) record: ApiKeyRecord,
    pub(crate) sha256: [u8; 32],
}

/// Issue one key per tenant. `key_id`s are derived from the seed (stable across re-seeds, easy to
/// find in logs); secrets come from the operating system's RNG and are never reproducible.
pub(crate) fn issue(plan: &Plan) -> anyhow::Result<Vec<IssuedKey>> {
    let mut ids = HashSet::with_capacity(plan.tenants.len());
    let mut keys = Vec::with_capacity(plan.tenants.len());
    for tenant in &plan.tenants {
        let mut rng = Rng::stream(plan.seed, Stream::KeyId, &[tenant.id as u64]);
        let key_id = loop {
            let candidate = format!("{:012x}", rng.next_u64() >> (64 - KEY_ID_BITS));
            if ids.insert(candidate.clone()) {
                break candidate;
            }
        };
        let mut secret = [0u8; SECRET_BYTES];
        rand::rngs::OsRng
            .try_fill_bytes(&mut secret)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context(
                "reading the operating system's random number generator for API key secrets",
            )?;
        let api_key = format!("rsl_{key_id}_{}", hex::encode(secret));
        let sha256: [u8; 32] = Sha256::digest(api_key.as_bytes()).into();
        keys.push(IssuedKey {
            record: ApiKeyRecord {
                tenant_id: tenant.id,
                key_id,
                api_key,
                entities: tenant.size,
            },
            sha256,
        });
    }
    Ok(keys)
}

/// A file written next to its final path and renamed into place by [`PendingFile::commit`], so a
/// reader never sees a half-written file and a failed seed leaves the previous one intact.
pub(crate) struct PendingFile {
    temp: PathBuf,
    target: PathBuf,
}

impl PendingFile {
    /// Write `contents` to a temporary file beside `target`, owner-only when `private`.
    pub(crate) fn write(
        target: &Path,
        private: bool,
        contents: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
    ) -> anyhow::Result<PendingFile> {
        let file_name = target
            .file_name()
            .and_then(|n| n.to_str())
            .context("output paths end in a file name")?;
        let temp = target.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            // Owner read/write only: the file holds every tenant's live credentials.
            options.mode(0o600);
        }
        #[cfg(not(unix))]
        let _ = private;
        let file = options.open(&temp).with_context(|| {
            format!(
                "creating {}; check that the data directory is writable",
                temp.display()
            )
        })?;
        let mut out = std::io::BufWriter::new(file);
        let written = contents(&mut out).and_then(|()| {
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            Ok(())
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e).with_context(|| format!("writing {}", temp.display()));
        }
        Ok(PendingFile {
            temp,
            target: target.to_path_buf(),
        })
    }

    pub(crate) fn commit(self) -> anyhow::Result<PathBuf> {
        std::fs::rename(&self.temp, &self.target).with_context(|| {
            format!(
                "moving {} to {}; the database is seeded, so re-run with --force to get a consistent pair",
                self.temp.display(),
                self.target.display()
            )
        })?;
        Ok(self.target.clone())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        // After a successful commit the temp path no longer exists; otherwise clean up.
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// Serialize the key records as a pretty JSON array.
pub(crate) fn write_records(out: &mut dyn Write, keys: &[IssuedKey]) -> anyhow::Result<()> {
    let records: Vec<&ApiKeyRecord> = keys.iter().map(|k| &k.record).collect();
    serde_json::to_writer_pretty(&mut *out, &records)?;
    out.write_all(b"\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_the_documented_shape_and_hash() {
        let plan = Plan::build(1, 1_000, 10).unwrap();
        let keys = issue(&plan).unwrap();
        assert_eq!(keys.len(), 10);
        for k in &keys {
            let parts: Vec<&str> = k.record.api_key.split('_').collect();
            assert_eq!(parts.len(), 3);
            assert_eq!(parts[0], "rsl");
            assert_eq!(parts[1], k.record.key_id);
            assert_eq!(parts[1].len(), 12);
            assert_eq!(parts[2].len(), 64);
            assert!(k.record.api_key[4..]
                .chars()
                .all(|c| c == '_' || matches!(c, '0'..='9' | 'a'..='f')));
            let digest: [u8; 32] = Sha256::digest(k.record.api_key.as_bytes()).into();
            assert_eq!(digest, k.sha256);
        }
        // Key ids are stable for a seed; secrets are not.
        let again = issue(&plan).unwrap();
        assert_eq!(keys[0].record.key_id, again[0].record.key_id);
        assert_ne!(keys[0].record.api_key, again[0].record.api_key);
    }
}
