//! `tributary-bench lookup-load`: a load generator for the lookup API, run as
//! a process of its own (pinned by `bench grpc` to a core the server does not
//! use), so what it measures is the server, not the generator.
//!
//! Open loop (`--rate`): requests are scheduled at fixed intervals whether or
//! not earlier ones have been answered, round-robin over the connections, and
//! each latency is counted from its scheduled time, so a server that falls
//! behind shows it in the latency (no coordinated omission). The scheduler
//! spins on the clock, yielding to the I/O driver between checks, instead of
//! sleeping on tokio's millisecond timer, which would send in bursts.
//!
//! Closed loop (no `--rate`): each connection sends its next request when the
//! previous one is answered, as `sysbench --threads` and `redis-benchmark -c` do.
//!
//! It speaks HTTP/2 with `h2` directly and sends pre-encoded requests, so the
//! generator costs a few microseconds per request. Every answer is checked:
//! a gRPC error or a key not found fails the run. It prints one JSON line.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::{BufMut, Bytes, BytesMut};
use clap::Args;
use h2::client::SendRequest;
use prost::Message as _;
use tokio::net::TcpStream;
use tributary_proto::grpc::v1::value::Kind;
use tributary_proto::grpc::v1::{
    BatchGetRequest, BatchGetResponse, GetRequest, GetResponse, Value,
};

use crate::tables::Keys;

/// Arguments of `tributary-bench lookup-load`.
#[derive(Args)]
pub(crate) struct LoadArgs {
    /// The lookup API's address (`host:port`, plaintext HTTP/2).
    #[arg(long)]
    addr: SocketAddr,
    /// The table to read.
    #[arg(long, default_value = "kv")]
    table: String,
    /// Keys are integers in `0..rows`, all present.
    #[arg(long)]
    rows: u64,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Offered requests per second (open loop); without it, closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Keys per request: 1 sends `Get`, more send `BatchGet`.
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

/// What one run measured (the JSON line it prints).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct LoadResult {
    /// Offered requests/s (open loop), or `None` (closed loop).
    pub(crate) offered: Option<f64>,
    /// Requests answered per second within the measured window.
    pub(crate) achieved: f64,
    /// Requests scheduled in the window and answered.
    pub(crate) answered: u64,
    /// Requests scheduled in the window not answered by its end + 2 s.
    pub(crate) unanswered: u64,
    /// Requests answered over the whole run, warm-up included.
    pub(crate) answered_total: u64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
    /// How late the generator sent (p99, µs): if it is not far below the
    /// latencies, the generator, not the server, was the limit.
    pub(crate) dispatch_late_p99_us: f64,
}

/// Distinct pre-encoded requests the generator cycles through.
const BODIES: usize = 8192;

pub(crate) async fn run(args: LoadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(args.keys > 0, "--keys must be at least 1");
    anyhow::ensure!(args.rows > 0, "--rows must be at least 1");
    let bodies = Rc::new(bodies(&args));
    let method = if args.keys == 1 { "Get" } else { "BatchGet" };
    let uri: http::Uri = format!("http://{}/tributary.v1.Lookup/{method}", args.addr).parse()?;
    let mut clients = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        clients.push(connect(args.addr).await?);
    }
    let call = Rc::new(Caller {
        uri,
        keys: args.keys,
    });
    let local = tokio::task::LocalSet::new();
    let result = local
        .run_until(async {
            match args.rate {
                Some(rate) => open_loop(&args, rate, clients, call, bodies).await,
                None => closed_loop(&args, clients, call, bodies).await,
            }
        })
        .await?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// Latencies of requests scheduled in the measured window, and the window.
struct Tally {
    window: (Instant, Instant),
    latencies: Vec<Duration>,
    /// Answers that completed inside the window (for the achieved rate).
    completed_in_window: u64,
    answered_total: u64,
    failure: Option<anyhow::Error>,
}

impl Tally {
    fn new(window: (Instant, Instant)) -> Rc<RefCell<Tally>> {
        Rc::new(RefCell::new(Tally {
            window,
            latencies: Vec::new(),
            completed_in_window: 0,
            answered_total: 0,
            failure: None,
        }))
    }

