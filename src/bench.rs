//! `ankusa bench`: throughput, latency, Redis cost and memory on this machine.

use crate::error::Error;

/// Options of `ankusa bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Hooks to commit for the throughput run.
    #[arg(long, default_value_t = 50_000)]
    pub hooks: usize,
}

/// Run the benchmark.
pub async fn run(_args: BenchArgs) -> Result<(), Error> {
    Err(Error::Other("bench: not built yet".into()))
}
