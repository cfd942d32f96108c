//! Small, explicit fixtures: a tenant with an API key, entities.

use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};

/// A tenant with one active API key.
#[derive(Debug, Clone)]
pub struct TenantKey {
    pub tenant_id: i64,
    pub key_id: String,
    pub api_key: String,
}

/// Create tenant `tenant_id` with one API key (`rsl_<key_id>_<secret>`, hash stored).
pub async fn tenant_with_key(db_url: &str, tenant_id: i64) -> TenantKey {
    let mut conn = PgConnection::connect(db_url).await.expect("connect");
    sqlx::query("INSERT INTO tenants (id, name) VALUES ($1, $2)")
        .bind(tenant_id)
        .bind(format!("Tenant {tenant_id}"))
        .execute(&mut conn)
        .await
        .expect("insert tenant");
    let key_id = format!("{:012x}", 0xabc000000000_u64 + tenant_id as u64);
    let secret = format!("{:064x}", tenant_id as u128 * 0x9e3779b97f4a7c15);
    let api_key = format!("rsl_{key_id}_{secret}");
    let hash = Sha256::digest(api_key.as_bytes()).to_vec();
    sqlx::query("INSERT INTO api_keys (key_id, tenant_id, key_sha256) VALUES ($1, $2, $3)")
        .bind(&key_id)
        .bind(tenant_id)
        .bind(hash)
        .execute(&mut conn)
        .await
        .expect("insert api key");
    TenantKey {
        tenant_id,
        key_id,
        api_key,
    }
}

/// Revoke a key.
pub async fn revoke(db_url: &str, key_id: &str) {
    let mut conn = PgConnection::connect(db_url).await.expect("connect");
    sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE key_id = $1")
        .bind(key_id)
        .execute(&mut conn)
        .await
        .expect("revoke");
}

/// Insert entities `(id, tenant, kind, canonical name, popularity)`; the normalized name is
/// computed with the lab's own rule.
pub async fn entities(db_url: &str, rows: &[(i64, i64, &str, &str, i32)]) {
    let mut conn = PgConnection::connect(db_url).await.expect("connect");
    for (id, tenant, kind, name, popularity) in rows {
        sqlx::query(
            "INSERT INTO entities (id, tenant_id, kind, canonical_name, normalized_name, external_ref, source, popularity)
             VALUES ($1, $2, $3, $4, $5, $6, 'fixture', $7)",
        )
        .bind(id)
        .bind(tenant)
        .bind(kind)
        .bind(name)
        .bind(lab_api::text::normalize(name))
        .bind(format!("fx-{id}"))
        .bind(popularity)
        .execute(&mut conn)
        .await
        .expect("insert entity");
    }
}

/// Set a tenant's plan rate (requests per second).
pub async fn set_rate_limit(db_url: &str, tenant_id: i64, rps: i32) {
    let mut conn = PgConnection::connect(db_url).await.expect("connect");
    sqlx::query("UPDATE tenants SET rate_limit_rps = $2 WHERE id = $1")
        .bind(tenant_id)
        .bind(rps)
        .execute(&mut conn)
        .await
        .expect("set rate limit");
}