    fn record(&mut self, scheduled: Instant, outcome: anyhow::Result<()>) {
        let done = Instant::now();
        if let Err(e) = outcome {
            self.failure.get_or_insert(e);
            return;
        }
        self.answered_total += 1;
        let (from, to) = self.window;
        if (from..to).contains(&done) {
            self.completed_in_window += 1;
        }
        if (from..to).contains(&scheduled) {
            self.latencies.push(done - scheduled);
        }
    }

    fn result(&mut self, offered: Option<f64>, scheduled_in_window: Option<u64>) -> LoadResult {
        let (from, to) = self.window;
        let seconds = (to - from).as_secs_f64();
        let answered = self.latencies.len() as u64;
        self.latencies.sort_unstable();
        let q = |q: f64| -> f64 {
            self.latencies
                .get(((self.latencies.len().max(1) - 1) as f64 * q).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1e6)
        };
        LoadResult {
            offered,
            achieved: self.completed_in_window as f64 / seconds,
            answered,
            unanswered: scheduled_in_window.map_or(0, |s| s.saturating_sub(answered)),
            answered_total: self.answered_total,
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: q(1.0),
            dispatch_late_p99_us: 0.0,
        }
    }
}

async fn open_loop(
    args: &LoadArgs,
    rate: f64,
    clients: Vec<SendRequest<Bytes>>,
    call: Rc<Caller>,
    bodies: Rc<Vec<Bytes>>,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(rate > 0.0, "--rate must be positive");
    let start = Instant::now() + Duration::from_millis(10);
    let from = start + Duration::from_secs_f64(args.warmup);
    let to = from + Duration::from_secs_f64(args.seconds);
    let tally = Tally::new((from, to));
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut scheduled_in_window = 0;
    let mut outstanding = Vec::new();
    let mut prune_at = 4096;
    let mut dispatch_late = Vec::new();
    for i in 0u64.. {
        let due = start + interval.mul_f64(i as f64);
        if due >= to {
            break;
        }
        if due >= from {
            scheduled_in_window += 1;
        }
        wait_until(due).await;
        if due >= from {
            dispatch_late.push(due.elapsed());
        }
        let (client, body) = (
            clients[i as usize % clients.len()].clone(),
            bodies[i as usize % bodies.len()].clone(),
        );
        let (call, tally) = (call.clone(), tally.clone());
        outstanding.push(tokio::task::spawn_local(async move {
            let outcome = call.call(client, body).await;
            tally.borrow_mut().record(due, outcome);
        }));
        if outstanding.len() >= prune_at {
            outstanding.retain(|t| !t.is_finished());
            prune_at = (2 * outstanding.len()).max(4096);
        }
    }
    let drain = tokio::time::sleep_until((to + Duration::from_secs(2)).into());
    let all = futures::future::join_all(outstanding);
    tokio::select! {
        _ = drain => {}
        _ = all => {}
    }
    let mut tally = tally.borrow_mut();
    if let Some(e) = tally.failure.take() {
        return Err(e);
    }
    let mut result = tally.result(Some(rate), Some(scheduled_in_window));
    dispatch_late.sort_unstable();
    result.dispatch_late_p99_us = dispatch_late
        .get(dispatch_late.len().saturating_sub(1) * 99 / 100)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6);
    Ok(result)
}

