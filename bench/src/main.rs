//! `tributary-bench`: benchmarks that print a table, comparing alternatives
//! side by side in one run (ratios, since shared machines are noisy). A
//! separate binary, so the benchmarks and what they load (MariaDB clients,
//! temporary files, a Redis client) stay out of the `tributary` release.

mod capture;
mod cores;
mod curves;
mod delay_proxy;
mod enrich;
mod grpc;
mod hiccups;
mod instructions;
mod load_gen;
mod measure;
mod pinning;
mod point_peers;
mod postgres;
mod python;
mod redis;
mod remote;
mod series;
mod stack;
mod tables;
mod versions;

use clap::{Parser, Subcommand};

/// Benchmarks of Tributary against the stack of `deploy/local/up.sh`.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Local tables vs MariaDB and Redis lookups; apply rate; restart-to-ready.
    Tables(tables::TablesBenchArgs),
    /// A versioned table's as-of get vs its latest get; disk per version.
    Versions(versions::VersionsBenchArgs),
    /// Enrichment events/s vs the raw consume → produce throughput of the broker.
    Enrich(enrich::EnrichBenchArgs),
    /// A remote table (cache + batching) vs naive per-key SELECTs on MariaDB.
    Remote(remote::RemoteBenchArgs),
    /// Capture rows/s vs the broker's ceiling and mariadb-binlog; snapshot rows/s.
    Capture(capture::CaptureBenchArgs),
    /// PostgreSQL capture rows/s vs the broker's ceiling and pg_recvlogical.
    Postgres(postgres::PostgresBenchArgs),
    /// The lookup API pinned to one core, open and closed loop, vs sysbench
    /// point selects and redis-benchmark GETs; BatchGet(100) vs MariaDB selects.
    Grpc(grpc::GrpcBenchArgs),
    /// How cost grows with the work: curves, side by side with peers, drawn to PNG.
    Curves(curves::CurvesArgs),
    /// Instructions per item of the hot loops, counted by valgrind's callgrind.
    Instructions(instructions::InstructionsArgs),
    /// One hot loop, run by `instructions` under callgrind.
    #[command(hide = true)]
    InstructionLoop(instructions::LoopArgs),
    /// The load generator `grpc` runs on a core of its own (one JSON line out).
    #[command(hide = true)]
    LookupLoad(load_gen::LoadArgs),
    /// The stall meter `grpc` runs on the server's core (one JSON line out).
    #[command(hide = true)]
    Hiccups(hiccups::HiccupArgs),
}

fn main() -> anyhow::Result<()> {
    // The allocator `tributary` runs with, tuned as it is, so the numbers are the service's.
    let untuned = tributary_allocator::tune().err();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TRIBUTARY_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,librdkafka=warn,rdkafka=warn")
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(e) = untuned {
        eprintln!(
            "[bench] cannot set the allocator's purge delay ({e}): measuring with mimalloc's default"
        );
    }
    let command = Cli::parse().command;
    if let Command::InstructionLoop(args) = command {
        return instructions::run_loop(args);
    }
    let runtime = match command {
        // One thread on its core: the generator never waits for another.
        Command::LookupLoad(_) | Command::Hiccups(_) => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        }
        _ => tokio::runtime::Runtime::new()?,
    };
    runtime.block_on(run(command))
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::LookupLoad(args) => load_gen::run(args).await,
        Command::Hiccups(args) => hiccups::run(args),
        Command::Tables(args) => tables::run(args).await,
        Command::Versions(args) => versions::run(args).await,
        Command::Enrich(args) => enrich::run(args).await,
        Command::Remote(args) => remote::run(args).await,
        Command::Capture(args) => capture::run(args).await,
        Command::Postgres(args) => postgres::run(args).await,
        Command::Grpc(args) => grpc::run(args).await,
        Command::Curves(args) => curves::run(args).await,
        Command::Instructions(args) => instructions::run(args).await,
        Command::InstructionLoop(_) => unreachable!("run on a runtime of its own"),
    }
}
