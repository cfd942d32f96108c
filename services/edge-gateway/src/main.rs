use edge_gateway::{Application, Settings};

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
