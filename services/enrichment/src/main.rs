use enrichment::{Application, Settings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lab_core::telemetry::init("enrichment", "info");
    let settings = Settings::load()?;
    let app = Application::build(settings).await?;
    let result = app
        .run_until_stopped(lab_core::server::shutdown_signal())
        .await;
    lab_core::telemetry::shutdown().await;
    result
}