async fn closed_loop(
    args: &LoadArgs,
    clients: Vec<SendRequest<Bytes>>,
    call: Rc<Caller>,
    bodies: Rc<Vec<Bytes>>,
) -> anyhow::Result<LoadResult> {
    let from = Instant::now() + Duration::from_secs_f64(args.warmup);
    let to = from + Duration::from_secs_f64(args.seconds);
    let tally = Tally::new((from, to));
    let workers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| {
            let (call, tally, bodies) = (call.clone(), tally.clone(), bodies.clone());
            tokio::task::spawn_local(async move {
                for i in (c * 7919).. {
                    let sent = Instant::now();
                    if sent >= to || tally.borrow().failure.is_some() {
                        break;
                    }
                    let outcome = call
                        .call(client.clone(), bodies[i % bodies.len()].clone())
                        .await;
                    tally.borrow_mut().record(sent, outcome);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await?;
    }
    let mut tally = tally.borrow_mut();
    if let Some(e) = tally.failure.take() {
        return Err(e);
    }
    Ok(tally.result(None, None))
}

/// Waits for `due` on the clock: tokio's timer for the part over 2 ms, then
/// yielding to the I/O driver (answers keep arriving) until it is time.
async fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > Duration::from_millis(2) {
            tokio::time::sleep(left - Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// The encoded gRPC messages (length-prefixed) of `BODIES` requests for random keys.
fn bodies(args: &LoadArgs) -> Vec<Bytes> {
    let mut keys = Keys(0x9e37_79b9_7f4a_7c15);
    let mut key = || Value {
        kind: Some(Kind::IntValue(keys.next(args.rows) as i64)),
    };
    (0..BODIES)
        .map(|_| {
            let message = if args.keys == 1 {
                GetRequest {
                    table: args.table.clone(),
                    key: Some(key()),
                    min_position: None,
                    as_of_us: None,
                }
                .encode_to_vec()
            } else {
                BatchGetRequest {
                    table: args.table.clone(),
                    keys: (0..args.keys).map(|_| key()).collect(),
                    min_position: None,
                    as_of_us: None,
                }
                .encode_to_vec()
            };
            let mut framed = BytesMut::with_capacity(5 + message.len());
            framed.put_u8(0);
            framed.put_u32(message.len() as u32);
            framed.put_slice(&message);
            framed.freeze()
        })
        .collect()
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Bytes>> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24)
        .handshake(tcp)
        .await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client.ready().await?)
}

/// Sends one request and checks its answer.
struct Caller {
    uri: http::Uri,
    keys: usize,
}

impl Caller {
    async fn call(&self, client: SendRequest<Bytes>, body: Bytes) -> anyhow::Result<()> {
        let request = http::Request::post(self.uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())?;
        let mut client = client.ready().await?;
        let (response, mut stream) = client.send_request(request, false)?;
        stream.send_data(body, true)?;
        let (head, mut body) = response.await?.into_parts();
        anyhow::ensure!(head.status == 200, "HTTP status {}", head.status);
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        // A failed call may come as headers only ("trailers-only").
        let trailers = body.trailers().await?;
        let status = trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| head.headers.get("grpc-status"));
        if status.is_none_or(|s| s != "0") {
            let message = trailers
                .as_ref()
                .and_then(|t| t.get("grpc-message"))
                .or_else(|| head.headers.get("grpc-message"));
            anyhow::bail!("gRPC status {status:?}: {message:?}");
        }
        anyhow::ensure!(data.len() >= 5, "an answer of {} bytes", data.len());
        let message = &data[5..];
        let found = if self.keys == 1 {
            GetResponse::decode(message)?.found
        } else {
            let answer = BatchGetResponse::decode(message)?;
            answer.results.len() == self.keys && answer.results.iter().all(|r| r.found)
        };
        anyhow::ensure!(found, "a key in 0..rows was not found");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_scheduled_in_the_window_count_and_unanswered_ones_show() {
        let now = Instant::now();
        let from = now.checked_sub(Duration::from_millis(500)).unwrap();
        let to = now + Duration::from_millis(1500);
        let tally = Tally::new((from, to));
        let mut tally = tally.borrow_mut();
        // Sent in the warm-up, answered in the window: counts to the rate only.
        tally.record(from.checked_sub(Duration::from_millis(1)).unwrap(), Ok(()));
        for ms in 1..=4 {
            tally.record(from + Duration::from_millis(ms), Ok(()));
        }
        let result = tally.result(Some(100.0), Some(6));
        assert_eq!(result.answered, 4);
        assert_eq!(result.unanswered, 2);
        assert_eq!(result.answered_total, 5, "the warm-up's answer too");
        assert!(
            (result.achieved - 5.0 / 2.0).abs() < 1e-9,
            "{}",
            result.achieved
        );
        // Latency from the scheduled time: ~0.5 s here.
        assert!(
            (490_000.0..=1_000_000.0).contains(&result.p50_us),
            "{}",
            result.p50_us
        );
        tally.record(from, Err(anyhow::anyhow!("gRPC status 14")));
        assert!(tally.failure.is_some(), "a failed call fails the run");
    }
}
