//! `labctl tenants list | create-key | revoke`: API key administration.
//!
//! A key is `rsl_<key_id>_<secret>`: 12 hex characters of id, 64 of secret from the operating
//! system's RNG. PostgreSQL keeps only the SHA-256 of the whole key; the key is printed once, at
//! creation, and cannot be shown again. The gateway caches verified keys for `auth.cache_ttl_ms`
//! (10 s), so a revocation bites within that.

use anyhow::{bail, Context};
use rand::TryRngCore;
use sha2::{Digest, Sha256};

#[derive(Debug, clap::Subcommand)]
pub enum TenantsCommand {
    /// Tenants with their plan, rate and keys (ids only; keys are never stored).
    List {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<i64>,
        /// At most this many tenants (largest ids last).
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// Issue a new key for a tenant and print it (once).
    CreateKey { tenant: i64 },
    /// Revoke a key by its id (the 12 hex characters after `rsl_`).
    Revoke { key_id: String },
}

pub async fn run(cmd: TenantsCommand, database_url: &str) -> anyhow::Result<()> {
    let mut conn = lab_db::connect(database_url).await?;
    match cmd {
        TenantsCommand::List { tenant, limit } => {
            let rows: Vec<(i64, String, String, i32, Option<String>)> = sqlx::query_as(
                "SELECT t.id, t.name, t.plan, t.rate_limit_rps,
                        string_agg(k.key_id || CASE WHEN k.revoked_at IS NULL THEN '' ELSE ' (revoked)' END,
                                   ', ' ORDER BY k.created_at)
                 FROM tenants t LEFT JOIN api_keys k ON k.tenant_id = t.id
                 WHERE $1::bigint IS NULL OR t.id = $1
                 GROUP BY t.id ORDER BY t.id LIMIT $2",
            )
            .bind(tenant)
            .bind(limit)
            .fetch_all(&mut conn)
            .await?;
            println!(
                "{:>6}  {:<28} {:<10} {:>8}  keys",
                "tenant", "name", "plan", "rps"
            );
            for (id, name, plan, rps, keys) in rows {
                println!(
                    "{id:>6}  {name:<28} {plan:<10} {rps:>8}  {}",
                    keys.unwrap_or_default()
                );
            }
        }
        TenantsCommand::CreateKey { tenant } => {
            let key = create_key(&mut conn, tenant).await?;
            println!("{key}");
            eprintln!("(shown once: only its SHA-256 is stored)");
        }
        TenantsCommand::Revoke { key_id } => {
            revoke(&mut conn, &key_id).await?;
            println!("revoked {key_id}; the gateways stop accepting it within their auth cache TTL (10 s)");
        }
    }
    Ok(())
}

/// Issue a key for `tenant`; returns the key (its hash is stored).
pub async fn create_key(conn: &mut sqlx::PgConnection, tenant: i64) -> anyhow::Result<String> {
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)")
        .bind(tenant)
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        bail!("no tenant {tenant}; `labctl tenants list` shows them");
    }
    let mut bytes = [0u8; 6 + 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("reading the operating system's random number generator")?;
    let key_id = hex::encode(&bytes[..6]);
    let key = format!("rsl_{key_id}_{}", hex::encode(&bytes[6..]));
    let sha256 = Sha256::digest(key.as_bytes()).to_vec();
    sqlx::query("INSERT INTO api_keys (key_id, tenant_id, key_sha256) VALUES ($1, $2, $3)")
        .bind(&key_id)
        .bind(tenant)
        .bind(sha256)
        .execute(&mut *conn)
        .await
        .context("storing the key's hash")?;
    Ok(key)
}

/// Revoke `key_id` (idempotent for an already revoked key; an unknown id is an error).
pub async fn revoke(conn: &mut sqlx::PgConnection, key_id: &str) -> anyhow::Result<()> {
    let updated = sqlx::query(
        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE key_id = $1",
    )
    .bind(key_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if updated == 0 {
        bail!("no key with id {key_id:?} (the 12 hex characters after `rsl_`)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::{fixtures, TestDb};

    #[tokio::test]
    async fn create_key_stores_only_the_hash_and_revoke_marks_it() {
        let db = TestDb::new().await;
        fixtures::tenant_with_key(&db.url, 7).await;
        let mut conn = lab_db::connect(&db.url).await.unwrap();
        let key = create_key(&mut conn, 7).await.unwrap();
        assert!(
            key.starts_with("rsl_") && key.len() == 4 + 12 + 1 + 64,
            "{key}"
        );
        let key_id = &key[4..16];
        let (hash, revoked): (Vec<u8>, bool) = sqlx::query_as(
            "SELECT key_sha256, revoked_at IS NOT NULL FROM api_keys WHERE key_id = $1",
        )
        .bind(key_id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(hash, Sha256::digest(key.as_bytes()).to_vec());
        assert!(!revoked);
        let stored_plain: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM api_keys WHERE position(convert_to($1, 'UTF8') in key_sha256) > 0",
        )
        .bind(&key)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(stored_plain, 0, "the key itself is stored nowhere");

        revoke(&mut conn, key_id).await.unwrap();
        revoke(&mut conn, key_id).await.unwrap();
        let revoked: bool =
            sqlx::query_scalar("SELECT revoked_at IS NOT NULL FROM api_keys WHERE key_id = $1")
                .bind(key_id)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert!(revoked);
        assert!(revoke(&mut conn, "ffffffffffff").await.is_err());
        assert!(create_key(&mut conn, 999).await.is_err());
    }
}
