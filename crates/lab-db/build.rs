// `sqlx::migrate!` embeds migrations/ at compile time, but cargo does not know the macro reads
// that directory: without this, adding a migration leaves a stale binary that never applies it.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
