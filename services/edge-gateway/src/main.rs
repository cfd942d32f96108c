use edge_gateway::{Application, Settings};

// jemalloc, not glibc's malloc: with glibc, memory a Tokio worker frees goes back to the arena
// it was allocated from, and a cache that churns (the orchestrator's full LRU, evicting and
// inserting hundreds of entries a second across workers) keeps growing RSS: measured 125 -> 183
// MB in 4 minutes after the LRU was full, and much flatter with MALLOC_ARENA_MAX=2 (one arena
// fewer per thread). With jemalloc the 30-minute soak's orchestrators held 204 -> 208 and
// 198 -> 201 MB over the second quarter-hour (docs/reports/soak.md). Every service gets the same
// allocator, so their memory can be compared.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lab_core::telemetry::init("edge-gateway", "info");
    let settings = Settings::load()?;
    let app = Application::build(settings).await?;
    let result = app
        .run_until_stopped(lab_core::server::shutdown_signal())
        .await;
    lab_core::telemetry::shutdown().await;
    result
}
